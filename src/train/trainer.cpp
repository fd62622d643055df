#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <numeric>

#include "format/gguf_reader.h"
#include "format/gguf_writer.h"

namespace sluice {
namespace {

// splitmix64: a fixed generator, so an order is the same on every build.
uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr const char* kMomentM = ".adam_m";
constexpr const char* kMomentV = ".adam_v";

}  // namespace

LoraTrainer::LoraTrainer(Model& model, LoraParams& params, const TrainData& train, const TrainerOptions& options)
    : model_(model), params_(params), train_(train), opt_(options) {}

StatusOr<std::unique_ptr<LoraTrainer>> LoraTrainer::create(Model& model, LoraParams& params, const TrainData& train,
                                                          const TrainerOptions& o) {
  if (train.examples.empty()) return invalid_argument("no training examples");
  if (o.batch < 1 || o.grad_accum < 1 || o.seq < 1) {
    return invalid_argument("--batch, --grad-accum and --seq must be at least 1 (got {}, {}, {})", o.batch,
                            o.grad_accum, o.seq);
  }
  if (!(o.lr > 0.0f) || !std::isfinite(o.lr)) return invalid_argument("--lr must be positive, got {}", o.lr);
  if (o.warmup < 0 || o.min_lr_ratio < 0.0f || o.min_lr_ratio > 1.0f || o.grad_clip < 0.0f || o.weight_decay < 0.0f) {
    return invalid_argument("--warmup, --min-lr-ratio (0..1), --grad-clip and --weight-decay must not be negative");
  }
  if (o.steps < 0 || (o.steps == 0 && !(o.epochs > 0.0))) {
    return invalid_argument("give a positive --steps or --epochs (got {} and {})", o.steps, o.epochs);
  }
  std::unique_ptr<LoraTrainer> t(new LoraTrainer(model, params, train, o));
  const int64_t per_step = o.batch * o.grad_accum;
  t->n_steps_ = o.steps > 0 ? o.steps
                            : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(
                                                       o.epochs * static_cast<double>(train.examples.size()) /
                                                       static_cast<double>(per_step))));
  ASSIGN_OR_RETURN(t->step_fn_, TrainStep::create(model, params,
                                                     {.max_tokens = o.batch * o.seq, .max_seq = o.seq,
                                                      .keep_activations = o.keep_activations}));
  return t;
}

float LoraTrainer::lr_at(int64_t s) const {
  if (s < opt_.warmup) return opt_.lr * static_cast<float>(s + 1) / static_cast<float>(opt_.warmup);
  const double span = static_cast<double>(std::max<int64_t>(1, n_steps_ - opt_.warmup));
  const double frac = std::min(1.0, static_cast<double>(s - opt_.warmup) / span);
  const double lo = static_cast<double>(opt_.lr) * opt_.min_lr_ratio;
  return static_cast<float>(lo + (opt_.lr - lo) * 0.5 * (1.0 + std::cos(M_PI * frac)));
}

size_t LoraTrainer::example_at(int64_t p) {
  const auto n = static_cast<int64_t>(train_.examples.size());
  const int64_t epoch = p / n;
  if (epoch != order_epoch_) {
    order_.resize(static_cast<size_t>(n));
    std::iota(order_.begin(), order_.end(), size_t{0});
    uint64_t state = opt_.seed * 0x100000001B3ull + static_cast<uint64_t>(epoch);
    for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
      const auto j = static_cast<int64_t>(splitmix(state) % static_cast<uint64_t>(i + 1));
      std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
    }
    order_epoch_ = epoch;
  }
  return order_[static_cast<size_t>(p % n)];
}

void LoraTrainer::fill_batch(int64_t first, int64_t count, TrainBatch& b) {
  b.tokens.clear();
  b.targets.clear();
  b.seqs.clear();
  for (int64_t i = 0; i < count; ++i) {
    const TrainExample& ex = train_.examples[example_at(first + i)];
    b.seqs.push_back({static_cast<int64_t>(b.tokens.size()), static_cast<int64_t>(ex.tokens.size())});
    b.tokens.insert(b.tokens.end(), ex.tokens.begin(), ex.tokens.end());
    b.targets.insert(b.targets.end(), ex.targets.begin(), ex.targets.end());
  }
}

StatusOr<TrainReport> LoraTrainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first = step_ * opt_.batch * opt_.grad_accum;
  // The step's counted targets, for the mean.
  int64_t counted = 0, tokens = 0;
  for (int64_t i = 0; i < opt_.batch * opt_.grad_accum; ++i) {
    const TrainExample& ex = train_.examples[example_at(first + i)];
    counted += std::count_if(ex.targets.begin(), ex.targets.end(), [](int32_t t) { return t >= 0; });
    tokens += static_cast<int64_t>(ex.tokens.size());
  }
  params_.zero_grads();
  double loss_sum = 0;
  const float scale = 1.0f / static_cast<float>(std::max<int64_t>(1, counted));
  for (int64_t j = 0; j < opt_.grad_accum; ++j) {
    fill_batch(first + j * opt_.batch, opt_.batch, batch_);
    ASSIGN_OR_RETURN(const double l, step_fn_->accumulate(batch_, scale));
    loss_sum += l;
  }
  TrainReport r{.step = step_ + 1, .n_steps = n_steps_, .loss = loss_sum / static_cast<double>(std::max<int64_t>(1, counted)),
                .lr = lr_at(step_), .tokens = tokens};
  const int64_t n = params_.n_params();
  float* g = params_.grads();
  // The gradient on the host (in place where the buffers are host memory).
  const bool host = model_.backend().host_visible();
  if (!host) grads_host_ = params_.read(g, n);
  float* hg = host ? g : grads_host_.data();
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(hg[i]) * hg[i];
  r.grad_norm = std::sqrt(sq);
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    return internal_error("step {}: the loss is {} and the gradient norm {}: training diverged (lower --lr or "
                          "check the data); the adapter keeps the factors from before this step",
                          step_ + 1, r.loss, r.grad_norm);
  }
  if (opt_.grad_clip > 0.0f && r.grad_norm > opt_.grad_clip) {
    const auto c = static_cast<float>(opt_.grad_clip / r.grad_norm);
    for (int64_t i = 0; i < n; ++i) hg[i] *= c;
    if (!host) params_.write(hg, g, n);
  }
  model_.backend().train_ops()->adamw({.p = params_.params(), .g = g, .m = params_.adam_m(), .v = params_.adam_v(),
                                       .n = n, .step = step_ + 1, .lr = r.lr, .beta1 = opt_.beta1,
                                       .beta2 = opt_.beta2, .eps = opt_.adam_eps,
                                       .weight_decay = opt_.weight_decay});
  ++step_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run_seconds_ += r.seconds;
  run_tokens_ += tokens;
  r.tokens_per_s = static_cast<double>(run_tokens_) / std::max(1e-9, run_seconds_);
  r.eta_s = run_seconds_ / static_cast<double>(std::max<int64_t>(1, run_tokens_)) *
            static_cast<double>(tokens) * static_cast<double>(n_steps_ - step_);
  return r;
}

StatusOr<double> LoraTrainer::mean_loss(const TrainData& data) {
  double sum = 0;
  int64_t counted = 0;
  TrainBatch b;
  for (size_t i = 0; i < data.examples.size(); i += static_cast<size_t>(opt_.batch)) {
    b.tokens.clear();
    b.targets.clear();
    b.seqs.clear();
    for (size_t k = i; k < std::min(data.examples.size(), i + static_cast<size_t>(opt_.batch)); ++k) {
      const TrainExample& ex = data.examples[k];
      b.seqs.push_back({static_cast<int64_t>(b.tokens.size()), static_cast<int64_t>(ex.tokens.size())});
      b.tokens.insert(b.tokens.end(), ex.tokens.begin(), ex.tokens.end());
      b.targets.insert(b.targets.end(), ex.targets.begin(), ex.targets.end());
    }
    ASSIGN_OR_RETURN(const double l, step_fn_->evaluate(b));
    sum += l;
    counted += b.n_counted();
  }
  if (counted == 0) return invalid_argument("no counted targets to evaluate");
  return sum / static_cast<double>(counted);
}

Status LoraTrainer::save_checkpoint(const std::string& path) const {
  GgufWriter w;
  std::deque<std::vector<float>> held;  // the tensors' host copies, read by w.write() (a deque: they stay put)
  Metadata& md = w.metadata();
  const LoraAdapter ad = params_.to_adapter();
  md.set("general.architecture", MetaValue::str(ad.arch));
  md.set("general.type", MetaValue::str("adapter"));
  md.set("general.name", MetaValue::str(ad.name));
  md.set("adapter.type", MetaValue::str("lora"));
  md.set("adapter.lora.alpha", MetaValue::f32(ad.alpha));
  md.set("training.step", MetaValue::u64(static_cast<uint64_t>(step_)));
  md.set("training.n_steps", MetaValue::u64(static_cast<uint64_t>(n_steps_)));
  md.set("training.seed", MetaValue::u64(opt_.seed));
  md.set("training.data_hash", MetaValue::u64(train_.hash));
  md.set("training.batch", MetaValue::u64(static_cast<uint64_t>(opt_.batch)));
  md.set("training.grad_accum", MetaValue::u64(static_cast<uint64_t>(opt_.grad_accum)));
  md.set("training.seq", MetaValue::u64(static_cast<uint64_t>(opt_.seq)));
  md.set("training.lr", MetaValue::f32(opt_.lr));
  md.set("training.warmup", MetaValue::u64(static_cast<uint64_t>(opt_.warmup)));
  for (const LoraSlot& s : params_.slots()) {
    const std::pair<const char*, int64_t> parts[2] = {{".lora_a", s.a_off}, {".lora_b", s.b_off}};
    for (const auto& [suffix, off] : parts) {
      const bool is_a = suffix[6] == 'a';
      const std::vector<int64_t> ne = is_a ? std::vector<int64_t>{s.n_in, s.rank} : std::vector<int64_t>{s.rank, s.n_out};
      const std::string name = s.base_name + suffix;
      auto& lp = const_cast<LoraParams&>(params_);
      const int64_t count = is_a ? s.rank * s.n_in : s.n_out * s.rank;
      const float* src[3] = {lp.params() + off, lp.adam_m() + off, lp.adam_v() + off};
      const std::string names[3] = {name, name + kMomentM, name + kMomentV};
      for (int i = 0; i < 3; ++i) {  // host copies the writer keeps until write()
        const std::vector<float>& h = held.emplace_back(params_.read(src[i], count));
        RETURN_IF_ERROR(w.add_tensor(names[i], DType::kF32, ne, reinterpret_cast<const uint8_t*>(h.data())));
      }
    }
  }
  return w.write(path);
}

Status LoraTrainer::load_checkpoint(const std::string& path) {
  ASSIGN_OR_RETURN(ModelFile f, read_gguf(path));
  const Metadata& md = f.metadata;
  auto expect = [&](const char* key, uint64_t want, const char* what) -> Status {
    const auto got = md.get_int(key);
    if (!got) return invalid_argument("{} is not a training checkpoint (no {})", path, key);
    if (static_cast<uint64_t>(*got) != want) {
      return invalid_argument("checkpoint {} was made with {} {}, this run has {}: resume with the same settings",
                              path, what, *got, want);
    }
    return Status();
  };
  RETURN_IF_ERROR(expect("training.seed", opt_.seed, "--seed"));
  RETURN_IF_ERROR(expect("training.data_hash", train_.hash, "a data hash of"));
  RETURN_IF_ERROR(expect("training.batch", static_cast<uint64_t>(opt_.batch), "--batch"));
  RETURN_IF_ERROR(expect("training.grad_accum", static_cast<uint64_t>(opt_.grad_accum), "--grad-accum"));
  RETURN_IF_ERROR(expect("training.seq", static_cast<uint64_t>(opt_.seq), "--seq"));
  RETURN_IF_ERROR(expect("training.n_steps", static_cast<uint64_t>(n_steps_), "a total of steps"));
  RETURN_IF_ERROR(expect("training.warmup", static_cast<uint64_t>(opt_.warmup), "--warmup"));
  if (md.get_float("training.lr").value_or(-1.0) != static_cast<double>(opt_.lr)) {
    return invalid_argument("checkpoint {} was made with another --lr", path);
  }
  for (const LoraSlot& s : params_.slots()) {
    const std::pair<const char*, int64_t> parts[2] = {{".lora_a", s.a_off}, {".lora_b", s.b_off}};
    for (const auto& [suffix, off] : parts) {
      const int64_t count = suffix[6] == 'a' ? s.rank * s.n_in : s.n_out * s.rank;
      float* dst[3] = {params_.params() + off, params_.adam_m() + off, params_.adam_v() + off};
      const std::string names[3] = {s.base_name + suffix, s.base_name + suffix + kMomentM,
                                    s.base_name + suffix + kMomentV};
      for (int i = 0; i < 3; ++i) {
        const TensorInfo* t = f.find(names[i]);
        if (t == nullptr || t->type != DType::kF32 || t->n_elements() != count) {
          return invalid_argument("checkpoint {} has no f32 {} of {} elements (another --rank or --targets?)", path,
                                  names[i], count);
        }
        params_.write(reinterpret_cast<const float*>(t->data), dst[i], count);
      }
    }
  }
  step_ = md.get_int("training.step").value_or(0);
  return Status();
}

}  // namespace sluice
