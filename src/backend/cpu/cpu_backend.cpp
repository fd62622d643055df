#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/fast_ops.h"
#include "backend/cpu/float_matmul.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/repack.h"
#include "backend/rope_tables.h"
#include "backend/host_buffer.h"
#include "base/check.h"
#include "base/huge_buffer.h"
#include "kv/kv_store.h"
#include "quant/quant.h"

namespace sluice::cpu {
namespace {

// Prepared weights: one arena on huge pages.
class ArenaBuffer final : public Buffer {
 public:
  explicit ArenaBuffer(size_t bytes) : buf_(bytes) {}
  uint8_t* data() override { return buf_.data(); }
  size_t size() const override { return buf_.size(); }

 private:
  HugeBuffer buf_;
};

KvRowType row_type(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32: return KvRowType::kF32;
    case KvDtype::kF16: return KvRowType::kF16;
    case KvDtype::kQ8_0: return KvRowType::kQ8_0;
  }
  return KvRowType::kF32;
}

template <typename T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : pool_(std::make_unique<ThreadPool>(options.n_threads)),
      isa_(std::min(options.isa, max_supported_isa())),
      train_ops_(*pool_, isa_) {}

std::string CpuBackend::name() const { return fmt::format("cpu {}", isa_name(isa_)); }

bool CpuBackend::supports(Op op, const OpTypes& types) const {
  switch (op) {
    case Op::kMatmul:
    case Op::kNormMatmul:
    case Op::kLogits:
    case Op::kEmbed:
      return matmul_runs(types.weight);  // a kernel, or the reference fallback (matmul.h)
    case Op::kGluMatmul:
      return matmul_runs(types.weight);  // SwiGLU and GeGLU
    case Op::kExpertFfn:
      return matmul_runs(types.weight) && types.act == Activation::kSilu;
    case Op::kQkvStore:
    case Op::kAttention:
    case Op::kRoute:
    case Op::kRopeTables:
    case Op::kAdd:
    case Op::kRmsnorm:
      return true;  // f32, f16 and q8_0 K/V
    case Op::kLora:
      return true;  // f32 factors
    case Op::kMatmulT:
      return train_ops_.supports_matmul_t(types.weight, WeightLayout::kRows);  // and the repacked layouts
    case Op::kForwardMatmul:
      return train_ops_.supports_forward_matmul(types.weight, WeightLayout::kRows);
    case Op::kRmsnormBackward:
    case Op::kRope:
    case Op::kGlu:
    case Op::kGluBackward:
    case Op::kTrainAttention:
    case Op::kTrainAttentionBackward:
    case Op::kCrossEntropy:
    case Op::kLoraBackward:
    case Op::kAdamW:
    case Op::kAddRows:
    case Op::kGatherRows:
    case Op::kSlotSum:
    case Op::kSlotSumBackward:
    case Op::kGatedAdd:
    case Op::kGatedAddBackward:
      return true;  // CpuTrainOps
  }
  return false;
}

ActRounding CpuBackend::matmul_act_rounding(DType weight, int64_t) const {
  const MatmulKernel& k = matmul_kernel(weight, isa_);
  if (k.act_row_bytes == act_row_bytes_q8x64) return ActRounding::kInt8Blocks32;
  if (k.act_row_bytes == act_row_bytes_q8x256) return ActRounding::kInt8Blocks256;
  if (k.act_row_bytes == float_act_row_bytes_bf16) return ActRounding::kBF16;
  return ActRounding::kNone;
}

std::unique_ptr<Buffer> CpuBackend::alloc(size_t bytes) { return std::make_unique<HostBuffer>(bytes); }

void CpuBackend::reserve(const ScratchNeeds& n) {
  needs_.n_tok = std::max(needs_.n_tok, n.n_tok);
  needs_.n_in_max = std::max(needs_.n_in_max, n.n_in_max);
  grow(act_, matmul_scratch_bytes(std::max<int64_t>(1, n.n_tok), std::max<int64_t>(1, n.n_in_max)));
  if (n.n_head > 0 && n.n_head_kv > 0) {
    grow(attn_partials_, paged_attention_partials_floats(n.n_tok * n.n_head_kv, n.n_ctx, n.n_head, n.n_head_kv,
                                                         n.head_dim, pool_->n_threads()));
  }
  grow(attn_seqs_, static_cast<size_t>(std::max<int64_t>(1, n.max_seqs)));
  needs_.lora_rank = std::max(needs_.lora_rank, n.lora_rank);
  grow(lora_u_, static_cast<size_t>(needs_.n_tok * needs_.lora_rank));
  if (n.n_expert > 0) {
    const auto pairs = static_cast<size_t>(n.n_tok * n.n_used);
    grow(expert_count_, static_cast<size_t>(n.n_expert));
    grow(expert_start_, static_cast<size_t>(n.n_expert + 1));
    grow(route_order_, 2 * pairs);
    grow(expert_x_, static_cast<size_t>(n.n_tok * n.n_embd));
    grow(expert_gate_, static_cast<size_t>(n.n_tok * n.n_ff_expert));
    grow(expert_up_, static_cast<size_t>(n.n_tok * n.n_ff_expert));
    grow(expert_y_, pairs * static_cast<size_t>(n.n_embd));
    grow(shared_gate_, static_cast<size_t>(n.n_tok * n.n_ff_shared));
    grow(shared_up_, static_cast<size_t>(n.n_tok * n.n_ff_shared));
    grow(shared_y_, static_cast<size_t>(n.n_tok * n.n_embd));
  }
}

StatusOr<KvStore> CpuBackend::create_kv(const KvLayout& layout, int64_t n_blocks) {
  return KvStore::create(layout, n_blocks);
}

void CpuBackend::copy_kv_block(KvStore& kv, int32_t src, int32_t dst) { kv.copy_block(src, dst); }

void CpuBackend::move_kv_block(const KvStore& from, int32_t src, KvStore& to, int32_t dst) {
  KvStore::move_block(from, src, to, dst);
}

void CpuBackend::in_place_layouts(std::span<const WeightView> group, WeightLayout* layouts) const {
  // What prepare_weights would choose (all rows at the scalar level, or if any
  // matrix has no layout). Worth it for a landed expert, used only a few times
  // before it gives way, because repack_rows_at runs near copy speed from AVX2 up.
  group_layouts(group, isa_, layouts);
}

void CpuBackend::prepare_in_place(std::span<WeightView> group) {
  CHECK(group.size() <= 4);
  WeightLayout layouts[4];
  in_place_layouts(group, layouts);
  for (size_t i = 0; i < group.size(); ++i) {
    WeightView& w = group[i];
    if (layouts[i] == WeightLayout::kRows || w.layout == layouts[i]) continue;
    CHECK(w.layout == WeightLayout::kRows);
    // A group of rows occupies the same bytes in both layouts, so each group is
    // copied aside and repacked back where it was.
    const int64_t rows = repack_group_rows(layouts[i]);
    const size_t group_bytes = row_bytes(w.type, w.n_in) * static_cast<size_t>(rows);
    uint8_t* data = const_cast<uint8_t*>(w.data);  // the caller's writable memory (contract above)
    const WeightLayout layout = layouts[i];
    const int64_t n_in = w.n_in;
    pool_->parallel_for(w.n_out / rows, [&](int64_t g0, int64_t g1) {
      // Grows once per thread to the largest row group seen, then is reused.
      thread_local std::vector<uint8_t> aside;
      if (aside.size() < group_bytes) aside.resize(group_bytes);
      for (int64_t g = g0; g < g1; ++g) {
        uint8_t* base = data + static_cast<size_t>(g) * group_bytes;
        std::memcpy(aside.data(), base, group_bytes);
        repack_rows_at(isa_, layout, aside.data(), base, n_in, 0, rows);
      }
    });
    w.layout = layout;
  }
}

PreparedWeights CpuBackend::prepare_weights(std::span<const WeightGroup> groups) {
  PreparedWeights out;
  if (isa_ == Isa::kScalar) return out;  // the scalar kernels read GGUF rows
  // Matrices sharing a dispatch are repacked together or not at all
  // (group_layouts); the others are copied as they are: every matrix ends up
  // in the arena below.
  struct Job {
    WeightView* w;
    WeightLayout layout;
  };
  std::vector<Job> jobs;
  for (const WeightGroup& g : groups) {
    CHECK(g.size() <= 4);
    WeightView views[4];
    WeightLayout layouts[4];
    for (size_t i = 0; i < g.size(); ++i) views[i] = *g[i];
    group_layouts(std::span(views, g.size()), isa_, layouts);
    for (size_t i = 0; i < g.size(); ++i) jobs.push_back({g[i], layouts[i]});
  }
  if (jobs.empty()) return out;

  // One arena (64-byte aligned slices) on huge pages: decode streams all of it
  // every token, and with 4 KiB pages of the mapping it would take a page walk
  // every few rows.
  auto matrix_bytes = [](const WeightView& w) { return row_bytes(w.type, w.n_in) * static_cast<size_t>(w.n_out); };
  size_t total = 0;
  for (const Job& j : jobs) total += (matrix_bytes(*j.w) + 63) / 64 * 64;
  out.arena = std::make_unique<ArenaBuffer>(total);
  uint8_t* next = out.arena->data();
  unsigned layouts_used = 0;  // bit (1 << WeightLayout)
  for (const Job& j : jobs) {
    WeightView* w = j.w;
    const size_t bytes = matrix_bytes(*w);
    const int64_t group = j.layout == WeightLayout::kRows ? 64 : repack_group_rows(j.layout);
    const size_t rb = row_bytes(w->type, w->n_in);
    pool_->parallel_for((w->n_out + group - 1) / group, [&](int64_t g0, int64_t g1) {
      const int64_t r0 = g0 * group, r1 = std::min(w->n_out, g1 * group);
      if (j.layout == WeightLayout::kRows)
        std::memcpy(next + r0 * rb, w->data + r0 * rb, static_cast<size_t>(r1 - r0) * rb);
      else
        repack_rows_at(isa_, j.layout, w->data, next, w->n_in, r0, r1);
    });
    w->data = next;
    w->layout = j.layout;
    next += (bytes + 63) / 64 * 64;
    if (j.layout == WeightLayout::kRows) {
      out.copied_bytes += bytes;
    } else {
      out.repacked_bytes += bytes;
      ++out.n_repacked;
      layouts_used |= 1u << static_cast<unsigned>(j.layout);
    }
  }
  std::string layouts;
  for (WeightLayout l : kRepackedLayouts)
    if (layouts_used & (1u << static_cast<unsigned>(l)))
      layouts += fmt::format("{}{} ({}-row interleave)", layouts.empty() ? "" : ", ", layout_name(l),
                             repack_group_rows(l));
  if (out.n_repacked > 0)
    out.summary = fmt::format("{} matrices repacked at load to {} ({:.1f} MiB)", out.n_repacked, layouts,
                              static_cast<double>(out.repacked_bytes) / (1 << 20));
  if (out.copied_bytes > 0)
    out.summary += fmt::format("{}{:.1f} MiB of GGUF rows copied", out.summary.empty() ? "" : ", ",
                               static_cast<double>(out.copied_bytes) / (1 << 20));
  out.summary += " into memory on huge pages";
  return out;
}

void CpuBackend::embed(const WeightView& table, std::span<const int32_t> tokens, float scale, float* x) {
  const size_t rb = row_bytes(table.type, table.n_in);
  for (size_t t = 0; t < tokens.size(); ++t) {
    float* row = x + static_cast<int64_t>(t) * table.n_in;
    dequantize_row(table.type, table.data + static_cast<size_t>(tokens[t]) * rb, row, table.n_in);
    if (scale != 1.0f)
      for (int64_t i = 0; i < table.n_in; ++i) row[i] *= scale;
  }
}

void CpuBackend::rope_tables(std::span<const int64_t> positions, std::span<const double> inv_freq, double magnitude,
                              float* cos_sin) {
  rope_cos_sin(positions, inv_freq, magnitude, cos_sin);
}

void CpuBackend::matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok) {
  matmul_group(outs, x, n_in, n_tok, act_.data(), *pool_, isa_);
}

void CpuBackend::norm_matmul(const NormMatmulArgs& a) {
  // The norm runs token by token on the thread that then converts the row.
  matmul_group(a.outs, a.xn, a.n_embd, a.n_tok, act_.data(), *pool_, isa_, [&](int64_t t0, int64_t t1) {
    fast::rmsnorm(a.x + t0 * a.n_embd, a.norm, a.xn + t0 * a.n_embd, t1 - t0, a.n_embd, a.eps, isa_);
  });
}

void CpuBackend::glu_matmul(const GluMatmulArgs& a) {
  const MatmulOut out[1] = {a.out};
  const bool gelu = a.act == Activation::kGelu;
  matmul_group(out, a.gate, a.n_ff, a.n_tok, act_.data(), *pool_, isa_, [&](int64_t t0, int64_t t1) {
    float* g = a.gate + t0 * a.n_ff;
    const float* u = a.up + t0 * a.n_ff;
    if (gelu) fast::geglu(g, u, g, (t1 - t0) * a.n_ff, isa_);
    else fast::swiglu(g, u, g, (t1 - t0) * a.n_ff, isa_);
  });
}

void CpuBackend::qkv_store(const QkvStoreArgs& a) {
  KvStore& kv = *a.kv;
  const int64_t n_q = a.n_head * a.head_dim;
  const int64_t n_kv = a.n_head_kv * a.head_dim;
  uint8_t* k_rows = kv.k_layer(a.layer);
  uint8_t* v_rows = kv.v_layer(a.layer);
  // The rows are asked for (for writing) before the bias and RoPE work: their
  // slices are scattered over the block, each a cache miss otherwise.
  auto tokens = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      kv.prefetch_row(k_rows, a.kv_rows[t]);
      kv.prefetch_row(v_rows, a.kv_rows[t]);
      float* q = a.q + t * n_q;
      float* k = a.k + t * n_kv;
      float* v = a.v + t * n_kv;
      if (a.bq) fast::add(q, a.bq, q, n_q, isa_);
      if (a.bk) fast::add(k, a.bk, k, n_kv, isa_);
      if (a.bv) fast::add(v, a.bv, v, n_kv, isa_);
      // Per-head norms: each head is one row of head_dim.
      if (a.q_norm) fast::rmsnorm(q, a.q_norm, q, a.n_head, a.head_dim, a.norm_eps, isa_);
      if (a.k_norm) fast::rmsnorm(k, a.k_norm, k, a.n_head_kv, a.head_dim, a.norm_eps, isa_);
      const float* cs = a.cos_sin + t * a.n_rot;
      fast::rope(q, a.n_head, a.head_dim, a.n_rot, cs, a.rope, isa_);
      fast::rope(k, a.n_head_kv, a.head_dim, a.n_rot, cs, a.rope, isa_);
      kv.store_row(k, k_rows, a.kv_rows[t]);
      kv.store_row(v, v_rows, a.kv_rows[t]);
    }
  };
  // Tokens are claimed one at a time when there is enough work (a vCPU the
  // machine slows down then takes fewer).
  if (a.n_tok >= 4) pool_->parallel_for_claimed(a.n_tok, 1, tokens);
  else tokens(0, a.n_tok);
}

void CpuBackend::attention(const ::sluice::AttentionArgs& a) {
  CHECK(a.seqs.size() <= attn_seqs_.size());
  for (size_t i = 0; i < a.seqs.size(); ++i) {
    const AttentionSeq& s = a.seqs[i];
    attn_seqs_[i] = PagedSeq{.q = s.q, .out = s.out, .n_tokens = s.n_tok, .pos0 = s.pos0, .block_table = s.block_table};
  }
  const KvStore& kv = *a.kv;
  paged_attention(PagedAttentionArgs{.seqs = std::span(attn_seqs_.data(), a.seqs.size()),
                                     .kv = {.k = kv.k_layer(a.layer), .v = kv.v_layer(a.layer),
                                            .row_bytes = kv.row_bytes(), .block_size = kv.layout().block_size,
                                            .type = row_type(kv.layout().dtype), .n_slices = kv.n_slices()},
                                     .n_head = a.n_head, .n_head_kv = a.n_head_kv, .head_dim = a.head_dim,
                                     .scale = a.scale, .window = a.window, .softcap = a.softcap},
                  attn_partials_.data(), attn_partials_.size(), *pool_, isa_);
}

void CpuBackend::expert_ffn(const ExpertFfnArgs& a) {
  const auto n_expert = static_cast<int64_t>(a.experts.size());
  const int64_t n_pairs = a.n_tok * a.n_used;
  CHECK(n_expert <= static_cast<int64_t>(expert_count_.size()) && n_pairs * 2 <= static_cast<int64_t>(route_order_.size()));
  // Group the (token, slot) pairs by expert, tokens in order inside a group:
  //   order[start[e] .. start[e+1]) = pairs routed to e;  slot_of[pair] = its row in the grouped outputs.
  int64_t* order = route_order_.data();
  int64_t* row_of = route_order_.data() + n_pairs;
  std::fill_n(expert_count_.begin(), n_expert, 0);
  for (int64_t p = 0; p < n_pairs; ++p) ++expert_count_[static_cast<size_t>(a.ids[p])];
  expert_start_[0] = 0;
  for (int64_t e = 0; e < n_expert; ++e) expert_start_[e + 1] = expert_start_[e] + expert_count_[e];
  std::fill_n(expert_count_.begin(), n_expert, 0);
  for (int64_t p = 0; p < n_pairs; ++p) {
    const int64_t e = a.ids[p];
    const int64_t row = expert_start_[e] + expert_count_[e]++;
    order[row] = p;
    row_of[p] = row;
  }
  // The shared expert over every token (first: streamed experts may still be reading).
  if (a.shared) {
    const MatmulOut gate_up[2] = {{a.shared->gate, shared_gate_.data()}, {a.shared->up, shared_up_.data()}};
    matmul_group(gate_up, a.x, a.n_embd, a.n_tok, act_.data(), *pool_, isa_);
    glu_matmul({.gate = shared_gate_.data(), .up = shared_up_.data(), .n_ff = a.n_ff_shared, .n_tok = a.n_tok,
                .act = a.act, .out = {a.shared->down, shared_y_.data()}});
  }
  // Each selected expert: gather its tokens, gate/up in one dispatch, the
  // activation and down in another, into its rows of expert_y_.
  auto run_expert = [&](int64_t e) {
    const int64_t n = expert_count_[e];
    const ExpertWeights& w = a.experts[static_cast<size_t>(e)];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = order[expert_start_[e] + i] / a.n_used;
      std::memcpy(expert_x_.data() + i * a.n_embd, a.x + t * a.n_embd, static_cast<size_t>(a.n_embd) * sizeof(float));
    }
    const MatmulOut gate_up[2] = {{w.gate, expert_gate_.data()}, {w.up, expert_up_.data()}};
    matmul_group(gate_up, expert_x_.data(), a.n_embd, n, act_.data(), *pool_, isa_);
    glu_matmul({.gate = expert_gate_.data(), .up = expert_up_.data(), .n_ff = a.n_ff, .n_tok = n, .act = a.act,
                .out = {w.down, expert_y_.data() + expert_start_[e] * a.n_embd}});
  };
  if (a.next) {
    for (int64_t e = (*a.next)(); e >= 0; e = (*a.next)()) {
      CHECK(e < n_expert);
      if (expert_count_[e] > 0) run_expert(e);
    }
  } else {
    for (int64_t e = 0; e < n_expert; ++e)
      if (expert_count_[e] > 0) run_expert(e);
  }
  // out[t] = sum over slots in order of weight * expert output, then the
  // gated shared expert: the same arithmetic whatever other tokens share the step.
  for (int64_t t = 0; t < a.n_tok; ++t) {
    float* o = a.out + t * a.n_embd;
    for (int64_t j = 0; j < a.n_used; ++j) {
      const float wt = a.weights[t * a.n_used + j];
      const float* y = expert_y_.data() + row_of[t * a.n_used + j] * a.n_embd;
      if (j == 0) {
        for (int64_t i = 0; i < a.n_embd; ++i) o[i] = wt * y[i];
      } else {
        for (int64_t i = 0; i < a.n_embd; ++i) o[i] += wt * y[i];
      }
    }
    if (a.shared) {
      const float g = a.shared_gate ? shared_gate_weight(a.shared_gate, a.x + t * a.n_embd, a.n_embd) : 1.0f;
      const float* y = shared_y_.data() + t * a.n_embd;
      for (int64_t i = 0; i < a.n_embd; ++i) o[i] += g * y[i];
    }
  }
}

void CpuBackend::add(float* x, const float* y, int64_t n) { fast::add(x, y, x, n, isa_); }

void CpuBackend::rmsnorm(const float* x, const float* norm, float eps, float* out, int64_t n_tok, int64_t n) {
  auto rows = [&](int64_t t0, int64_t t1) { fast::rmsnorm(x + t0 * n, norm, out + t0 * n, t1 - t0, n, eps, isa_); };
  if (n_tok >= 4) pool_->parallel_for_claimed(n_tok, 1, rows);
  else rows(0, n_tok);
}

void CpuBackend::logits(const LogitsArgs& a) {
  for (int64_t i = 0; i < a.n_out; ++i)
    std::copy_n(a.x + a.rows[i] * a.n_embd, a.n_embd, a.xn + i * a.n_embd);
  const MatmulOut out[1] = {{a.output, a.logits}};
  matmul_group(out, a.xn, a.n_embd, a.n_out, act_.data(), *pool_, isa_, [&](int64_t t0, int64_t t1) {
    float* rows = a.xn + t0 * a.n_embd;
    fast::rmsnorm(rows, a.norm, rows, t1 - t0, a.n_embd, a.eps, isa_);
  });
}

}  // namespace sluice::cpu
