// sluice gpu-bench: the GPU's two ceilings for decode and how close the CUDA
// backend's matmuls come to them, with no model file needed.
//
//   1. copy     device-to-device copy GB/s (bytes read + written: the roof a
//               weight-reading matmul is held to), host-to-device from pinned
//               and from pageable memory (the PCIe leg of weight streaming)
//   2. matmul   Backend::matmul on random bytes of each type at Llama-8B
//               shapes, one token (decode) and a few: weight GB/s = matrix
//               bytes x calls / seconds, and its fraction of the copy roof.
//               Each shape rotates over enough copies to exceed the L2 cache,
//               so every call reads its weights from HBM.
//   3. prefill  the same matmuls at many tokens (512 by default), which run on
//               the tensor cores (backend/cuda/cuda_prefill.h): TFLOP/s and its
//               fraction of cuBLASLt's BF16 GEMM measured alone at 512 x 4096 x
//               14336 (the ceiling; the other types pay their decoding to BF16).
// Timed by the host around --reps calls after a warm-up (the launch cost is
// part of what decode pays), median of 5 such runs.
#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "backend/backend.h"
#include "cli.h"
#include "quant/dtype.h"
#ifdef SLUICE_HAVE_CUDA
#include "backend/cuda/cuda_api.h"
#endif

namespace sluice::cli {

Runner add_gpu_bench(CLI::App& app) {
  struct Args {
    std::vector<std::string> types = {"bf16", "f16", "q8_0", "q4_0", "q4_K", "q6_K"};
    std::vector<int64_t> tokens = {1, 4, 512};
    int reps = 50;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("gpu-bench", "measure the GPU: copy bandwidths and matmul GB/s per weight type (cuda builds)");
  c->add_option("--types", a->types, "weight types")->capture_default_str();
  c->add_option("--tokens", a->tokens, "tokens per matmul")->capture_default_str();
  c->add_option("--reps", a->reps, "calls per timed run")->capture_default_str()->check(CLI::Range(1, 100000));
  return [a] {
#ifndef SLUICE_HAVE_CUDA
    return fail(unimplemented("gpu-bench needs the cuda backend, which is not in this build (CMake found no nvcc)"));
#else
    auto be_or = create_backend({.name = "cuda"});
    if (!be_or.ok()) return fail(be_or.status());
    Backend& be = **be_or;
    fmt::print("device: {}\n", cuda::device_description());
    const cuda::CopyBandwidth bw = cuda::measure_copy_bandwidth();
    fmt::print("copy: device to device {:.0f} GB/s (read + write) | host to device {:.1f} GB/s pinned, {:.1f} GB/s pageable\n",
               bw.d2d_gbps, bw.h2d_pinned_gbps, bw.h2d_pageable_gbps);
    const double gemm_tflops = cuda::measure_gemm_bf16_tflops(512, 4096, 14336);
    fmt::print("gemm: cuBLASLt BF16 512x4096x14336 {:.0f} TFLOP/s (the prefill ceiling){}\n\n", gemm_tflops,
               gemm_tflops > 0 ? "" : " -- cuBLASLt unavailable");
    struct Shape {
      const char* name;
      int64_t n_in, n_out;
    };
    const Shape shapes[] = {{"attn_q/o 4096x4096", 4096, 4096}, {"attn_k/v 4096x1024", 4096, 1024},
                            {"ffn_up 4096x14336", 4096, 14336}, {"ffn_down 14336x4096", 14336, 4096},
                            {"output 4096x128256", 4096, 128256}};
    const int64_t max_tok = *std::max_element(a->tokens.begin(), a->tokens.end());
    be.reserve({.n_tok = max_tok, .n_in_max = 14336});
    fmt::print("| {:<8} | {:<20} | {:>6} | {:>10} | {:>9} | {:>8} | {:>8} | {:>8} |\n", "type", "shape", "tokens", "us/call",
               "GB/s", "of roof", "TFLOP/s", "of gemm");
    fmt::print("| {:-<8} | {:-<20} | {:->6} | {:->10} | {:->9} | {:->8} | {:->8} | {:->8} |\n", "", "", "", "", "", "", "", "");
    for (const std::string& tn : a->types) {
      const auto type = dtype_from_name(tn);
      if (!type) return fail(invalid_argument("unknown weight type '{}'", tn));
      for (const Shape& sh : shapes) {
        const size_t bytes = row_bytes(*type, sh.n_in) * static_cast<size_t>(sh.n_out);
        const int n_copies = static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / bytes + 1));
        // Random bytes (not zeros; the kernels' speed does not depend on the
        // values, and quantizing 500M weights on the host would take longer
        // than the benchmark), copied n_copies times.
        std::vector<uint8_t> host(bytes);
        uint32_t state = 12345;
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
          state = state * 1664525u + 1013904223u;
          std::memcpy(host.data() + i, &state, 4);
        }
        std::vector<WeightView> views(static_cast<size_t>(n_copies),
                                      WeightView{.type = *type, .data = nullptr, .n_in = sh.n_in, .n_out = sh.n_out});
        std::vector<std::vector<uint8_t>> copies(static_cast<size_t>(n_copies), host);
        std::vector<WeightView*> ptrs;
        for (int i = 0; i < n_copies; ++i) {
          views[static_cast<size_t>(i)].data = copies[static_cast<size_t>(i)].data();
          ptrs.push_back(&views[static_cast<size_t>(i)]);
        }
        const WeightGroup g(ptrs.data(), ptrs.size());
        PreparedWeights prepared = be.prepare_weights(std::span(&g, 1));
        copies.clear();
        for (int64_t nt : a->tokens) {
          auto x = be.alloc(static_cast<size_t>(nt * sh.n_in) * 4), y = be.alloc(static_cast<size_t>(nt * sh.n_out) * 4);
          std::vector<float> xh(static_cast<size_t>(nt * sh.n_in));
          for (float& v : xh) state = state * 1664525u + 1013904223u, v = static_cast<float>(static_cast<int32_t>(state)) * 1e-9f;
          cuda::copy_to_device(x->data(), xh.data(), xh.size() * 4);
          float sink = 0;
          auto run = [&](int n) {
            for (int i = 0; i < n; ++i) {
              const MatmulOut o[1] = {{views[static_cast<size_t>(i % n_copies)], y->floats()}};
              be.matmul(o, x->floats(), sh.n_in, nt);
            }
            be.read_floats(y->floats(), &sink, 1);  // waits for the calls
          };
          run(std::max(3, n_copies));
          // Many tokens take ~1000x a decode call: fewer calls keep the run short.
          const int reps = nt >= 64 ? std::max(1, a->reps / 10) : a->reps;
          std::vector<double> secs;
          for (int k = 0; k < 5; ++k) {
            const auto t0 = std::chrono::steady_clock::now();
            run(reps);
            secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
          }
          std::sort(secs.begin(), secs.end());
          const double s = secs[2], gbps = static_cast<double>(bytes) / s / 1e9;
          const double tflops = 2.0 * static_cast<double>(nt * sh.n_in) * static_cast<double>(sh.n_out) / s / 1e12;
          fmt::print("| {:<8} | {:<20} | {:>6} | {:>10.1f} | {:>9.0f} | {:>7.1f}% | {:>8.1f} | {:>7.1f}% |\n", tn, sh.name,
                     nt, s * 1e6, gbps, 100 * gbps / bw.d2d_gbps, tflops, gemm_tflops > 0 ? 100 * tflops / gemm_tflops : 0.0);
        }
      }
    }
    fmt::print("\nGB/s: the matrix's bytes per call over the median time per call (host-timed, launches included);\n"
               "roof: the device-to-device copy above. TFLOP/s: 2 x tokens x n_in x n_out per call; of gemm: of the\n"
               "cuBLASLt BF16 ceiling above (BF16 from 16 tokens, F32 never, the other types from 32 run on the\n"
               "tensor cores: backend/cuda/cuda_prefill.h; SLUICE_CUDA_GEMM_MIN_TOKENS moves both).\n");
    return 0;
#endif
  };
}

}  // namespace sluice::cli
