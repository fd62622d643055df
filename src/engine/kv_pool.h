// The engine's device KV pool, sized from its config and the model's shape:
// once when the model's shape is known and before its weights are prepared
// (the part of --gpu-budget kept for it, ModelOptions::device_reserve), and
// again when the engine creates it; the same answer both times.
#pragma once

#include <cstdint>
#include <string>

#include "kv/kv_store.h"
#include "sluice/engine.h"
#include "sluice/status.h"

namespace sluice {

struct KvShape;

// --kv-dtype: "auto" (or "") is the model's own choice.
StatusOr<KvDtype> parse_kv_dtype(const std::string& s, KvDtype automatic);

// The device KV pool: its layout and block count, from --kv-budget or else
// room for a quarter of max_seqs at full length, where a sequence with a
// window on every layer holds at most the window's blocks; never less than one
// sequence needs (with a window: the window's blocks and a chunk's, see
// Scheduler::add), and at most 4 GiB beyond that. Asked before the weights are
// prepared too (ModelOptions::device_reserve), so it depends on the model's
// KV shape alone (model.h).
struct KvPool {
  KvLayout layout;
  int64_t block_bytes = 0;
  int64_t window = 0;
  int64_t n_blocks = 0;
};

StatusOr<KvPool> plan_kv_pool(const EngineConfig& config, const KvShape& shape);

}  // namespace sluice
