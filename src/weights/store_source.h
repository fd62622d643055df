// StoreWeightSource: the weight store as the model's LayerWeightSource, and the
// one-call setup `sluice run/bench --mem-budget` use.
//
// open_streaming() measures this machine with the planner's probes (the decode
// roof, matmul FLOP/s, O_DIRECT read rate of the model file itself),
// estimates compute per layer for the expected tokens per step with the same
// roofline the planner uses, plans the placement (ring size from plan_stream)
// and opens the store. A budget that cannot work is refused with the smallest
// one that would.
#pragma once

#include <memory>
#include <string>

#include "model/weight_source.h"
#include "weights/weight_store.h"

namespace sluice::weights {

class StoreWeightSource : public LayerWeightSource {
 public:
  explicit StoreWeightSource(std::unique_ptr<WeightStore> store) : store_(std::move(store)) {}
  const uint8_t* resident(const std::string& name) const override { return store_->resident_tensor(name); }
  Status acquire(int64_t layer, LayerWeightPointers* out) override;
  void release(int64_t layer) override { store_->release(layer); }
  void end_step(int64_t n_tokens) override { store_->end_step(n_tokens); }
  WeightStore& store() { return *store_; }
  const WeightStore& store() const { return *store_; }

 private:
  std::unique_ptr<WeightStore> store_;
};

struct StreamingOptions {
  uint64_t mem_budget_bytes = 0;  // compute-tier budget for weights
  int n_threads = 0;
  int64_t tokens_per_step = 1;    // what the compute estimate is for (1 = decode)
  bool direct = true;             // O_DIRECT (false: buffered reads, for filesystems without it)
};

struct StreamingSetup {
  std::shared_ptr<StoreWeightSource> source;
  std::string report;  // measured rates, estimate and the placement map
};

StatusOr<StreamingSetup> open_streaming(std::shared_ptr<const ModelFile> file, const StreamingOptions& options);

}  // namespace sluice::weights
