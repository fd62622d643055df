#include "format/model_file.h"

#include <sys/stat.h>

#include <fmt/format.h>

#include "format/gguf_reader.h"
#include "format/safetensors.h"

namespace sluice {

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

const TensorInfo* ModelFile::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const uint8_t* ModelFile::own(std::vector<uint8_t> bytes) {
  owned_.push_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes)));
  return owned_.back()->data();
}

uint64_t ModelFile::total_tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.n_bytes;
  return n;
}

StatusOr<ModelFile> open_model_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return not_found("{}: no such file or folder", path);
  if (S_ISDIR(st.st_mode)) return read_hf_model(path);
  return read_gguf(path);
}

}  // namespace sluice
