// sluice convert / sluice synth: write GGUF files.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "arch/tensor_class.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "cli.h"
#include "format/gguf_reader.h"
#include "format/gguf_writer.h"
#include "format/llama2c.h"
#include "lora/lora_synth.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

namespace sluice::cli {
namespace {

// Progress on stderr: a line rewritten in place on a terminal (each percent),
// otherwise one line per 25%.
GgufWriter::ProgressFn progress_printer(const std::string& what) {
  auto last = std::make_shared<int>(-1);
  auto sw = std::make_shared<Stopwatch>();
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const int step = tty ? 1 : 25;
  return [=](uint64_t done, uint64_t total) {
    const int pct = total ? static_cast<int>(done * 100 / total) : 100;
    if (pct / step == *last / step && done != total) return;
    if (pct == *last) return;
    *last = pct;
    fmt::print(stderr, "{}[sluice] {}: {:3d}% of {} ({:.1f} s){}", tty ? "\r" : "", what, pct, human_bytes(total),
               sw->seconds(), tty && done != total ? "" : "\n");
  };
}

bool has_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in && std::memcmp(magic, "GGUF", 4) == 0;
}

struct ConvertArgs {
  std::string input, output, tokenizer, type;
  int n_threads = 0;
};

int convert(const ConvertArgs& a) {
  StatusOr<ModelFile> mf_or = Status(StatusCode::kInternal, "unset");
  struct stat st {};
  if (::stat(a.input.c_str(), &st) != 0) return fail(not_found("{}: no such file or folder", a.input));
  if (S_ISDIR(st.st_mode) || has_gguf_magic(a.input)) {
    mf_or = open_model_file(a.input);
  } else {
    if (a.tokenizer.empty()) {
      return fail(invalid_argument("{} looks like a llama2.c checkpoint: pass its tokenizer with --tokenizer", a.input));
    }
    mf_or = import_llama2c(a.input, a.tokenizer);
  }
  if (!mf_or.ok()) return fail(mf_or.status());
  const ModelFile& mf = *mf_or;

  std::optional<QuantMix> to;
  if (!a.type.empty()) {
    auto mix = quant_mix_from_name(a.type);
    if (!mix.ok()) return fail(mix.status());
    to = *mix;
  }
  // Layers and grouped-query ratio, which some rules of llama.cpp's mixes read.
  const std::string arch = mf.metadata.get_string("general.architecture").value_or("llama");
  const int64_t n_layer = mf.metadata.get_int(arch + ".block_count").value_or(0);
  const int64_t n_head = mf.metadata.get_int(arch + ".attention.head_count").value_or(1);
  const int64_t n_head_kv = mf.metadata.get_int(arch + ".attention.head_count_kv").value_or(n_head);
  const ArchSpec* spec = find_arch(arch);
  const bool has_output = mf.find(TensorRole::kOutput) != nullptr;
  GgufWriter w;
  w.set_metadata(mf.metadata);
  ThreadPool pool(a.n_threads);
  int n_converted = 0;
  for (const TensorInfo& t : mf.tensors) {
    // Weight matrices, the stacked experts of a routed layer ([n_embd, n_ff, n_expert]) among
    // them; routers stay f32, as llama.cpp's quantizer leaves them.
    const TensorSpec* ts = find_tensor_spec(spec, t.name);
    const bool matrix = ts != nullptr && tensor_class(ts->role) != TensorClass::kRouter &&
                        ((ts->kind == TensorKind::kMatrix && t.ne.size() == 2) ||
                         (ts->kind == TensorKind::kExperts && t.ne.size() == 3));
    DType dst_type = t.type;
    const bool fits = to && matrix &&
                      quant_mix_type(*to, MixTensor{.name = t.name, .arch = spec, .ne0 = t.ne[0], .n_layer = n_layer,
                                                    .n_gqa = n_head / std::max<int64_t>(1, n_head_kv),
                                                    .has_output = has_output},
                                     &dst_type);
    if (fits && dst_type != t.type) {
      const TensorInfo* src = &t;
      Status st = w.add_tensor(t.name, dst_type, t.ne, [src, dst_type, &pool](uint8_t* dst, size_t) {
        const int64_t n = src->ne[0];
        const size_t in_rb = row_bytes(src->type, n), out_rb = row_bytes(dst_type, n);
        pool.run_on_all([&](int ti, int nt) {
          std::vector<float> row(static_cast<size_t>(n));
          for (int64_t r = ti; r < src->n_rows(); r += nt) {
            dequantize_row(src->type, src->data + r * in_rb, row.data(), n);
            quantize_row(dst_type, row.data(), dst + r * out_rb, n);
          }
        });
      });
      if (!st.ok()) return fail(st);
      ++n_converted;
    } else if (Status st = w.add_tensor(t.name, t.type, t.ne, t.data); !st.ok()) {
      return fail(st);
    }
  }
  if (to) w.metadata().set("general.file_type", MetaValue::u32(static_cast<uint32_t>(to->file_type)));
  if (Status st = w.write(a.output, progress_printer("writing " + a.output)); !st.ok()) return fail(st);
  fmt::print(stderr, "[sluice] wrote {} ({} tensors, {} converted to {}, {})\n", a.output, mf.tensors.size(),
             n_converted, to ? to->name : "-", human_bytes(w.total_tensor_bytes()));
  return 0;
}

}  // namespace

Runner add_convert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* c = app.add_subcommand("convert", "write a GGUF from an HF folder, a llama2.c checkpoint or a GGUF");
  c->add_option("input", a->input, "HF folder, llama2.c .bin, or GGUF file")->required();
  c->add_option("-o,--output", a->output, "output .gguf path")->required();
  c->add_option("--tokenizer", a->tokenizer, "llama2.c tokenizer .bin (for llama2.c checkpoints)");
  c->add_option("--type", a->type, "re-quantize weight matrices to this type (f16, q8_0, q5_k, ...) or llama.cpp mix (q4_k_m, q3_k_s, iq4_xs, ...)");
  c->add_option("-t,--threads", a->n_threads, "threads for re-quantization");
  return [a] { return convert(*a); };
}

Runner add_synth(CLI::App& app) {
  struct Args {
    std::string preset = "tiny", type = "f16", output;
    int64_t layers = 0, vocab = 0, experts = 0, expert_ffn = 0;
    uint64_t seed = 1;
    int n_threads = 0;
    int64_t sliding_window = 0;
    std::string lora_out;
    int64_t lora_rank = 16;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("synth", "write a random-weight GGUF at a real model shape");
  c->add_option("--preset", a->preset, "shape: " + fmt::format("{}", fmt::join(synth_preset_names(), ", ")))
      ->capture_default_str();
  c->add_option("--type", a->type, "weights: a type (f16, q8_0, q4_0, q5_k, iq4_nl, ...) or llama.cpp mix (q2_k, q3_k_m, q4_k_m, q5_k_s, iq4_xs, ...)")->capture_default_str();
  c->add_option("--layers", a->layers, "override the layer count (a slice: 70b-slice, mixtral-8x7b, ...)");
  c->add_option("--vocab", a->vocab, "override the vocabulary size (small test models)");
  c->add_option("--experts", a->experts, "override the routed expert count of an MoE preset (top-k kept, at most this)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  c->add_option("--expert-ffn", a->expert_ffn, "override the routed experts' FFN width of an MoE preset")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  c->add_option("--seed", a->seed, "RNG seed (same seed -> identical file)")->capture_default_str();
  c->add_option("-t,--threads", a->n_threads, "threads");
  CLI::Option* window = c->add_option("--sliding-window", a->sliding_window,
                                      "attention window of every layer in positions (0: none; default: the preset's)")
                           ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  c->add_option("-o,--output", a->output, "output .gguf path")->required();
  c->add_option("--lora-out", a->lora_out,
                "also write a random LoRA adapter GGUF for the model (attention and FFN matrices; for benchmarks)");
  c->add_option("--lora-rank", a->lora_rank, "rank of the --lora-out adapter")->capture_default_str();
  return [a, window] {
    auto shape = synth_preset(a->preset, a->layers);
    if (!shape.ok()) return fail(shape.status());
    if (window->count() > 0) shape->n_swa = a->sliding_window;
    if (a->vocab > 0) shape->n_vocab = a->vocab;
    if ((a->experts > 0 || a->expert_ffn > 0) && shape->n_expert == 0)
      return fail(invalid_argument("--experts and --expert-ffn need an MoE preset; '{}' is dense", a->preset));
    if (a->experts > 0) {
      shape->n_expert = a->experts;
      shape->n_expert_used = std::min(shape->n_expert_used, a->experts);
    }
    if (a->expert_ffn > 0) shape->n_ff_expert = a->expert_ffn;
    SynthOptions o{.shape = *shape, .type = a->type, .seed = a->seed, .n_threads = a->n_threads,
                   .progress = progress_printer("synth " + a->preset + " " + a->type)};
    auto n = write_synth_model(o, a->output);
    if (!n.ok()) return fail(n.status());
    fmt::print(stderr, "[sluice] wrote {} ({} of weights)\n", a->output, human_bytes(*n));
    if (!a->lora_out.empty()) {
      auto base = open_model_file(a->output);
      if (!base.ok()) return fail(base.status());
      auto ad = synth_lora(*base, {.name = a->preset + "-lora", .rank = a->lora_rank, .seed = a->seed});
      if (!ad.ok()) return fail(ad.status());
      if (Status st = write_lora_gguf(*ad, a->lora_out); !st.ok()) return fail(st);
      fmt::print(stderr, "[sluice] wrote {} (rank {}, {} matrices)\n", a->lora_out, a->lora_rank, ad->mats.size());
    }
    return 0;
  };
}

}  // namespace sluice::cli
