#include "default_model.h"

#include <filesystem>

#include <fmt/format.h>

namespace sluice::cli {

namespace fs = std::filesystem;

std::vector<std::string> shipped_model_dirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back((exe.parent_path() / "models").string());
    dirs.push_back((exe.parent_path().parent_path() / "share" / "sluice" / "models").string());
  }
#ifdef SLUICE_MODELS_DIR
  dirs.push_back(SLUICE_MODELS_DIR);
#endif
  return dirs;
}

std::optional<std::string> find_shipped_model(const ShippedModel& m) {
  for (const std::string& dir : shipped_model_dirs()) {
    const fs::path p = fs::path(dir) / m.file;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
  }
  return std::nullopt;
}

void add_model_option(CLI::App* c, std::string* model, const std::string& help, const ShippedModel& fallback,
                      const std::string& name) {
  CLI::Option* opt = c->add_option(name, *model, fmt::format("{} (default: the shipped {})", help, fallback.name));
  c->final_callback([opt, model, fallback] {
    if (opt->count() > 0) return;
    const std::optional<std::string> path = find_shipped_model(fallback);
    if (!path) {
      std::string where;
      for (const std::string& d : shipped_model_dirs()) where += (where.empty() ? "" : ", ") + d;
      throw CLI::RequiredError(fmt::format("{}: no model given, and the shipped {} ({}) is in none of: {}", opt->get_name(),
                                           fallback.name, fallback.file, where),
                               CLI::ExitCodes::RequiredError);
    }
    *model = *path;
    fmt::print(stderr, "[sluice] no model given: using the shipped {} ({})\n", fallback.name, *path);
  });
}

}  // namespace sluice::cli
