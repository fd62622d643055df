// Backend: the operators one forward pass runs, at the granularity it
// dispatches them, and the memory they run on.
//
// The model (model/model.h) describes what to compute and calls a Backend for
// every operator; a backend decides how: kernels, threads, weight layouts,
// where buffers live. backend/cpu/ implements it for the CPU (scalar, AVX2,
// AVX-512; its own thread pool and instruction-set level); reference_backend.h
// is a plain scalar implementation every backend's tests compare against.
//
// Fusions are part of the interface, so a backend can run each as one
// dispatch: norm + matmul group (q/k/v, gate/up, the output head), activation +
// matmul (the down projection), bias + RoPE + K/V store.
//
// Contracts every backend keeps (the golden and invariant tests hold them):
//   - Per-token determinism: row t of every output depends only on token t's
//     inputs (and for attention on its position and its sequence's K/V), never
//     on which other tokens share the call or how work is split. So decode
//     equals prefill bit for bit, and a sequence batched with others produces
//     the tokens it produces alone. A backend may keep it only for calls of up
//     to batch_invariant_tokens() tokens (the CUDA backend's tensor-core
//     prefill rounds to BF16); past that a token's rows stay within the
//     operator's tolerance of its rows alone.
//   - Pointers to activations are into buffers from alloc(); weight views come
//     from prepare_weights() or a weight source; K/V live in a KvStore from
//     create_kv().
//   - Calls come from one thread at a time (the caller's step thread); an
//     operator returns when its outputs are written. Scratch memory is sized by
//     reserve() at load, so operators allocate nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "backend/op_clock.h"
#include "backend/op_types.h"
#include "backend/train_ops.h"
#include "base/expert_slot_range.h"
#include "base/thread_pool.h"
#include "kv/block_pool.h"
#include "sluice/status.h"

namespace sluice {

class KvStore;

// Memory a backend owns: activations, prepared weights. The bytes live until
// the buffer is destroyed.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual uint8_t* data() = 0;
  virtual size_t size() const = 0;
  float* floats() { return reinterpret_cast<float*>(data()); }
};

// xn[t] = x[t] / sqrt(mean(x[t]^2) + eps) * norm, then y_j = W_j xn for every
// output of the group (q/k/v; gate/up).
struct NormMatmulArgs {
  const float* x = nullptr;     // [n_tok, n_embd]
  const float* norm = nullptr;  // [n_embd]
  float eps = 1e-5f;
  float* xn = nullptr;          // [n_tok, n_embd] the normed rows (written)
  int64_t n_embd = 0;
  int64_t n_tok = 0;
  std::span<const MatmulOut> outs;  // every w.n_in == n_embd
};

// h[t] = act(gate[t]) * up[t] (written over gate), then out.y = W h; act is
// SiLU (SwiGLU) or tanh-approximated GELU (GeGLU).
struct GluMatmulArgs {
  float* gate = nullptr;      // [n_tok, n_ff] in; h out
  const float* up = nullptr;  // [n_tok, n_ff]
  int64_t n_ff = 0;
  int64_t n_tok = 0;
  Activation act = Activation::kSilu;
  MatmulOut out;              // out.w.n_in == n_ff
};

// Per token t: q += bq, k += bk, v += bv (each bias optional); each head of q
// and k RMS-normed with q_norm / k_norm (when set: Qwen3); RoPE on the first
// n_rot dims of every head of q and k at cos_sin[t]; then k[t] and v[t]
// become row kv_rows[t] of layer `layer`'s K and V in the store.
struct QkvStoreArgs {
  float* q = nullptr;  // [n_tok, n_head * head_dim]
  float* k = nullptr;  // [n_tok, n_head_kv * head_dim]
  float* v = nullptr;  // [n_tok, n_head_kv * head_dim]
  const float* bq = nullptr;  // [n_head * head_dim] or null
  const float* bk = nullptr;  // [n_head_kv * head_dim] or null
  const float* bv = nullptr;  // [n_head_kv * head_dim] or null
  const float* q_norm = nullptr;  // [head_dim] or null
  const float* k_norm = nullptr;  // [head_dim] or null
  float norm_eps = 1e-6f;
  const float* cos_sin = nullptr;  // [n_tok, n_rot / 2, 2] from rope_tables()
  int64_t n_tok = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_rot = 0;
  RopeLayout rope = RopeLayout::kAdjacent;
  KvStore* kv = nullptr;
  int64_t layer = 0;
  const int64_t* kv_rows = nullptr;  // [n_tok] row = block * block_size + slot
};

// One sequence's queries in an attention call.
struct AttentionSeq {
  const float* q = nullptr;  // [n_tok, n_head, head_dim]
  float* out = nullptr;      // [n_tok, n_head, head_dim]
  int64_t n_tok = 0;         // queries at positions pos0 .. pos0 + n_tok - 1
  int64_t pos0 = 0;
  const int32_t* block_table = nullptr;  // covers positions 0 .. pos0 + n_tok - 1 (entries before the
                                         // first query's window start unread)
};

// Causal grouped-query attention of every sequence over its own K/V in layer
// `layer` of the store, read through its block table. A query at position P
// attends to positions lo(P) .. P, lo(P) = max(0, P - window + 1) (0 with no
// window); positions before lo(P) are never read, so block-table entries wholly
// before the first query's lo may be invalid (freed). Scores are
//   s = scale * q . k,  then s = softcap * tanh(s / softcap) when softcap > 0,
// before the softmax.
struct AttentionArgs {
  std::span<const AttentionSeq> seqs;
  const KvStore* kv = nullptr;
  int64_t layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;    // usually 1 / sqrt(head_dim)
  int64_t window = 0;    // positions a query attends to, itself included (0: all)
  float softcap = 0.0f;  // attention-logit soft cap (0: none)
};

// One expert's matrices.  gate, up: [n_ff, n_embd];  down: [n_embd, n_ff]
struct ExpertWeights {
  WeightView gate;
  WeightView up;
  WeightView down;
};

// Routing of a mixture-of-experts layer, per token: p = softmax(logits[t]) over
// all experts; the n_used most likely (descending p, the lower id first among
// equals) with weight p, or p / (sum of the n_used p) when renormalize.
struct RouteArgs {
  const float* logits = nullptr;  // [n_tok, n_expert] router outputs
  int64_t n_tok = 0;
  int64_t n_expert = 0;
  int64_t n_used = 0;
  bool renormalize = true;
  int32_t* ids = nullptr;         // [n_tok, n_used] host memory (the weight store reads them)
  float* weights = nullptr;       // [n_tok, n_used]
};

// A mixture-of-experts FFN over a step's tokens:
//   out[t] = sum over j in slot order of weights[t][j] * down_e(act(gate_e x[t]) * up_e x[t]),
//   e = ids[t][j]
//   then, with a shared expert, out[t] += g[t] * down_s(act(gate_s x[t]) * up_s x[t]),
//   g[t] = sigmoid(shared_gate . x[t]) (1 without a shared_gate)
// A backend groups the tokens by expert, so each selected expert's bytes are
// read once per call; experts no token selects are not read at all.
struct ExpertFfnArgs {
  const float* x = nullptr;        // [n_tok, n_embd] the normed FFN input
  float* out = nullptr;            // [n_tok, n_embd] (written)
  const int32_t* ids = nullptr;    // [n_tok, n_used] in [0, experts.size())
  const float* weights = nullptr;  // [n_tok, n_used]
  int64_t n_tok = 0;
  int64_t n_used = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  Activation act = Activation::kSilu;
  std::span<const ExpertWeights> experts;  // [n_expert]; views of unselected experts are not read
  const ExpertWeights* shared = nullptr;   // the always-on expert, or null
  int64_t n_ff_shared = 0;                 // its width
  const float* shared_gate = nullptr;      // [n_embd] or null
  // The order to compute the selected experts in (experts streamed from disk:
  // the order they land). Null: ascending ids. Else (*next)() returns each
  // selected expert id once, then -1; an expert's bytes are read only after it
  // was returned, and one never returned (an error) is not read. The outputs
  // do not depend on the order.
  const FunctionRef<int64_t()>* next = nullptr;
  // The model's layer these experts are (>= 0: an expert's bytes are the
  // same whenever layer and id are, so a backend that copies host views in
  // may keep the copy); -1: no such promise.
  int64_t layer = -1;
};

// Logits of chosen tokens: rows[i] of x is normed and multiplied by the output
// matrix into logits row i.
struct LogitsArgs {
  const float* x = nullptr;        // [n_tok, n_embd] final hidden states
  const int64_t* rows = nullptr;   // [n_out] token indices into x
  int64_t n_out = 0;
  const float* norm = nullptr;     // [n_embd]
  float eps = 1e-5f;
  int64_t n_embd = 0;
  float* xn = nullptr;             // [n_out, n_embd] scratch (written)
  WeightView output;               // [n_vocab, n_embd]
  float* logits = nullptr;         // [n_out, n_vocab] host memory
};

// One run of consecutive tokens that share an adapter's factors for a matrix.
struct LoraSegment {
  int64_t tok0 = 0;            // rows tok0 .. tok0 + n_tok - 1 of x and y
  int64_t n_tok = 0;
  const float* a = nullptr;    // [rank, n_in]  (backend memory)
  const float* b = nullptr;    // [n_out, rank]
  int64_t rank = 0;
  float scale = 1.0f;          // alpha / rank times the user's scale
};

// The low-rank term of adapted matmuls (LoRA): for every token of every
// segment, y[t] += scale * B (A x[t]); rows in no segment are untouched, so
// sequences with different adapters (or none) share one base matmul. With u
// set, u[t] = A x[t] is kept for the backward (train/).
struct LoraArgs {
  const float* x = nullptr;  // [n_tok, n_in] the matmul's input
  float* y = nullptr;        // [n_tok, n_out] its output (+=)
  int64_t n_in = 0;
  int64_t n_out = 0;
  std::span<const LoraSegment> segs;  // disjoint, ascending
  float* u = nullptr;        // [n_tok, u_stride] or null
  int64_t u_stride = 0;      // >= every segment's rank
};

// What scratch the operators need, for reserve(): the largest call a model
// will make.
struct ScratchNeeds {
  int64_t n_tok = 0;        // tokens per call
  int64_t n_in_max = 0;     // widest matmul input
  int64_t n_ctx = 0;        // longest context a query attends over
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t max_seqs = 0;     // sequences per attention call
  int64_t n_expert = 0;     // routed experts (0: dense)
  int64_t n_used = 0;       // experts per token
  int64_t n_ff_expert = 0;
  int64_t n_ff_shared = 0;  // the shared expert's width (0: none)
  int64_t n_embd = 0;
  int64_t lora_rank = 0;    // the largest adapter rank lora() sees (0: none)
  // Bytes of weight views in host memory one layer reads, at most (a weight
  // source's; Backend::reads_host_weights). 0: none.
  uint64_t host_weight_bytes = 0;
  // A routed model whose experts are host views (three tiers): its layers
  // and one expert's bytes (gate, up, down), for the slots a backend may keep
  // them in (ExpertFfnArgs::layer). 0: none.
  int64_t n_layer = 0;
  uint64_t expert_bytes = 0;
};

// The operators of the interface below, one per method (a fusion is one
// operator), and of its TrainOps (train_ops(): backend/train_ops.h, from
// kMatmulT on), for supports() and the op-case list (op_cases.h).
enum class Op {
  kMatmul, kNormMatmul, kGluMatmul, kQkvStore, kAttention, kRoute, kExpertFfn, kLogits, kEmbed,
  kRopeTables, kAdd, kRmsnorm, kLora,
  // TrainOps: supports() says yes only where train_ops() is not null.
  kMatmulT, kRmsnormBackward, kRope, kGlu, kGluBackward, kTrainAttention, kTrainAttentionBackward,
  kCrossEntropy, kLoraBackward, kAdamW, kAddRows, kGatherRows, kSlotSum, kSlotSumBackward, kGatedAdd,
  kGatedAddBackward, kForwardMatmul,
};
// Every Op (a new one goes here too: the op-case list checks each has cases).
inline constexpr Op kAllOps[] = {
    Op::kMatmul,        Op::kNormMatmul,      Op::kGluMatmul, Op::kQkvStore,       Op::kAttention,
    Op::kRoute,         Op::kExpertFfn,       Op::kLogits,    Op::kEmbed,          Op::kRopeTables,
    Op::kAdd,           Op::kRmsnorm,         Op::kLora,      Op::kMatmulT,        Op::kRmsnormBackward,
    Op::kRope,          Op::kGlu,             Op::kGluBackward, Op::kTrainAttention, Op::kTrainAttentionBackward,
    Op::kCrossEntropy,  Op::kLoraBackward,    Op::kAdamW, Op::kAddRows, Op::kGatherRows, Op::kSlotSum,
    Op::kSlotSumBackward, Op::kGatedAdd, Op::kGatedAddBackward, Op::kForwardMatmul};
// Whether op is one of TrainOps' (kMatmulT and after).
constexpr bool is_train_op(Op op) { return static_cast<int>(op) >= static_cast<int>(Op::kMatmulT); }
const char* op_name(Op op);

// How a backend's matmuls round their activations before multiplying them
// with weights of a type (and, on some backends, how many tokens the call has:
// CUDA's tensor-core path for many tokens rounds them to BF16); the reference
// backend does not. How far its results may lie from the reference's follows
// from it (the op-case list's tolerances).
enum class ActRounding {
  kNone,           // float activations: only the summation order differs
  kBF16,           // rounded to bf16
  kInt8Blocks32,   // int8 in blocks of 32 with a float scale each
  kInt8Blocks256,  // int8 in blocks of 256 with a float scale each
};

// How a backend's attention rounds q, k, v and the probabilities before it
// multiplies them; the reference backend does not.
enum class AttnRounding {
  kNone,  // float products (the KV cache's own type aside)
  kF16,   // every operand of both products rounded to F16 (CUDA's flash attention)
};

// The data types an operator instance would see.
struct OpTypes {
  DType weight = DType::kF32;         // matmul-like operators and embed
  KvDtype kv = KvDtype::kF16;         // kQkvStore, kAttention
  Activation act = Activation::kSilu; // kGluMatmul, kExpertFfn
};

// A group of matrices one dispatch multiplies with the same input (q/k/v;
// gate/up; ...), as the model binds them.
using WeightGroup = std::span<WeightView* const>;

// What prepare_weights() did, for load summaries.
struct PreparedWeights {
  std::unique_ptr<Buffer> arena;  // owns the prepared copies (null if none)
  uint64_t repacked_bytes = 0;    // matrices copied into another layout
  uint64_t copied_bytes = 0;      // matrices copied as they are
  int64_t n_repacked = 0;
  std::string summary;            // one line, "" if nothing was prepared
  Status status;                  // not ok: the weights cannot be placed (a budget too small, say)
  // [groups.size()] 1: the group's matrices stay in host memory and are copied
  // to the backend's at each use (cuda under --gpu-budget); empty: none do.
  std::vector<uint8_t> host_groups;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu avx512", "reference", ...
  virtual std::string name() const = 0;
  virtual int n_threads() const = 0;
  // Whether the operator runs with these types (e.g. a matmul kernel for the
  // weight type, an attention kernel for the KV dtype).
  virtual bool supports(Op op, const OpTypes& types) const = 0;
  // How a matmul of n_tok tokens with weights of this type rounds its
  // activations. Default: not at all.
  virtual ActRounding matmul_act_rounding(DType weight, int64_t n_tok) const { return ActRounding::kNone; }
  // How attention of a sequence with n_query new tokens and heads of head_dim
  // rounds its operands (at most; a shape a faster kernel cannot take may
  // round less). Default: not at all.
  virtual AttnRounding attention_rounding(int64_t head_dim, int64_t n_query) const { return AttnRounding::kNone; }
  // Calls of up to this many tokens keep per-token determinism bit for bit
  // (see above). Default: every call.
  virtual int64_t batch_invariant_tokens() const { return std::numeric_limits<int64_t>::max(); }
  // Threads for host-side work around the operators (sampling draws).
  virtual ThreadPool& host_pool() = 0;

  // --- memory -------------------------------------------------------------
  // A zero-filled buffer for activations.
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  // Zero-filled host memory for what the host reads back after every step
  // (the logits): page-locked where that makes the backend's copies faster (a
  // GPU then writes it at the bus's rate, without a staging copy), else plain
  // host memory (the default: HostBuffer). Destroy it before the backend.
  virtual std::unique_ptr<Buffer> alloc_host(size_t bytes);
  // True when buffers from alloc() are ordinary host memory (the activation
  // hook reads them in place).
  virtual bool host_visible() const = 0;
  // Copies n floats from a buffer of alloc() (or host memory) to host memory,
  // after the operators enqueued before it: how the activation hook reads the
  // buffers of a backend that is not host-visible. Default: memcpy.
  virtual void read_floats(const float* src, float* dst, int64_t n);
  // Copies n floats from host memory (or another buffer of alloc()) into a
  // buffer of alloc() (adapters' factors at load; how tests fill the buffers
  // of a backend that is not host-visible), in order with the operators; src
  // may be freed on return, so a device backend waits for the copy.
  // Default: memcpy.
  virtual void write_floats(const float* src, float* dst, int64_t n);
  // Copies n floats from one buffer of alloc() to another, in order with the
  // operators, without waiting for them (training's row copies: the host stays
  // ahead of the device). Default: memcpy.
  virtual void copy_floats(const float* src, float* dst, int64_t n);
  // Sizes the operators' scratch for calls up to `needs` (grows, never
  // shrinks; a backend shared by two models keeps the larger of each).
  virtual void reserve(const ScratchNeeds& needs) = 0;
  // The KV store the operators read and write (the paged cache's memory).
  virtual StatusOr<KvStore> create_kv(const KvLayout& layout, int64_t n_blocks) = 0;
  // A KV store of n_blocks ids whose memory backs only blocks 0 .. n_backed-1
  // for now, resize_kv() moving that line (the fluid split: the pool grows
  // into memory weights gave up, and gives it back). resize_kv: blocks past
  // n_backed hold nothing anyone reads (BlockPool::set_limit drained them),
  // and the caller has finished every step that read them. Errors: the
  // memory for the blocks asked for is not there (nothing changes).
  // Defaults: create_kv() (host memory takes pages only where blocks are
  // written); resize_kv gives a host store's pages past n_backed back
  // (KvStore::release_blocks) and changes nothing else.
  virtual StatusOr<KvStore> create_kv_reserved(const KvLayout& layout, int64_t n_blocks, int64_t n_backed);
  virtual Status resize_kv(KvStore& kv, int64_t n_backed);
  // Copies every layer's rows of block src to block dst (copy-on-write).
  virtual void copy_kv_block(KvStore& kv, int32_t src, int32_t dst) = 0;
  // Copies block src of `from` to block dst of `to` (swap out / swap in).
  virtual void move_kv_block(const KvStore& from, int32_t src, KvStore& to, int32_t dst) = 0;

  // Copies the model's matrices (resident ones only) into memory of this
  // backend, in the layouts its kernels run fastest on, updating the views in
  // place; matrices of one group end up in compatible layouts. A backend may
  // also leave them where they are.
  virtual PreparedWeights prepare_weights(std::span<const WeightGroup> groups) = 0;
  // Device memory under the backend's budget (BackendOptions::device_budget_bytes)
  // that prepare_weights leaves to the caller (the KV pool). Default: ignored.
  virtual void set_device_reserve(uint64_t bytes) {}
  // Matrices a weight source brought into writable host memory of its own (an
  // expert that just landed): the layouts prepare_in_place() gives the
  // matrices of one dispatch (kRows for those it leaves as they are), and the
  // reordering itself, done where the bytes are (no copy; the byte count is
  // unchanged) and recorded in each view's layout. Default: nothing moves.
  //   group: at most 4 views;  layouts: [group.size()] out
  virtual void in_place_layouts(std::span<const WeightView> group, WeightLayout* layouts) const;
  virtual void prepare_in_place(std::span<WeightView> group) {}

  // Bytes of weights this backend copied into its memory from a slower tier
  // while running (the cuda backend's streamed dispatches), since creation.
  virtual uint64_t bytes_streamed() const { return 0; }
  // The order in which the groups of the last prepare_weights() will be used,
  // one period repeating: indices into those groups (a training step: the
  // forward, then each layer's groups forward and in reverse). A backend that
  // streams some of them (PreparedWeights::host_groups) copies ahead in that
  // order and keeps what it comes back to soonest; a group left out (a routed
  // expert) is copied when used, never ahead. By default the groups go in
  // order, once a period (a forward pass a token). Errors: an index out of
  // range.
  virtual Status set_weight_schedule(std::span<const int> groups) { return Status(); }
  // Host-to-backend bytes one period of that schedule copies once warm (0:
  // nothing streams): what bytes_streamed() should grow by a period, besides
  // the groups it leaves out (copied when used: a routed model's experts).
  virtual uint64_t scheduled_copy_bytes() const { return 0; }

  // Weights in a weight source's host memory (--mem-budget: the store's
  // resident layers and ring slots). A backend whose memory is not the host's
  // reads such views by copying their bytes in at each use, when it can
  // (reads_host_weights()); the copies may still be running when an operator
  // returns, so the caller calls finish_host_reads() before that memory is
  // reused (the source's release of a layer). register_host() names memory
  // views will point into, to pin for faster copies, until unregister_host();
  // ScratchNeeds::host_weight_bytes sizes what the copies go through.
  // Defaults: a host-visible backend reads them in place; nothing to pin or wait for.
  virtual bool reads_host_weights() const { return host_visible(); }
  // The rates of the backend's own memory a plan over three tiers needs
  // (runtime/device_tiers.h), measured now: reading it, and copying pinned
  // host memory into it. Zeros: none measured (host memory's rates are
  // plan/calibrate's).
  struct MemoryRates {
    double read_gbps = 0;
    double host_copy_gbps = 0;
  };
  virtual MemoryRates measure_memory_rates() { return {}; }
  virtual void register_host(const uint8_t* data, size_t bytes) {}
  virtual void unregister_host(const uint8_t* data) {}
  virtual void finish_host_reads() {}
  // Experts of `layer` the router's prediction expects soon, their views
  // bound (experts[id] for id in ids; host views of a weight source): a
  // backend that keeps experts in slots (ExpertFfnArgs::layer) may start
  // copying them now. Resident host bytes stay; `transient` ones (a slot of
  // the source's expert pool) stay only while the source keeps the expert
  // for `layer` (predicted, or pinned once chosen): before the source may
  // reuse them, the caller calls settle_expert_prefetches(), and
  // finish_host_reads() covers the chosen ones. Default: nothing.
  virtual void prefetch_experts(int64_t layer, std::span<const int32_t> ids, std::span<const ExpertWeights> experts,
                                bool transient) {}
  // The transient prefetches of `layer` (every layer: -1) whose expert is not
  // in `keep` are let go of their host bytes: dropped where not copied yet,
  // else waited for. Those in keep stay as they are. Default: nothing.
  virtual void settle_expert_prefetches(int64_t layer, std::span<const int32_t> keep) {}
  // The slots such a backend keeps experts in, when the fluid split can move
  // them (its units on a device: a routed model's); the most were made at
  // load. set_expert_slot_count(n), n = max - j x min >= min, between steps:
  // the slots past n give their device memory up (their experts are copied
  // in again when chosen), or take it back. Errors: n not such a count; the
  // memory is not there to take back (fewer slots stay in use;
  // expert_slots() says how many). Default: none.
  virtual ExpertSlotRange expert_slots() const { return {}; }
  virtual Status set_expert_slot_count(int64_t n);
  // One line on what the backend copied in while running (streamed weights,
  // experts kept in slots and how often they were found there) and how it
  // launched the steps (graphs); "" if nothing to say.
  virtual std::string copy_summary() const { return ""; }
  // The experts such a backend keeps in slots, counted since load
  // (base/expert_slot_range.h). Default: none.
  virtual ExpertSlotCounts expert_slot_counts() const { return {}; }

  // --- operators (shapes in the argument structs above) --------------------
  // x[t] = scale * row tokens[t] of the table.  x: [tokens.size(), table.n_in]
  virtual void embed(const WeightView& table, std::span<const int32_t> tokens, float scale, float* x) = 0;
  // cos_sin[t][i] = magnitude * (cos, sin)(positions[t] * inv_freq[i]).  cos_sin: [n_tok, inv_freq.size(), 2]
  virtual void rope_tables(std::span<const int64_t> positions, std::span<const double> inv_freq, double magnitude,
                           float* cos_sin) = 0;
  // The matmuls of one dispatch that share the input x: [n_tok, n_in].
  virtual void matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok) = 0;
  virtual void norm_matmul(const NormMatmulArgs& a) = 0;
  virtual void glu_matmul(const GluMatmulArgs& a) = 0;
  virtual void qkv_store(const QkvStoreArgs& a) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  virtual void route(const RouteArgs& a) = 0;
  virtual void expert_ffn(const ExpertFfnArgs& a) = 0;
  // route(r), then expert_ffn(e) over the ids and weights it chose (e.ids and
  // e.weights are ignored): a routed layer whose experts need nothing of the
  // host. A device backend may keep the routing on the device (no wait for
  // the router's outputs); r.ids and r.weights are then written by the time
  // the next wait_idle() or logits() returns, not on return. Default: route()
  // then expert_ffn().
  virtual void routed_ffn(const RouteArgs& r, const ExpertFfnArgs& e);
  // Returns once every operator enqueued so far has finished and what it
  // leaves for the host (routed_ffn's ids) is written. Default: nothing to wait for.
  virtual void wait_idle() {}
  // x += y over n floats (the residual add).
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * norm: an RMSNorm no matmul
  // follows (Gemma's post-norms).  x, out: [n_tok, n] (may alias);  norm: [n]
  virtual void rmsnorm(const float* x, const float* norm, float eps, float* out, int64_t n_tok, int64_t n) = 0;
  virtual void logits(const LogitsArgs& a) = 0;
  // The adapters' low-rank terms (LoraArgs). Default: none (supports(kLora) is false).
  virtual void lora(const LoraArgs& a);
  // A forward step of n_tok tokens begins (before its embed) and ends (after
  // its logits, or where it stops): a device backend may record the
  // operators between them and launch them as one (CUDA graphs). `who` names
  // the caller (a model: a draft and its target share a backend), whose
  // steps are alike. A step's operators come between one begin_step and its
  // end_step; the results are the same either way. Default: nothing.
  virtual void begin_step(int64_t n_tok, const void* who) {}
  virtual void end_step() {}

  // The training operators (backend/train_ops.h), or null when this backend
  // cannot train.
  virtual TrainOps* train_ops() { return nullptr; }

  // A clock for timing this backend's operators (backend/op_clock.h), used
  // by one thread and destroyed before the backend. Default: the host's
  // clock, for backends whose operators are done on return. A backend that
  // records steps to launch later (CUDA graphs) runs them as called while
  // one of its clocks exists, so that each mark times the work before it.
  virtual std::unique_ptr<OpClock> op_clock();
};

// The routing rule of RouteArgs in plain loops: both backends in this tree run
// it on the host, where the weight store needs the ids anyway.
void route_topk(const RouteArgs& a);
// sigmoid(gate . x) over n floats, summed in order: the shared expert's scale.
float shared_gate_weight(const float* gate, const float* x, int64_t n);

// Options for the backends create_backend() knows.
struct BackendOptions {
  std::string name = "cpu";  // a registered backend (backend_registry.h): "cpu", "cuda", "reference"
  int n_threads = 0;         // <= 0: one per core
  // cuda: device memory for the weights; those beyond it stream from pinned
  // host memory through a ring of device slots (0: all resident).
  uint64_t device_budget_bytes = 0;
};

// A backend by name, from the registry (backend_registry.h). Errors: an
// unknown name (the message lists the known ones), a backend that cannot run
// here (the message says why), --gpu-budget for a backend that takes none.
StatusOr<std::shared_ptr<Backend>> create_backend(const BackendOptions& options);

}  // namespace sluice
