// Test helpers for the weights module: a scratch directory on a filesystem that
// takes O_DIRECT when there is one, small files to read back, and a small
// synth model to stream.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "format/model_file.h"
#include "model/synth.h"
#include "model/weight_source.h"

namespace sluice::weights::testing {

// True when `dir` accepts an O_DIRECT open and read (tmpfs does not).
inline bool dir_supports_direct(const std::string& dir) {
  const std::string probe = dir + "/.sluice_direct_probe";
  {
    std::ofstream out(probe, std::ios::binary);
    std::vector<char> block(8192, 'x');
    out.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  bool ok = false;
  const int fd = ::open(probe.c_str(), O_RDONLY | O_DIRECT);
  if (fd >= 0) {
    void* buf = nullptr;
    if (::posix_memalign(&buf, 4096, 4096) == 0) {
      ok = ::pread(fd, buf, 4096, 0) == 4096;
      std::free(buf);
    }
    ::close(fd);
  }
  std::remove(probe.c_str());
  return ok;
}

// A scratch directory for this process: under gtest's TempDir when it takes
// O_DIRECT, else under the build directory (the working directory of ctest).
// Removed when the process exits.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::vector<std::string> candidates = {::testing::TempDir(), "."};
    for (const std::string& base : candidates) {
      std::string d = base + "/sluice_weights_test_" + std::to_string(::getpid());
      ::mkdir(d.c_str(), 0700);
      if (dir_supports_direct(d)) return d;
      ::rmdir(d.c_str());
    }
    std::string d = ::testing::TempDir() + "/sluice_weights_test_" + std::to_string(::getpid());
    ::mkdir(d.c_str(), 0700);
    std::fprintf(stderr, "[weights test] no O_DIRECT-capable scratch directory; testing buffered reads in %s\n",
                 d.c_str());
    return d;
  }();
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return true;
  }();
  (void)cleanup;
  return dir;
}

// Writes n pseudo-random bytes (fixed seed) to `path` and returns them.
inline std::vector<uint8_t> write_random_file(const std::string& path, size_t n, uint64_t seed = 7) {
  std::vector<uint8_t> bytes(n);
  std::mt19937_64 rng(seed);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() >> 56);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
  return bytes;
}

// A small Q8_0 synth model of n_layer layers (n_embd 256, n_ff 768, a
// 1024-token vocabulary: the layers are most of its bytes) written to
// scratch_dir()/name and opened; null, the test failed, when either step fails.
inline std::shared_ptr<const ModelFile> small_synth_model(const std::string& name, int64_t n_layer, uint64_t seed) {
  const std::string path = scratch_dir() + "/" + name;
  SynthShape shape{.name = "s", .n_vocab = 1024, .n_embd = 256, .n_layer = n_layer, .n_head = 8, .n_head_kv = 4,
                   .n_ff = 768, .n_ctx = 256};
  auto written = write_synth_model(SynthOptions{.shape = shape, .type = "q8_0", .seed = seed, .n_threads = 2}, path);
  EXPECT_TRUE(written.ok()) << written.status().to_string();
  if (!written.ok()) return nullptr;
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  if (!mf.ok()) return nullptr;
  return std::make_shared<const ModelFile>(std::move(*mf));
}

// A weight source that forwards every call to another: tests derive from it
// and override the calls they count or check.
class ForwardingSource : public LayerWeightSource {
 public:
  explicit ForwardingSource(std::shared_ptr<LayerWeightSource> s) : s_(std::move(s)) {}
  const uint8_t* resident(const std::string& name) const override { return s_->resident(name); }
  bool reorderable(const uint8_t* data) const override { return s_->reorderable(data); }
  bool device_resident(int64_t layer) const override { return s_->device_resident(layer); }
  std::vector<std::span<const uint8_t>> host_regions() const override { return s_->host_regions(); }
  Status acquire(int64_t layer, LayerWeightPointers* out) override { return s_->acquire(layer, out); }
  void release(int64_t layer) override { s_->release(layer); }
  void end_step(int64_t n_tokens) override { s_->end_step(n_tokens); }
  Status set_schedule(std::span<const int64_t> order) override { return s_->set_schedule(order); }
  bool streams_experts() const override { return s_->streams_experts(); }
  void predict_experts(int64_t layer, std::span<const int32_t> experts) override { s_->predict_experts(layer, experts); }
  Status begin_experts(int64_t layer, std::span<const int32_t> experts, ExpertPointers* out) override {
    return s_->begin_experts(layer, experts, out);
  }
  Status next_expert(int64_t layer, int64_t* index) override { return s_->next_expert(layer, index); }
  void expert_prepared(int64_t layer, int64_t index) override { s_->expert_prepared(layer, index); }
  uint64_t demotable_bytes(int64_t layer) const override { return s_->demotable_bytes(layer); }
  Status demote(int64_t layer) override { return s_->demote(layer); }
  std::span<const uint8_t> layer_region(int64_t layer) const override { return s_->layer_region(layer); }
  ExpertSlotRange expert_slot_range() const override { return s_->expert_slot_range(); }
  Status set_expert_slots(int64_t n) override { return s_->set_expert_slots(n); }
  Status promote(int64_t layer, LayerWeightPointers* out) override { return s_->promote(layer, out); }
  bool next_expert_ready(int64_t layer) const override { return s_->next_expert_ready(layer); }
  bool unprepared_expert(int64_t* layer, int32_t* expert, ExpertPointers* out) const override {
    return s_->unprepared_expert(layer, expert, out);
  }
  void unpinned_expert_prepared(int64_t layer, int32_t expert) override { s_->unpinned_expert_prepared(layer, expert); }
  bool landed_expert(int64_t layer, int32_t expert, ExpertPointers* out) const override {
    return s_->landed_expert(layer, expert, out);
  }
  void set_expert_reuse_hook(ExpertReuseHook hook) override { s_->set_expert_reuse_hook(std::move(hook)); }

 private:
  std::shared_ptr<LayerWeightSource> s_;
};

}  // namespace sluice::weights::testing
