#include "cli.h"

#include <fmt/format.h>

#include "base/timer.h"

namespace sluice::cli {

int fail(const Status& status) {
  fmt::print(stderr, "error: {}\n", status.message());
  return 1;
}

StatusOr<LoadedModel> load_model(const std::string& path, const ModelOptions& options) {
  Stopwatch sw;
  LoadedModel lm;
  ASSIGN_OR_RETURN(ModelFile mf, open_model_file(path));
  lm.file = std::make_shared<const ModelFile>(std::move(mf));
  ASSIGN_OR_RETURN(lm.tokenizer, Tokenizer::from_metadata(lm.file->metadata));
  ASSIGN_OR_RETURN(lm.model, LlamaModel::load(lm.file, options));
  lm.load_seconds = sw.seconds();
  return lm;
}

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  ASSIGN_OR_RETURN(ModelFile mf, open_model_file(path));
  return Tokenizer::from_metadata(mf.metadata);
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace sluice::cli
