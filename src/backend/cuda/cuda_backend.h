// CudaBackend: the Backend on one NVIDIA GPU.
//
// What lives where:
//   device   every matrix prepare_weights() is given (copied once: GGUF rows,
//            Q4_0 / Q8_0 with their scales split off, quant/split_scales.h),
//            the norm/bias vectors (copied on first use), activations (alloc()),
//            the KV store (create_kv), and the operators' scratch (reserve()).
//   host     the token embedding table (one row per token is dequantized on
//            the host and sent), the routing (the weight store wants the ids on
//            the host anyway), and the logits the caller asked for.
// Everything runs in order on one stream. The residual add() is fused into
// the norm that follows it (the next layer's). An operator returns once its work
// is enqueued; those that hand results to the host (logits, route) wait for
// them. Small host inputs (tokens' rows, RoPE tables, KV rows, block tables,
// expert lists) go through pinned staging buffers; one that is the same as
// the last call's (every layer of a step) is not sent again.
//
// Under --gpu-budget the weights past it stream from pinned host memory
// (prepare_weights). With a weight store (--mem-budget: three tiers) the
// store's host memory is registered, and views into it are copied into a
// device ring at each use (cuda_host_views.h). A decode step of resident
// weights is recorded and launched as one CUDA graph (cuda_step_graph.h):
// every entry point that waits for the stream or uses another one settles the
// recording first. Not yet: a Q8_0 KV cache.
// Calls come from one thread at a time (backend.h).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_prefill.h"
#include "backend/cuda/cuda_copy_queue.h"
#include "backend/cuda/cuda_expert_slots.h"
#include "backend/cuda/cuda_gemm_lt.h"
#include "backend/cuda/cuda_host_views.h"
#include "backend/cuda/cuda_kv_reserve.h"
#include "backend/cuda/cuda_step_graph.h"
#include "backend/cuda/cuda_weight_ring.h"

namespace sluice::cuda {

class CudaTrainOps;

// Pinned host memory for inputs sent to the device: host() hands it out only
// once the copy that last read it has finished.
class Staging final : public StepGraph::Listener {
 public:
  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging();
  // Sends may be recorded in g's steps (the graph reads the buffer when it
  // runs). A buffer a recording reads is not handed out again before the
  // recording's launch: when the ring comes round to one (a step sends more
  // than the ring holds), the recording is launched there and the ring
  // doubles, so that later steps are recorded whole.
  void attach(StepGraph* g);
  // n bytes of pinned memory, free to write (grows on first use of a size):
  // the next of the ring's buffers (kRing, more once a recorded step needed
  // them), once its send of a ring's worth of calls ago has been copied
  // (the host waits only when that many sends are still queued).
  uint8_t* host(size_t n);
  // Copies the first n bytes of the last host() to dst, in stream order.
  void send(void* dst, size_t n, cudaStream_t s);
  // Ends the step recording under way, if any (StepGraph::settle).
  void settle();
  void launched(cudaStream_t s) override;

 private:
  static constexpr int kRing = 4;
  static constexpr size_t kFirstBytes = size_t{64} << 10;  // each buffer's size from attach()
  // Recording, and the ring has come round to a buffer the recording reads:
  // settles the recording (nothing is allocated during one), then doubles the
  // ring with buffers as large as its largest (n at least), the first of them
  // next. (Recording, a buffer too small settles it too, then grows as ever.)
  void grow(size_t n);
  struct Buffer {
    uint8_t* host = nullptr;
    size_t cap = 0;
    cudaEvent_t sent = nullptr;  // recorded after its last send
    bool queued = false;         // a send was recorded
    bool recorded = false;       // a recording under way reads it (sent: at its launch)
  };
  std::vector<Buffer> ring_ = std::vector<Buffer>(kRing);
  size_t at_ = kRing - 1;  // the buffer host() gave last
  StepGraph* graph_ = nullptr;
};

// Host data kept mirrored in device memory: upload() sends it only when it
// differs from what was sent last.
class Mirror {
 public:
  Mirror() = default;
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;
  ~Mirror();
  // The device copy of n bytes at src.
  const void* upload(const void* src, size_t n, cudaStream_t s);
  // Marks the device copy stale (its bytes will be sent again).
  void forget() { last_.clear(); }
  void attach(StepGraph* g) { staging_.attach(g); }

 private:
  Staging staging_;
  uint8_t* dev_ = nullptr;
  size_t cap_ = 0;
  std::vector<uint8_t> last_;  // what dev_ holds
};

// One cudaMalloc, zeroed: what alloc() returns and prepare_weights' arena.
class DeviceBuffer final : public Buffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer() override { cudaFree(data_); }
  uint8_t* data() override { return static_cast<uint8_t*>(data_); }
  size_t size() const override { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_;
};

class CudaBackend final : public Backend {
 public:
  // The device must be usable (create_cuda_backend checks). budget_bytes:
  // device memory for weights, 0 for no limit (then every matrix is resident).
  CudaBackend(int device, uint64_t budget_bytes);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  int n_threads() const override { return 1; }
  bool supports(Op op, const OpTypes& types) const override;
  // Quantized types: 8-bit activations in blocks of 32 (cuda_matmul_q8.cuh); the rest read floats.
  ActRounding matmul_act_rounding(DType weight, int64_t n_tok) const override;
  AttnRounding attention_rounding(int64_t head_dim, int64_t n_query) const override;
  // Below the tensor-core matmuls' and flash attention's thresholds
  // (cuda_prefill.h, cuda_flash_attn.cuh): every call below both runs the
  // GEMV and split-key kernels, whose rows do not depend on the batch.
  int64_t batch_invariant_tokens() const override;
  ThreadPool& host_pool() override { return *pool_; }

  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  std::unique_ptr<sluice::Buffer> alloc_host(size_t bytes) override;  // page-locked
  bool host_visible() const override { return false; }
  void read_floats(const float* src, float* dst, int64_t n) override;
  void write_floats(const float* src, float* dst, int64_t n) override;
  void copy_floats(const float* src, float* dst, int64_t n) override;
  void reserve(const ScratchNeeds& needs) override;
  StatusOr<KvStore> create_kv(const KvLayout& layout, int64_t n_blocks) override;
  // Over a KvReservation (cuda_kv_reserve.h): addresses for every block,
  // device memory for the backed ones.
  StatusOr<KvStore> create_kv_reserved(const KvLayout& layout, int64_t n_blocks, int64_t n_backed) override;
  Status resize_kv(KvStore& kv, int64_t n_backed) override;
  void copy_kv_block(KvStore& kv, int32_t src, int32_t dst) override;
  void move_kv_block(const KvStore& from, int32_t src, KvStore& to, int32_t dst) override;
  // Copies every matrix to the device (Q4_0 / Q8_0 with their scales split
  // off). Under a budget the dispatches past it, in the order given, go to
  // pinned host memory instead and stream through a ring of device slots
  // (cuda_weight_ring.h); the largest dispatch (the output head) and the
  // first ones stay resident.
  PreparedWeights prepare_weights(std::span<const WeightGroup> groups) override;
  // Under a budget, the weights get what is left after this (the KV pool).
  void set_device_reserve(uint64_t bytes) override { reserve_ = bytes; }
  // Views into registered host memory (a weight store's, --mem-budget) are
  // copied into a ring of device memory at each use (cuda_host_views.h), sized
  // by ScratchNeeds::host_weight_bytes and counted in the budget.
  bool reads_host_weights() const override { return true; }
  // Device-to-device copies (read + write) and pinned host-to-device copies of 256 MiB.
  MemoryRates measure_memory_rates() override;
  void register_host(const uint8_t* data, size_t bytes) override;
  void unregister_host(const uint8_t* data) override;
  void finish_host_reads() override;
  std::string copy_summary() const override;
  ExpertSlotCounts expert_slot_counts() const override;
  // Into the expert slots (DeviceExperts), experts in registered host memory.
  void prefetch_experts(int64_t layer, std::span<const int32_t> ids, std::span<const ExpertWeights> experts,
                        bool transient) override;
  void settle_expert_prefetches(int64_t layer, std::span<const int32_t> keep) override;
  ExpertSlotRange expert_slots() const override;
  Status set_expert_slot_count(int64_t n) override;

  void embed(const WeightView& table, std::span<const int32_t> tokens, float scale, float* x) override;
  void rope_tables(std::span<const int64_t> positions, std::span<const double> inv_freq, double magnitude,
                   float* cos_sin) override;
  void matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok) override;
  void norm_matmul(const NormMatmulArgs& a) override;
  void glu_matmul(const GluMatmulArgs& a) override;
  void qkv_store(const QkvStoreArgs& a) override;
  void attention(const AttentionArgs& a) override;
  void route(const RouteArgs& a) override;
  void expert_ffn(const ExpertFfnArgs& a) override;
  // Resident experts within the grouped launches' reach: routed on the device
  // (cuda_route.cuh), no wait; the ids and weights reach r.ids / r.weights
  // at the next wait (wait_idle, logits, route, read_floats). Else route()
  // then expert_ffn().
  void routed_ffn(const RouteArgs& r, const ExpertFfnArgs& e) override;
  void wait_idle() override;
  void add(float* x, const float* y, int64_t n) override;
  void rmsnorm(const float* x, const float* norm, float eps, float* out, int64_t n_tok, int64_t n) override;
  void logits(const LogitsArgs& a) override;
  // cuda_lora.cpp: a segment of kLoraGemmMinTokens or more tokens as two F32
  // GEMMs (u = x A^T, y += s u B^T), the others in one launch_lora
  // (cuda_kernels.cuh); training's forward needs it too.
  void lora(const LoraArgs& a) override;
  static constexpr int64_t kLoraGemmMinTokens = 128;
  // The step's work recorded as a CUDA graph (cuda_step_graph.h).
  void begin_step(int64_t n_tok, const void* who) override;
  void end_step() override;

  Status set_weight_schedule(std::span<const int> groups) override;
  uint64_t scheduled_copy_bytes() const override { return ring_ ? ring_->scheduled_bytes() : 0; }
  uint64_t bytes_streamed() const override {
    return (ring_ ? ring_->bytes_copied() : 0) + (host_views_ ? host_views_->bytes_copied() : 0) +
           (experts_dev_ ? experts_dev_->bytes_copied() : 0);
  }
  // The training operators (cuda_train_ops.h).
  TrainOps* train_ops() override;
  // Timed events on the stream (cuda_op_clock.h); no step is recorded as a graph while one exists.
  std::unique_ptr<OpClock> op_clock() override;
  cudaStream_t stream() const { return stream_; }
  // Launches the deferred add(), if any: for operators outside this class
  // (CudaTrainOps) that read what it writes.
  void flush_pending() { flush_add(); }
  // For operators outside this class (CudaTrainOps' matmul_t): w as the
  // kernels can read it, its bytes copied in when they are a streamed
  // dispatch's or a weight source's host memory; release_weight() once the
  // launches that read it are enqueued.
  struct HeldWeight {
    WeightView w;
    int n_held = 0;
    int group = -1;
    int64_t ticket = -1;
  };
  HeldWeight hold_weight(const WeightView& w);
  void release_weight(const HeldWeight& h);
  // F32 GEMMs on cuBLASLt (lora()'s long segments, CudaTrainOps' adapter
  // gradients), enqueued in order on the stream, every one planned first.
  // False, with nothing enqueued, without cuBLASLt or when it refuses one
  // (said once; false from then on). The first call settles a recording
  // (the handle's workspace is allocated then).
  bool f32_gemms(std::span<const GemmLt::Gemm> gemms);
  // The tensor-core matmuls (cuda_prefill.h), for CudaTrainOps' matmul_t.
  PrefillMatmul& tensor_cores() { return *prefill_; }
  const PrefillMatmul& tensor_cores() const { return *prefill_; }

 private:
  // Before a call a step's recording forbids (a wait for the stream, another
  // stream, a synchronous copy or free): launches what is recorded.
  void settle() { graph_->settle(); }
  // The device copy of a host vector of n floats (norms, biases), copied on
  // its first use; null for null.
  const float* vec(const float* host, int64_t n);
  // Whether the matrices go as one 8-bit-activation launch (one quantized
  // type: matmul_q8_takes) at n_tok tokens: not when the tensor-core path takes them.
  bool one_q8_launch(std::span<const MatmulOut> outs, int64_t n_tok) const;
  // The scratch for x quantized to 8 bits, n_tok rows of n_in.
  QuantizedX quantized_x(int64_t n_in, int64_t n_tok);
  // The 8-bit launch of outs: the dp4a kernels, or from kMmqMinTokens tokens
  // the int8 tensor cores (SLUICE_CUDA_MMQ=0: never).
  void launch_q8(std::span<const MatmulOut> outs, const QuantizedX& qx, int64_t n_tok);
  static bool mmq_on();
  // add() is deferred to the next call: a norm over the same rows takes it
  // (take_add returns its y, to fuse; else it launches it and returns null),
  // every other entry point launches it first (flush_add).
  void flush_add();
  const float* take_add(const float* x, int64_t n);
  // Streamed matrices: bind() copies outs to bound with the views of streamed
  // matrices pointed into their ring slots (acquired) and views of host
  // memory into their copies, and returns how many groups or copies it holds,
  // in held; unbind() releases them once the launches that read them are enqueued.
  struct Held {
    int group;            // in ring_, or -1: a host view's copy
    uint8_t* base;
    int64_t ticket = -1;  // the host view's copy (host_views_)
  };
  int bind(std::span<const MatmulOut> outs, MatmulOut* bound, Held* held);
  void unbind(const Held* held, int n);
  // matmul() on views already bound.
  void matmul_bound(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok);
  // The device scratch areas, by what they hold (scratch()'s `which`).
  enum ScratchArea {
    kPartial, kLogits, kExpertX, kExpertGate, kExpertUp, kExpertDown, kExpertY, kSharedY, kXq, kXd, kXs, kRoute,
    kLoraU, kNumScratch
  };
  static constexpr int64_t kMaxSplitItems = 1024;  // (query, head, split) partial results kPartial holds
  // A device scratch area of at least n floats (grows; `which` names it).
  float* scratch(int which, int64_t n);
  // y = W x for one expert (or the shared one) over n rows already gathered in xg_.
  void ffn_rows(const ExpertWeights& w, const float* x, int64_t n, int64_t n_embd, int64_t n_ff, Activation act,
                float* y);
  // cuda_experts.cpp. Whether w's bytes are in device memory as they are
  // (not a host view's, not a streamed matrix's).
  bool on_device(const WeightView& w) const;
  // Whether expert w goes in one grouped launch with experts like `first`:
  // resident, the same kinds of matrices, a grouped kernel for gate|up and
  // for down (expert_ffn also wants rows too few for the tensor cores).
  bool groupable(const ExpertWeights& w, const ExpertWeights& first) const;
  // The grouped experts' FFN: y[slot] for each of their n_rows rows (rows'
  // groups hold gate|up, `down` the same groups with down's matrices).
  void grouped_ffn(const ExpertFfnArgs& a, const ExpertWeights& like, GroupedRows rows, const MatmulGroup* down,
                   int64_t n_rows, float* y, bool routed_here = false);
  // The device table of e's experts' (gate, up, down) pointers when routed_ffn
  // may route them on the device (every expert resident and grouped alike),
  // else null; kept per layer.
  const uint8_t* const* route_table(const ExpertFfnArgs& e);
  // After a wait on the stream: routed_ffn's ids and weights to their callers.
  void drain_routes();
  // Most rows expert_ffn takes grouped in one call (its gate/up scratch).
  static constexpr int64_t kGroupedRows = 256;

  struct PendingAdd {
    float* x = nullptr;
    const float* y = nullptr;
    int64_t n = 0;
  };
  PendingAdd pending_;  // x += y, not launched yet
  uint64_t budget_ = 0;
  uint64_t reserve_ = 0;  // of budget_, kept for the caller (set_device_reserve)
  // Every copy between host and device memory that is not the compute's own
  // (ring, host views, expert slots), in one queue by priority (made on first use).
  std::unique_ptr<CopyQueue> copies_;
  CopyQueue& copy_queue() {
    if (!copies_) copies_ = std::make_unique<CopyQueue>();
    return *copies_;
  }
  cudaEvent_t swap_after_ = nullptr;     // move_kv_block: the kernels its copies follow
  std::vector<CopyQueue::Id> swap_ids_;  //   its transfers
  std::unique_ptr<WeightRing> ring_;  // the streamed matrices (null: all resident)
  std::vector<int> ring_of_group_;    // [prepare_weights' groups] the group's index in ring_, or -1
  std::vector<int> ring_order_;       // set_weight_schedule's, in ring_ indices
  std::unique_ptr<HostViews> host_views_;  // views of a weight source's host memory (null: none)
  std::weak_ptr<KvReservation> kv_reserved_;  // the store create_kv_reserved made (resize_kv finds it here)
  // A routed model's experts copied from host views, kept in device slots
  // (made by prepare_weights from what the budget leaves; null: none).
  std::unique_ptr<DeviceExperts> experts_dev_;
  int64_t expert_layers_ = 0, n_expert_ = 0;  // ScratchNeeds::n_layer, n_expert
  uint64_t expert_bytes_ = 0;                 // ScratchNeeds::expert_bytes
  // Makes experts_dev_ from `left` bytes of the budget (0: unlimited).
  std::string make_expert_slots(uint64_t left);
  std::unique_ptr<PrefillMatmul> prefill_;  // matmuls of many tokens on the tensor cores
  std::unique_ptr<CudaTrainOps> train_;     // made on the first train_ops()
  struct StreamedAt {
    int group;      // in ring_
    size_t offset;  // of the matrix in its group
  };
  std::unordered_map<const uint8_t*, StreamedAt> streamed_;  // by the view's (pinned host) data
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<StepGraph> graph_;  // decode steps recorded on stream_
  int op_clocks_ = 0;                 // op_clock()'s clocks alive: steps not recorded then
  std::unique_ptr<ThreadPool> pool_;
  std::unordered_map<const float*, float*> vecs_;  // host vector -> device copy
  std::vector<void*> vec_blocks_;                  // device memory of the copies
  uint8_t* vec_next_ = nullptr;
  size_t vec_left_ = 0;
  std::vector<std::pair<float*, int64_t>> scratch_;  // device scratch areas, floats each
  Staging embed_staging_, rope_staging_;
  Mirror kv_rows_, attn_, logit_rows_, experts_, lora_segs_;
  std::vector<LoraSegDev> lora_pack_;  // lora(): the segments as the kernel reads them
  // lora(): one segment as GEMMs; false (nothing enqueued) when cuBLASLt is not there or refuses.
  bool lora_gemms(const LoraArgs& a, const LoraSegment& sg);
  // f32_gemms()' handle, made on the first call; null without cuBLASLt.
  GemmLt* f32_gemm();
  std::unique_ptr<GemmLt> f32_gemm_;
  bool f32_gemm_tried_ = false;
  std::vector<float> host_logits_;     // route(): the router's outputs
  std::vector<uint8_t> pack_;          // host packing of attention / expert lists
  std::vector<int32_t> order_;         // expert_ffn: experts in compute order
  std::vector<int64_t> counts_;        //   rows each of them takes
  std::vector<uint8_t> seen_;          //   [n_expert] selected
  std::vector<uint8_t> grouped_;       //   [order] whether it goes grouped
  std::vector<int32_t> tok_, slot_;    //   [n_slot] token and slot of each row, by expert
  // routed_ffn: its ids and weights in pinned memory until the next wait.
  struct PendingRoute {
    size_t off;  // in route_log_: n ids, then n weights
    int32_t* ids;
    float* weights;
    int64_t n;
  };
  uint8_t* route_log_ = nullptr;
  size_t route_log_cap_ = 0, route_log_used_ = 0;
  std::vector<PendingRoute> routes_pending_;
  struct RouteTable {
    const ExpertWeights* experts = nullptr;  // the layer's views it was made from
    const uint8_t* gate0 = nullptr;          //   and the first expert's gate (rebinding changes it)
    bool ok = false;
    uint8_t** dev = nullptr;                 // [n_expert][3]
  };
  std::vector<RouteTable> route_tables_;  // by layer
  Mirror route_table_;                    // a call's table without a layer
  std::vector<const uint8_t*> route_host_;  // a table as it is sent
  int32_t* route_counter_ = nullptr;        // the routing kernel's blocks done (device, 0 between launches)
};

}  // namespace sluice::cuda
