// The KV cache half of CudaBackend: the cache in device memory, block copies
// and moves, and attention over it (qkv_store, attention).
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_flash_attn.cuh"
#include "backend/cuda/cuda_kernels.cuh"
#include "base/check.h"
#include "kv/kv_store.h"

namespace sluice::cuda {
namespace {

constexpr int64_t kMaxHeadDim = 256;    // attention_kernel<8>
constexpr int64_t kTargetBlocks = 264;  // two waves of 132 SMs: below it, attention splits the keys

KvLayerDev kv_layer(const KvStore& kv, int64_t layer) {
  const KvLayout& l = kv.layout();
  const int64_t n_slices = kv.n_slices();
  return KvLayerDev{.k = const_cast<uint8_t*>(kv.k_layer(layer)),
                    .v = const_cast<uint8_t*>(kv.v_layer(layer)),
                    .block_bytes = static_cast<int64_t>(kv.block_bytes()),
                    .block_size = static_cast<int32_t>(l.block_size),
                    .slice_len = static_cast<int32_t>(l.n_embd_kv / n_slices),
                    .slice_bytes = static_cast<int32_t>(kv.row_bytes() / static_cast<size_t>(n_slices)),
                    .elem_bytes = l.dtype == KvDtype::kF32 ? 4 : 2};
}

}  // namespace

StatusOr<KvStore> CudaBackend::create_kv(const KvLayout& layout, int64_t n_blocks) {
  flush_add();
  settle();
  if (layout.dtype != KvDtype::kF32 && layout.dtype != KvDtype::kF16)
    return unimplemented("the cuda backend keeps the KV cache in f32 or f16, not {}", kv_dtype_name(layout.dtype));
  ASSIGN_OR_RETURN(size_t side, KvStore::side_bytes(layout, n_blocks));
  size_t free_bytes = 0, total = 0;
  SLUICE_CUDA_OK(cudaMemGetInfo(&free_bytes, &total));
  if (2 * side > free_bytes)
    return resource_exhausted("KV cache of {:.2f} GiB does not fit in the {:.2f} GiB free on the GPU",
                              2.0 * static_cast<double>(side) / (1 << 30), static_cast<double>(free_bytes) / (1 << 30));
  uint8_t* mem = nullptr;
  SLUICE_CUDA_OK(cudaMalloc(&mem, 2 * side));
  SLUICE_CUDA_OK(cudaMemset(mem, 0, 2 * side));
  std::shared_ptr<void> owner(mem, [](void* p) { cudaFree(p); });
  return KvStore::create_external(layout, n_blocks, std::move(owner), mem, mem + side);
}

StatusOr<KvStore> CudaBackend::create_kv_reserved(const KvLayout& layout, int64_t n_blocks, int64_t n_backed) {
  flush_add();
  settle();
  if (layout.dtype != KvDtype::kF32 && layout.dtype != KvDtype::kF16)
    return unimplemented("the cuda backend keeps the KV cache in f32 or f16, not {}", kv_dtype_name(layout.dtype));
  ASSIGN_OR_RETURN(const size_t side, KvStore::side_bytes(layout, n_blocks));
  const size_t block_bytes = side / static_cast<size_t>(layout.n_layer) / static_cast<size_t>(n_blocks);
  ASSIGN_OR_RETURN(std::shared_ptr<KvReservation> r, KvReservation::create(block_bytes, layout.n_layer, n_blocks));
  RETURN_IF_ERROR(r->back(n_backed));
  kv_reserved_ = r;
  uint8_t* k = r->k();
  uint8_t* v = r->v();
  const size_t stride = r->layer_stride();
  return KvStore::create_external(layout, n_blocks, std::move(r), k, v, stride);
}

Status CudaBackend::resize_kv(KvStore& kv, int64_t n_backed) {
  const std::shared_ptr<KvReservation> r = kv_reserved_.lock();
  if (!r || kv.k_layer(0) != r->k()) return Backend::resize_kv(kv, n_backed);  // a store of fixed size
  if (n_backed < 1 || n_backed > kv.n_blocks())
    return invalid_argument("a KV store of {} blocks cannot back {}", kv.n_blocks(), n_backed);
  flush_add();
  settle();
  return r->back(n_backed);
}

void CudaBackend::copy_kv_block(KvStore& kv, int32_t src, int32_t dst) {
  flush_add();
  settle();
  CHECK(src >= 0 && src < kv.n_blocks() && dst >= 0 && dst < kv.n_blocks());
  const size_t bb = kv.block_bytes();
  for (int64_t l = 0; l < kv.layout().n_layer; ++l) {
    SLUICE_CUDA_OK(cudaMemcpyAsync(kv.k_layer(l) + dst * bb, kv.k_layer(l) + src * bb, bb, cudaMemcpyDeviceToDevice, stream_));
    SLUICE_CUDA_OK(cudaMemcpyAsync(kv.v_layer(l) + dst * bb, kv.v_layer(l) + src * bb, bb, cudaMemcpyDeviceToDevice, stream_));
  }
}

void CudaBackend::move_kv_block(const KvStore& from, int32_t src, KvStore& to, int32_t dst) {
  flush_add();
  settle();
  CHECK(from.block_bytes() == to.block_bytes() && from.layout().n_layer == to.layout().n_layer);
  CHECK(src >= 0 && src < from.n_blocks() && dst >= 0 && dst < to.n_blocks());
  const size_t bb = from.block_bytes();
  // KV swap traffic through the copy queue (after the kernels enqueued so
  // far), a transfer per layer; the host waits for all of it: host memory
  // may be pageable and is read right after.
  if (!swap_after_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&swap_after_, cudaEventDisableTiming));
  SLUICE_CUDA_OK(cudaEventRecord(swap_after_, stream_));
  CopyQueue& q = copy_queue();
  swap_ids_.clear();
  for (int64_t l = 0; l < from.layout().n_layer; ++l) {
    const CopyPiece kv[2] = {{to.k_layer(l) + dst * bb, from.k_layer(l) + src * bb, bb},
                             {to.v_layer(l) + dst * bb, from.v_layer(l) + src * bb, bb}};
    swap_ids_.push_back(q.submit(CopyClass::kSwap, kv, swap_after_));
  }
  for (CopyQueue::Id id : swap_ids_) {
    q.sync(id);
    q.retire(id);
  }
}

void CudaBackend::qkv_store(const QkvStoreArgs& a) {
  graph_->tick();  // once a layer: a recorded step's segments end here
  flush_add();
  const int64_t n_q = a.n_head * a.head_dim, n_kv = a.n_head_kv * a.head_dim;
  const auto* rows = static_cast<const int64_t*>(
      kv_rows_.upload(a.kv_rows, static_cast<size_t>(a.n_tok) * sizeof(int64_t), stream_));
  launch_qkv_store({.q = a.q, .k = a.k, .v = a.v, .bq = vec(a.bq, n_q), .bk = vec(a.bk, n_kv), .bv = vec(a.bv, n_kv),
                    .q_norm = vec(a.q_norm, a.head_dim), .k_norm = vec(a.k_norm, a.head_dim), .norm_eps = a.norm_eps,
                    .cos_sin = a.cos_sin, .kv_rows = rows, .n_tok = static_cast<int32_t>(a.n_tok),
                    .n_head = static_cast<int32_t>(a.n_head), .n_head_kv = static_cast<int32_t>(a.n_head_kv),
                    .head_dim = static_cast<int32_t>(a.head_dim), .n_rot = static_cast<int32_t>(a.n_rot),
                    .rope = a.rope, .kv = kv_layer(*a.kv, a.layer)},
                   stream_);
}

void CudaBackend::attention(const AttentionArgs& a) {
  flush_add();
  CHECK(a.head_dim <= kMaxHeadDim && a.n_head % a.n_head_kv == 0);
  const int64_t bs = a.kv->layout().block_size;
  const KvLayerDev kvd = kv_layer(*a.kv, a.layer);
  // A sequence with many query tokens goes to flash attention (cuda_flash_attn.cuh).
  const bool flash_shape = flash_attention_takes(a.head_dim, kvd);
  auto flash = [&](const AttentionSeq& s) {
    return flash_shape && s.n_tok >= kFlashMinQueries && reinterpret_cast<uintptr_t>(s.q) % 8 == 0 &&
           reinterpret_cast<uintptr_t>(s.out) % 8 == 0;
  };
  // Host packing: [n_query] AttnQuery, [n_tiles] FlashTile, then every sequence's block table.
  int64_t n_query = 0, n_tiles = 0, n_table = 0, max_keys = 0;
  for (const AttentionSeq& s : a.seqs) {
    if (flash(s)) n_tiles += (s.n_tok + kFlashRows - 1) / kFlashRows;
    else n_query += s.n_tok;
    n_table += (s.pos0 + s.n_tok + bs - 1) / bs;
  }
  const size_t q_bytes = static_cast<size_t>(n_query) * sizeof(AttnQuery);
  const size_t t_bytes = static_cast<size_t>(n_tiles) * sizeof(FlashTile);
  pack_.resize(q_bytes + t_bytes + static_cast<size_t>(n_table) * sizeof(int32_t));
  auto* queries = reinterpret_cast<AttnQuery*>(pack_.data());
  auto* tiles = reinterpret_cast<FlashTile*>(pack_.data() + q_bytes);
  auto* tables = reinterpret_cast<int32_t*>(pack_.data() + q_bytes + t_bytes);
  int64_t qi = 0, fi = 0, ti = 0;
  const int64_t row = a.n_head * a.head_dim;
  for (const AttentionSeq& s : a.seqs) {
    const int64_t n_entries = (s.pos0 + s.n_tok + bs - 1) / bs;
    std::memcpy(tables + ti, s.block_table, static_cast<size_t>(n_entries) * sizeof(int32_t));
    if (flash(s)) {  // the last tiles (most keys) first: they start first
      for (int64_t t = (s.n_tok - 1) / kFlashRows * kFlashRows; t >= 0; t -= kFlashRows)
        tiles[fi++] = FlashTile{.q = s.q + t * row, .out = s.out + t * row, .pos = static_cast<int32_t>(s.pos0 + t),
                                .n_rows = static_cast<int32_t>(std::min<int64_t>(kFlashRows, s.n_tok - t)),
                                .table = static_cast<int32_t>(ti)};
      ti += n_entries;
      continue;
    }
    for (int64_t t = 0; t < s.n_tok; ++t) {
      const int64_t pos = s.pos0 + t, lo = a.window > 0 ? std::max<int64_t>(0, pos - a.window + 1) : 0;
      queries[qi++] = AttnQuery{.q = s.q + t * row, .out = s.out + t * row, .lo = static_cast<int32_t>(lo),
                                .pos = static_cast<int32_t>(pos), .table = static_cast<int32_t>(ti)};
      max_keys = std::max(max_keys, pos - lo + 1);
    }
    ti += n_entries;
  }
  const auto* dev = static_cast<const uint8_t*>(attn_.upload(pack_.data(), pack_.size(), stream_));
  const auto* dev_tables = reinterpret_cast<const int32_t*>(dev + q_bytes + t_bytes);
  if (n_tiles > 0)
    launch_flash_attention({.tiles = reinterpret_cast<const FlashTile*>(dev + q_bytes), .tables = dev_tables,
                            .n_tiles = static_cast<int32_t>(n_tiles), .n_head = static_cast<int32_t>(a.n_head),
                            .n_head_kv = static_cast<int32_t>(a.n_head_kv), .head_dim = static_cast<int32_t>(a.head_dim),
                            .window = static_cast<int32_t>(a.window), .scale = a.scale, .softcap = a.softcap, .kv = kvd},
                           stream_);
  if (n_query == 0) return;
  // Few (query, head) pairs (decode): split the keys so the GPU has blocks enough.
  const int64_t items = n_query * a.n_head;
  int64_t n_split = 1;
  if (items < kTargetBlocks && max_keys > 64) {
    n_split = std::min({(kTargetBlocks + items - 1) / items, (max_keys + 31) / 32, kMaxSplitItems / items});
    n_split = std::max<int64_t>(n_split, 1);
  }
  const int64_t per_split = (max_keys + n_split - 1) / n_split;
  launch_attention({.queries = reinterpret_cast<const AttnQuery*>(dev),
                    .tables = dev_tables,
                    .n_query = static_cast<int32_t>(n_query), .n_head = static_cast<int32_t>(a.n_head),
                    .n_head_kv = static_cast<int32_t>(a.n_head_kv), .head_dim = static_cast<int32_t>(a.head_dim),
                    .scale = a.scale, .softcap = a.softcap, .n_split = static_cast<int32_t>(n_split),
                    .keys_per_split = static_cast<int32_t>(per_split),
                    .partial = scratch(kPartial, kMaxSplitItems * (a.head_dim + 2)), .kv = kvd},
                   stream_);
}

}  // namespace sluice::cuda
