#include <sys/stat.h>

#include "format/gguf_reader.h"
#include "format/hf_tokenizer.h"
#include "format/model_file.h"
#include "format/safetensors.h"

namespace sluice {

StatusOr<ModelFile> open_model_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return not_found("{}: no such file or folder", path);
  if (!S_ISDIR(st.st_mode)) return read_gguf(path);
  ASSIGN_OR_RETURN(ModelFile mf, read_hf_model(path));
  RETURN_IF_ERROR(import_hf_tokenizer(path, &mf.metadata).with_context(path));
  return mf;
}

}  // namespace sluice
