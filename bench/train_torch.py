#!/usr/bin/env python3
"""LoRA training speed of a plain PyTorch Llama at a sluice synth shape (the baseline of
docs/BENCHMARKS.md, "Fine-tuning"): f32 base weights frozen, LoRA (rank, alpha) on the
chosen targets, AdamW on the adapters only, batch x seq tokens a step, N threads.
Random weights and tokens: only the speed is measured. Prints one JSON object.

usage: train_torch.py --preset 110m|1b [--rank 8] [--targets all] [--batch 4] [--seq 512]
                      [--threads 2] [--steps 5] [--warmup-steps 1]
       train_torch.py --blas     (the BLAS torch's products go through, as JSON)
"""
import argparse
import ctypes
import json
import math
import statistics
import time

import torch

# vocab, n_embd, n_layer, n_head, n_head_kv, n_ff (sluice synth presets, src/model/synth.cpp)
PRESETS = {
    "tiny": (4096, 256, 4, 8, 4, 768),
    "110m": (32000, 768, 12, 12, 12, 2048),
    "1b": (32000, 2048, 22, 32, 4, 5632),
}


class LoraLinear(torch.nn.Module):
    def __init__(self, n_in, n_out, rank, alpha, adapt):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n_out, n_in) * n_in ** -0.5, requires_grad=False)
        self.adapt = adapt
        if adapt:
            self.a = torch.nn.Parameter(torch.empty(rank, n_in).uniform_(-n_in ** -0.5, n_in ** -0.5))
            self.b = torch.nn.Parameter(torch.zeros(n_out, rank))
            self.scale = alpha / rank

    def forward(self, x):
        y = x @ self.w.t()
        if self.adapt:
            y = y + self.scale * ((x @ self.a.t()) @ self.b.t())
        return y


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):  # x: [B, H, T, D], rotate_half pairs
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, e, h, hkv, f, rank, alpha, targets):
        super().__init__()
        hd = e // h
        self.h, self.hkv, self.hd = h, hkv, hd
        t = lambda name: name in targets
        self.q = LoraLinear(e, h * hd, rank, alpha, t("q"))
        self.k = LoraLinear(e, hkv * hd, rank, alpha, t("k"))
        self.v = LoraLinear(e, hkv * hd, rank, alpha, t("v"))
        self.o = LoraLinear(h * hd, e, rank, alpha, t("o"))
        self.gate = LoraLinear(e, f, rank, alpha, t("gate"))
        self.up = LoraLinear(e, f, rank, alpha, t("up"))
        self.down = LoraLinear(f, e, rank, alpha, t("down"))
        self.n1 = torch.nn.Parameter(torch.ones(e), requires_grad=False)
        self.n2 = torch.nn.Parameter(torch.ones(e), requires_grad=False)

    def forward(self, x, cos, sin, mask):
        B, T, E = x.shape
        n = rmsnorm(x, self.n1)
        q = self.q(n).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k(n).view(B, T, self.hkv, self.hd).transpose(1, 2)
        v = self.v(n).view(B, T, self.hkv, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = self.h // self.hkv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) * self.hd ** -0.5 + mask
        att = torch.softmax(s, dim=-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(B, T, E))
        n = rmsnorm(x, self.n2)
        return x + self.down(torch.nn.functional.silu(self.gate(n)) * self.up(n))


def blas_info():
    """The BLAS this process loaded (torch's matrix products go through it) and, for
    OpenBLAS, the core its kernels were chosen for (OPENBLAS_CORETYPE overrides it)."""
    libs = sorted({line.split()[-1] for line in open("/proc/self/maps")
                   if "blas" in line.rsplit("/", 1)[-1].lower() and line.split()[-1].startswith("/")})
    info = {"libraries": libs}
    for lib in libs:
        try:
            h = ctypes.CDLL(lib)
            h.openblas_get_corename.restype = ctypes.c_char_p
            h.openblas_get_config.restype = ctypes.c_char_p
        except (OSError, AttributeError):
            continue
        info["openblas_core"] = h.openblas_get_corename().decode()
        info["openblas_config"] = h.openblas_get_config().decode().strip()
        break
    return info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="110m", choices=PRESETS)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16)
    ap.add_argument("--targets", default="all")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup-steps", type=int, default=1)
    ap.add_argument("--blas", action="store_true", help="print the BLAS torch loaded and exit")
    a = ap.parse_args()
    if a.blas:
        torch.ones(2, 2) @ torch.ones(2, 2)  # a product loads the BLAS where torch loads it lazily
        print(json.dumps({"blas": blas_info()}))
        return
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    vocab, e, L, h, hkv, f = PRESETS[a.preset]
    targets = {"q", "k", "v", "o", "gate", "up", "down"} if a.targets == "all" else set(a.targets.split(","))
    emb = torch.randn(vocab, e) * 0.02
    blocks = torch.nn.ModuleList(Block(e, h, hkv, f, a.rank, a.alpha, targets) for _ in range(L))
    out_w = torch.randn(vocab, e) * e ** -0.5
    out_n = torch.ones(e)
    hd = e // h
    pos = torch.arange(a.seq, dtype=torch.float32)
    inv = 10000.0 ** (-torch.arange(0, hd // 2, dtype=torch.float32) * 2 / hd)
    ang = torch.outer(pos, inv)
    cos, sin = torch.cos(ang), torch.sin(ang)
    mask = torch.full((a.seq, a.seq), float("-inf")).triu(1)
    params = [p for p in blocks.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    tokens = torch.randint(0, vocab, (a.batch, a.seq + 1))
    times, losses = [], []
    for step in range(a.warmup_steps + a.steps):
        t0 = time.perf_counter()
        x = emb[tokens[:, :-1]]
        for b in blocks:
            x = b(x, cos, sin, mask)
        logits = rmsnorm(x, out_n) @ out_w.t()
        loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup_steps:
            times.append(dt)
            losses.append(loss.item())
    med = statistics.median(times)
    print(json.dumps({"engine": "pytorch", "torch": torch.__version__, "preset": a.preset, "threads": a.threads,
                      "batch": a.batch, "seq": a.seq, "rank": a.rank, "targets": a.targets,
                      "lora_params": sum(p.numel() for p in params), "step_s": times, "median_step_s": med,
                      "tokens_per_s": a.batch * a.seq / med, "blas": blas_info()}))


if __name__ == "__main__":
    main()
