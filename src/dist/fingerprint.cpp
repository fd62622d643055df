#include "dist/fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>

namespace sluice::dist {
namespace {

constexpr const char* kVersion = "sluice 0.1.0";

// XXH3 of a file's first `limit` bytes (all of it when smaller).
StatusOr<uint64_t> hash_prefix(const std::filesystem::path& path, uint64_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read {}", path.string());
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  uint64_t left = limit;
  while (left > 0 && in) {
    in.read(buf.data(), static_cast<std::streamsize>(std::min<uint64_t>(left, buf.size())));
    const auto got = static_cast<uint64_t>(in.gcount());
    if (got == 0) break;
    XXH3_64bits_update(st, buf.data(), got);
    left -= got;
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace

StatusOr<Fingerprint> fingerprint(const std::string& model_path) {
  namespace fs = std::filesystem;
  Fingerprint f{.version = kVersion};
  if (auto exe = hash_prefix("/proc/self/exe", ~uint64_t{0}); exe.ok()) f.binary_hash = *exe;
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) {
    // A folder (HF): its small text files' bytes and every file's name and size.
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(model_path, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    uint64_t h = 0;
    for (const fs::path& p : files) {
      const uint64_t size = fs::file_size(p, ec);
      f.model_bytes += size;
      const std::string name = p.filename().string();
      h = XXH3_64bits_withSeed(name.data(), name.size(), h ^ size);
      if (p.extension() == ".json") {
        ASSIGN_OR_RETURN(const uint64_t c, hash_prefix(p, kModelHashBytes));
        h ^= c;
      }
    }
    f.model_hash = h;
    return f;
  }
  const uint64_t size = fs::file_size(model_path, ec);
  if (ec) return not_found("cannot read the model {}: {}", model_path, ec.message());
  f.model_bytes = size;
  ASSIGN_OR_RETURN(f.model_hash, hash_prefix(model_path, kModelHashBytes));
  return f;
}

std::string fingerprint_mismatch(const Fingerprint& a, const Fingerprint& b) {
  if (a.version != b.version) return fmt::format("binary version {} differs from rank 0's {}", b.version, a.version);
  if (a.binary_hash != b.binary_hash)
    return fmt::format("its sluice binary differs from rank 0's (hash {:016x} against {:016x}): run one build",
                       b.binary_hash, a.binary_hash);
  if (a.model_bytes != b.model_bytes || a.model_hash != b.model_hash)
    return fmt::format("its model differs from rank 0's ({} bytes, header hash {:016x} against {} bytes, {:016x})",
                       b.model_bytes, b.model_hash, a.model_bytes, a.model_hash);
  return "";
}

}  // namespace sluice::dist
