#!/usr/bin/env python3
"""LoRA training speed of PyTorch + PEFT on a GPU at sluice's synth 8b shape (Llama 3 8B:
vocab 128256, dim 4096, 32 heads of 128, 8 KV heads, ffn 14336), the GPU baseline of
docs/BENCHMARKS.md, "Fine-tuning": a transformers LlamaForCausalLM with random BF16 weights,
frozen, LoRA (rank, alpha) on the chosen targets through PEFT, AdamW on the adapters only,
batch x seq tokens a step. Random tokens: only the speed is measured. Prints one JSON object.

usage: train_peft.py [--layers 32] [--rank 8] [--targets all|attn] [--batch 4] [--seq 512]
                     [--steps 5] [--warmup-steps 1] [--checkpointing]
"""
import argparse
import json
import statistics
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

TARGETS = {
    "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "attn": ["q_proj", "k_proj", "v_proj", "o_proj"],
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--alpha", type=float, default=None)
    p.add_argument("--targets", default="all", choices=sorted(TARGETS))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup-steps", type=int, default=1)
    p.add_argument("--checkpointing", action="store_true", help="recompute activations (as sluice does)")
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("train_peft.py: no CUDA device")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=a.layers,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    if a.checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    lora = LoraConfig(r=a.rank, lora_alpha=a.alpha if a.alpha is not None else 2 * a.rank,
                      target_modules=TARGETS[a.targets], lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    tokens = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")
    times = []
    for step in range(a.warmup_steps + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=tokens, labels=tokens)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= a.warmup_steps:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"engine": "pytorch+peft", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "layers": a.layers, "rank": a.rank, "targets": a.targets, "batch": a.batch, "seq": a.seq,
                      "checkpointing": a.checkpointing, "lora_params": sum(q.numel() for q in params),
                      "step_s": times, "median_step_s": med, "tokens_per_s": a.batch * a.seq / med,
                      "max_memory_gb": torch.cuda.max_memory_allocated() / 1e9}))


if __name__ == "__main__":
    main()
