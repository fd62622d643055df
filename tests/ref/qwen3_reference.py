#!/usr/bin/python3
"""Qwen3 and Qwen3-MoE reference logits, independent of sluice.

Writes two tiny random-weight Hugging Face folders (config.json,
model.safetensors in f32, and the stories260K tokenizer.json beside them so
the folders load as models) and the logits of a PyTorch forward pass written
from the Hugging Face modeling code of Qwen3 / Qwen3-MoE (transformers'
modeling_qwen3.py and modeling_qwen3_moe.py: RMSNorm in f32, q/k RMSNorm per
head before RoPE, rotate-half RoPE, grouped-query attention with a causal
mask and scale head_dim^-0.5, SwiGLU MLP; the sparse MoE block's router
softmax over all experts, top-k, renormalized when norm_topk_prob, experts
summed with those weights). Nothing here reads sluice's code or files.

  tests/data/qwen3_hf/qwen3/      dense: 2 layers, hidden 32, 4 heads of 16 (2 kv), ffn 64, tied head
  tests/data/qwen3_hf/qwen3moe/   routed: 2 layers, 4 experts of ffn 32 (top 2), untied head
  tests/data/qwen3_reference.json for each: the prompt ids, the logits at every
                                  position (float64 forward), 8 greedy ids, the
                                  smallest top-1 margin along the greedy path,
                                  and how far a float32 forward strays from the
                                  float64 one (the scale f32 rounding has here)

Run from the repository root with /usr/bin/python3 (torch; no transformers):
  /usr/bin/python3 tests/ref/qwen3_reference.py [--tokenizer ../shared/models/stories260K/hf/tokenizer.json]
"""
import argparse
import json
import math
import os
import shutil
import struct

import torch

VOCAB = 512
PROMPT = [1, 38, 75, 112, 149, 186, 223, 260, 297, 334, 371, 408]
N_GREEDY = 8

CONFIGS = {
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    },
    "qwen3moe": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    },
}


def make_weights(cfg, seed):
    """Random f32 tensors named as the HF checkpoints name them."""
    g = torch.Generator().manual_seed(seed)
    d, hd = cfg["hidden_size"], cfg["head_dim"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def rnd(*shape, scale):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).float()

    def norm(n):  # ones plus noise, so a misapplied norm shows
        return (1.0 + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)).float()

    w = {"model.embed_tokens.weight": rnd(VOCAB, d, scale=0.2)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "self_attn.q_proj.weight"] = rnd(nh * hd, d, scale=d ** -0.5)
        w[p + "self_attn.k_proj.weight"] = rnd(nkv * hd, d, scale=d ** -0.5)
        w[p + "self_attn.v_proj.weight"] = rnd(nkv * hd, d, scale=d ** -0.5)
        # o_proj and down_proj at 3x the unit scale: the layers move the residual
        # stream enough that a tied head does not just repeat the last token.
        w[p + "self_attn.o_proj.weight"] = rnd(d, nh * hd, scale=3 * (nh * hd) ** -0.5)
        w[p + "self_attn.q_norm.weight"] = norm(hd)
        w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        if "num_experts" in cfg:
            ff = cfg["moe_intermediate_size"]
            w[p + "mlp.gate.weight"] = rnd(cfg["num_experts"], d, scale=d ** -0.5)
            for e in range(cfg["num_experts"]):
                q = f"{p}mlp.experts.{e}."
                w[q + "gate_proj.weight"] = rnd(ff, d, scale=d ** -0.5)
                w[q + "up_proj.weight"] = rnd(ff, d, scale=d ** -0.5)
                w[q + "down_proj.weight"] = rnd(d, ff, scale=3 * ff ** -0.5)
        else:
            ff = cfg["intermediate_size"]
            w[p + "mlp.gate_proj.weight"] = rnd(ff, d, scale=d ** -0.5)
            w[p + "mlp.up_proj.weight"] = rnd(ff, d, scale=d ** -0.5)
            w[p + "mlp.down_proj.weight"] = rnd(d, ff, scale=3 * ff ** -0.5)
    w["model.norm.weight"] = norm(d)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rnd(VOCAB, d, scale=d ** -0.5)
    return w


def write_safetensors(path, tensors):
    """The safetensors layout: u64 header length, JSON header, raw data."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# --- the forward pass, after transformers' modeling_qwen3(_moe).py ----------

def rms_norm(x, weight, eps):
    # Qwen3RMSNorm: in f32 (here: the dtype of the run), weight applied after.
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(n, head_dim, theta, dtype):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def attention(x, w, p, cfg, cos, sin):
    n = x.shape[0]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    q = (x @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd)
    k = (x @ w[p + "self_attn.k_proj.weight"].T).view(n, nkv, hd)
    v = (x @ w[p + "self_attn.v_proj.weight"].T).view(n, nkv, hd)
    q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps).transpose(0, 1)  # [nh, n, hd]
    k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps).transpose(0, 1)
    v = v.transpose(0, 1)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    group = nh // nkv
    k = k.repeat_interleave(group, dim=0)  # repeat_kv: head h reads kv head h // group
    v = v.repeat_interleave(group, dim=0)
    scores = (q @ k.transpose(1, 2)) * hd ** -0.5
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = (probs @ v).transpose(0, 1).reshape(n, nh * hd)
    return out @ w[p + "self_attn.o_proj.weight"].T


def mlp(x, gate, up, down):
    return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T


ROUTER_GAP = [math.inf]  # the smallest gap between the k-th and the next routing probability


def sparse_moe(x, w, p, cfg):
    # Qwen3MoeSparseMoeBlock: softmax over every expert, then the top k.
    router_logits = x @ w[p + "mlp.gate.weight"].T
    routing = torch.softmax(router_logits, dim=-1)
    k = cfg["num_experts_per_tok"]
    ranked = torch.sort(routing, dim=-1, descending=True).values
    ROUTER_GAP[0] = min(ROUTER_GAP[0], float((ranked[:, k - 1] - ranked[:, k]).min()))
    top_w, top_i = torch.topk(routing, k, dim=-1)
    if cfg["norm_topk_prob"]:
        top_w = top_w / top_w.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(top_i.shape[1]):
            q = f"{p}mlp.experts.{int(top_i[t, j])}."
            y = mlp(x[t:t + 1], w[q + "gate_proj.weight"], w[q + "up_proj.weight"], w[q + "down_proj.weight"])
            out[t] += top_w[t, j] * y[0]
    return out


def forward(cfg, w, ids, dtype):
    w = {k: v.to(dtype) for k, v in w.items()}
    eps = cfg["rms_norm_eps"]
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    cos, sin = rope_cos_sin(len(ids), cfg["head_dim"], cfg["rope_theta"], dtype)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = x + attention(rms_norm(x, w[p + "input_layernorm.weight"], eps), w, p, cfg, cos, sin)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        if "num_experts" in cfg:
            x = x + sparse_moe(h, w, p, cfg)
        else:
            x = x + mlp(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"])
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T  # [n, vocab]


def greedy(cfg, w, ids, n):
    """n greedy ids (full forward each step) and the smallest top-1 margin."""
    ids, out, margin = list(ids), [], math.inf
    for _ in range(n):
        last = forward(cfg, w, ids, torch.float64)[-1]
        top = torch.topk(last, 2).values
        margin = min(margin, float(top[0] - top[1]))
        t = int(torch.argmax(last))
        out.append(t)
        ids.append(t)
    return out, margin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default="../shared/models/stories260K/hf/tokenizer.json")
    ap.add_argument("--out", default="tests/data")
    a = ap.parse_args()
    ref = {
        "source": "tests/ref/qwen3_reference.py: PyTorch " + torch.__version__ + " forward written from the Hugging "
                  "Face modeling code of Qwen3 / Qwen3-MoE, float64, on the random-weight HF folders it writes "
                  "under tests/data/qwen3_hf/",
        "prompt": PROMPT,
        "models": {},
    }
    for seed, (name, cfg) in enumerate(CONFIGS.items(), start=3):
        folder = os.path.join(a.out, "qwen3_hf", name)
        os.makedirs(folder, exist_ok=True)
        w = make_weights(cfg, seed)
        write_safetensors(os.path.join(folder, "model.safetensors"), w)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        shutil.copyfile(a.tokenizer, os.path.join(folder, "tokenizer.json"))
        ROUTER_GAP[0] = math.inf
        logits64 = forward(cfg, w, PROMPT, torch.float64)
        logits32 = forward(cfg, w, PROMPT, torch.float32).double()
        ids, margin = greedy(cfg, w, PROMPT, N_GREEDY)
        ref["models"][name] = {
            "folder": f"qwen3_hf/{name}",
            "logits": [[float(f"{v:.9g}") for v in row] for row in logits64.tolist()],
            "greedy": ids,
            "greedy_min_margin": margin,
            "f32_max_abs_diff": float((logits32 - logits64).abs().max()),
            "max_abs_logit": float(logits64.abs().max()),
        }
        if "num_experts" in cfg:
            ref["models"][name]["router_min_gap"] = ROUTER_GAP[0]
        print(f"{name}: greedy {ids}, smallest margin {margin:.4f}, "
              f"f32 vs f64 {ref['models'][name]['f32_max_abs_diff']:.2e}, |logit| <= {ref['models'][name]['max_abs_logit']:.2f}, "
              f"router gap {ROUTER_GAP[0]:.2e}")
    with open(os.path.join(a.out, "qwen3_reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
