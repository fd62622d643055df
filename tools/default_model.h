// The models shipped in the repository's models/ folder, used when a command is
// given no -m: a newcomer's first `sluice run -p "Once upon a time"` runs a real
// trained model. Looked up, first found wins:
//   <directory of the sluice binary>/models/<file>         a copy laid beside it
//   <directory of the sluice binary>/../share/sluice/models/<file>   `cmake --install`
//   SLUICE_MODELS_DIR/<file>           compiled in: the source tree's models/
// Not thread-safe to register (CLI parsing is single-threaded).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace sluice::cli {

// A shipped model: the name printed in notices and its file name under models/.
struct ShippedModel {
  const char* name;
  const char* file;
};
inline constexpr ShippedModel kDenseModel{"stories260K", "stories260K.gguf"};
inline constexpr ShippedModel kMoeModel{"stories-moe", "stories-moe-f16.gguf"};

// The directories searched for shipped models, in lookup order.
std::vector<std::string> shipped_model_dirs();

// The path of `m`'s file in the first directory holding it; nullopt if none does.
std::optional<std::string> find_shipped_model(const ShippedModel& m);

// Registers the model option `name` ("-m,--model", or "model" for a positional)
// on `c`, not required: when it is not given, after parsing *model is set to
// `fallback`'s path and one line on stderr says which model that is; when no
// copy of `fallback` is found, parsing fails naming the directories searched.
// Uses the subcommand's final callback (no other may be set on `c`).
void add_model_option(CLI::App* c, std::string* model, const std::string& help,
                      const ShippedModel& fallback = kDenseModel, const std::string& name = "-m,--model");

}  // namespace sluice::cli
