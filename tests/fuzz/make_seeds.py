#!/usr/bin/env python3
"""Regenerates tests/fuzz/corpus/<harness>/ seed inputs.

Seeds come from the real files in ../shared (model headers, vocabularies, chat
templates), the project's own templates and test requests, and a few tiny
well-formed files written here, so that every seed is small: model files keep
only their header (tensor data is cut off), and the synthetic ones carry a
data region of a few hundred bytes. Usage: tests/fuzz/make_seeds.py [SHARED_DIR]
"""
import hashlib
import json
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared")
MODELS = os.path.join(SHARED, "models")
CORPUS = os.path.join(HERE, "corpus")
MAX_SEED = 64 << 10  # no seed above 64 KiB


def put(harness, name, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data[:MAX_SEED])


def read(path, limit=None):
    if not os.path.exists(path):
        print(f"make_seeds: {path} absent, skipped", file=sys.stderr)
        return None
    with open(path, "rb") as f:
        return f.read(limit) if limit else f.read()


# ---------------------------------------------------------------- GGUF
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


# ggml type -> (block elements, block bytes)
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144)}


def gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, dims, ggml type)] -> bytes."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + gval(t, v)
    offset, datas = 0, []
    for name, dims, t in tensors:
        n = 1
        for d in dims:
            n *= d
        blk, nb = GGML[t]
        size = n // blk * nb
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", t, offset)
        datas.append(bytes((i * 7 + 3) & 0x3F for i in range(size)))
        offset += (size + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    header_len = len(out)
    for d in datas:
        out += d + b"\0" * (-len(d) % alignment)
    return out, header_len


def gguf_header_len(b):
    """Bytes of a real GGUF's header (up to the aligned data start)."""
    pos = 8
    n_t, n_kv = struct.unpack_from("<QQ", b, pos)
    pos += 16
    align = 32

    def skip(t):
        nonlocal pos
        if t == STR:
            (n,) = struct.unpack_from("<Q", b, pos)
            pos += 8 + n
        elif t == ARR:
            et, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            for _ in range(n):
                skip(et)
        else:
            pos += struct.calcsize(SCALAR[t])

    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", b, pos)
        key = b[pos + 8:pos + 8 + n]
        pos += 8 + n
        (t,) = struct.unpack_from("<I", b, pos)
        pos += 4
        if key == b"general.alignment":
            (align,) = struct.unpack_from("<I", b, pos)
        skip(t)
    for _ in range(n_t):
        (n,) = struct.unpack_from("<Q", b, pos)
        pos += 8 + n
        (nd,) = struct.unpack_from("<I", b, pos)
        pos += 4 + 8 * nd + 4 + 8
    return pos + (-pos % align)


def gguf_seeds():
    tok_kvs = [
        ("tokenizer.ggml.model", STR, "llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, ["<unk>", "<s>", "</s>", "\u2581a", "b"])),
        ("tokenizer.ggml.scores", ARR, (F32, [0.0, 0.0, 0.0, -1.0, -2.0])),
        ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3, 1, 1])),
    ]
    hp = [("general.architecture", STR, "llama"), ("general.name", STR, "tiny"),
          ("general.alignment", U32, 32), ("llama.block_count", U32, 1),
          ("llama.embedding_length", U32, 32), ("llama.attention.head_count", U32, 2),
          ("llama.rope.freq_base", F32, 10000.0), ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
          ("general.file_type", U32, 1), ("test.u8", U8, 7), ("test.i8", I8, -7), ("test.u16", U16, 7),
          ("test.i16", I16, -7), ("test.i32", I32, -7), ("test.bool", BOOL, True), ("test.u64", U64, 7),
          ("test.i64", I64, -7), ("test.f64", F64, 0.5),
          ("test.nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["x"])]))]
    tensors = [("token_embd.weight", [32, 5], 0), ("blk.0.attn_q.weight", [32, 32], 1),
               ("blk.0.ffn_up.weight", [32, 4], 2), ("blk.0.ffn_down.weight", [32, 2], 8),
               ("output.weight", [256, 1], 12)]
    full, header = gguf(hp + tok_kvs, tensors)
    put("gguf", "synthetic-v3-full.gguf", full)
    put("gguf", "synthetic-v3-header-only.gguf", full[:header])
    full2, _ = gguf(hp[:2] + [("general.alignment", U32, 64)], tensors[:2], version=2, alignment=64)
    put("gguf", "synthetic-v2-align64.gguf", full2)
    put("gguf", "synthetic-empty.gguf", gguf([], [])[0])
    for rel in ["stories260K/stories260K.gguf", "stories-moe/stories-moe.gguf", "quant-zoo/tiny-Q4_K_M.gguf",
                "quant-zoo/tiny-Q8_0.gguf", "quant-zoo/tiny-IQ4_XS.gguf"]:
        b = read(os.path.join(MODELS, rel), 4 << 20)
        if b is None:
            continue
        h = gguf_header_len(b)
        name = os.path.basename(rel)
        if h <= MAX_SEED:
            put("gguf", name + ".header", b[:h])
        else:  # a big vocabulary: keep the start (magic, counts, first keys)
            put("gguf", name + ".prefix", b[:8192])


# ---------------------------------------------------------------- safetensors + config.json
def safetensors(tensors, metadata=None):
    hdr, off, data = {}, 0, b""
    if metadata is not None:
        hdr["__metadata__"] = metadata
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U8": 1, "BOOL": 1, "F64": 8, "I8": 1}
    for name, dtype, shape in tensors:
        n = sizes[dtype]
        for d in shape:
            n *= d
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        data += bytes(i & 0xFF for i in range(n))
        off += n
    j = json.dumps(hdr, separators=(",", ":")).encode()
    j += b" " * (-len(j) % 8)
    return struct.pack("<Q", len(j)) + j + data


def safetensors_seeds():
    put("safetensors", "synthetic.safetensors",
        safetensors([("model.embed_tokens.weight", "F32", [4, 2]), ("lm_head.weight", "BF16", [4, 2]),
                     ("model.norm.weight", "F16", [2]), ("scalar", "I64", []), ("empty", "U8", [0, 3])],
                    {"format": "pt"}))
    put("safetensors", "synthetic-no-tensors.safetensors", safetensors([]))
    for rel in ["stories260K/hf", "stories-moe/hf"]:
        d = os.path.join(MODELS, rel)
        b = read(os.path.join(d, "model.safetensors"), 1 << 20)
        if b is not None:
            (n,) = struct.unpack_from("<Q", b, 0)
            put("safetensors", rel.split("/")[0] + ".safetensors.header", b[:8 + n + 64])
        c = read(os.path.join(d, "config.json"))
        if c is not None:
            put("safetensors", rel.split("/")[0] + ".config.json", c)
    base = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False}
    put("safetensors", "qwen2.config.json", json.dumps(base))
    put("safetensors", "mixtral.config.json", json.dumps(dict(base, model_type="mixtral", num_local_experts=4,
                                                             num_experts_per_tok=2)))
    put("safetensors", "qwen2moe.config.json", json.dumps(dict(base, model_type="qwen2_moe", num_experts=4,
                                                              num_experts_per_tok=2, moe_intermediate_size=32,
                                                              shared_expert_intermediate_size=64,
                                                              decoder_sparse_step=1, mlp_only_layers=[],
                                                              norm_topk_prob=True)))
    put("safetensors", "llama3-rope.config.json",
        json.dumps(dict(base, model_type="llama", head_dim=16,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})))
    put("safetensors", "mistral-linear.config.json",
        json.dumps(dict(base, model_type="mistral", rope_scaling={"type": "linear", "factor": 2.0})))


# ---------------------------------------------------------------- llama2.c
def llama2c_tokenizer(pieces, max_len=None):
    max_len = max_len or max(len(p) for p in pieces)
    out = struct.pack("<i", max_len)
    for i, p in enumerate(pieces):
        out += struct.pack("<fi", -float(i), len(p)) + p
    return out


def llama2c_checkpoint(dim, hidden, layers, heads, kv_heads, vocab, seq, v1=False, shared=True, freq_cis=False):
    kv_dim = dim * kv_heads // heads
    n = (abs(vocab) * dim + layers * dim * 2 + layers * dim * dim * 2 + layers * kv_dim * dim * 2
         + layers * hidden * dim * 3 + dim)
    if not v1 and freq_cis:
        n += seq * (dim // heads)
    if not shared:
        n += abs(vocab) * dim
    weights = struct.pack(f"<{n}f", *[((i % 13) - 6) / 8.0 for i in range(n)])
    if v1:
        head = struct.pack("<Ii7iB", 0x616B3432, 1, dim, hidden, layers, heads, kv_heads, abs(vocab), seq,
                           1 if shared else 0)
        head += b"\0" * (256 - len(head))
    else:
        head = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, abs(vocab) if shared else -abs(vocab), seq)
    return head + weights


def llama2c_seeds():
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n", b"<0x0A>", b" a", b"b"]
    tok = llama2c_tokenizer(pieces)

    def pair(ckpt, tk):
        return struct.pack("<I", len(ckpt)) + ckpt + tk

    cfg = dict(dim=4, hidden=8, layers=1, heads=2, kv_heads=1, vocab=len(pieces), seq=4)
    put("llama2c", "legacy.bin", pair(llama2c_checkpoint(**cfg), tok))
    put("llama2c", "legacy-freq-cis.bin", pair(llama2c_checkpoint(**cfg, freq_cis=True), tok))
    put("llama2c", "legacy-wcls.bin", pair(llama2c_checkpoint(**cfg, shared=False), tok))
    put("llama2c", "v1.bin", pair(llama2c_checkpoint(**cfg, v1=True), tok))
    put("llama2c", "v1-wcls.bin", pair(llama2c_checkpoint(**cfg, v1=True, shared=False), tok))
    b = read(os.path.join(MODELS, "stories260K/stories260K.bin"), 28)
    t = read(os.path.join(MODELS, "stories260K/tok512.bin"))
    if b is not None and t is not None:
        put("llama2c", "stories260K-header+tok512.bin", pair(b, t))


# ---------------------------------------------------------------- HF tokenizer.json
def hf_tokenizer_seeds():
    real = read(os.path.join(MODELS, "stories260K/hf/tokenizer.json"))
    if real is not None:
        put("hf_tokenizer", "stories260K.tokenizer.json", real)
    # Byte-level BPE in the GPT-2 / Llama 3 / Qwen2 styles, with a tiny vocabulary.
    alphabet = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a", "\u0109"]
    vocab = {t: i for i, t in enumerate(alphabet)}
    merges = ["\u0120 t", "h e", "\u0120t he", "i n", "\u0120 a"]
    for m in merges:
        vocab.setdefault(m.replace(" ", ""), len(vocab))
    added = [{"id": len(vocab), "content": "<|endoftext|>", "special": True, "single_word": False,
              "lstrip": False, "rstrip": False, "normalized": False},
             {"id": len(vocab) + 1, "content": "<|im_start|>", "special": True},
             {"id": len(vocab) + 2, "content": "<tool>", "special": False}]
    regexes = {
        "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
        "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    }
    for name, rx in regexes.items():
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        doc = {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": pre,
               "post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
               "model": {"type": "BPE", "vocab": vocab, "merges": merges if name != "qwen2" else
                         [m.split(" ") for m in merges], "ignore_merges": name == "llama3"}}
        put("hf_tokenizer", f"{name}-bytelevel.tokenizer.json", json.dumps(doc, ensure_ascii=False))
    plain = {"model": {"type": "BPE", "vocab": vocab, "merges": merges},
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}}
    put("hf_tokenizer", "gpt2-plain.tokenizer.json", json.dumps(plain, ensure_ascii=False))
    spm = {"model": {"type": "BPE", "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "\u2581": 4, "a": 5,
                                               "\u2581a": 6}, "merges": ["\u2581 a"], "byte_fallback": True,
                     "unk_token": "<unk>"},
           "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"},
           "decoder": {"type": "Metaspace"},
           "added_tokens": [{"id": 1, "content": "<s>", "special": True}]}
    put("hf_tokenizer", "metaspace.tokenizer.json", json.dumps(spm, ensure_ascii=False))


# ---------------------------------------------------------------- tokenizer text
def tokenizer_seeds():
    texts = []
    for stem in ["ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"]:
        b = read(os.path.join(MODELS, "vocab", stem + ".inp"))
        if b is not None:
            texts += [t for t in b.split(b"\n__ggml_vocab_test__\n") if len(t) < 2048]
    texts += [b"<s>Hello<|endoftext|> world </s>", b"\xff\xfe invalid \xc3( utf8 \xed\xa0\x80",
              "caf\u00e9 \u2581 \U0001F600 \u4e2d\u6587 123456 'll 'S".encode()]
    seen = set()
    for i, t in enumerate(texts):
        if t in seen:
            continue
        seen.add(t)
        flags = (i % 4) | (4 if i % 3 == 0 else 0) | (8 if i % 5 == 0 else 0) | (16 if i % 2 else 0)
        put("tokenizer", f"text-{i:03d}", bytes([flags]) + t)
    # The WordPiece, unigram and RWKV kinds (29, 30, 31: bits 0-1 and 5-7 of the flags).
    extra = [b"Hello, WORLD! caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd", b"  the\t\tonce \xef\xac\x81 <extra_id_0>[CLS]",
             b"\xff\xfe\x00 \xe2\x96\x81 \\x41\\n 12345"]
    for kind in (29, 30, 31):
        for j, t in enumerate(extra):
            flags = (kind & 3) | ((kind >> 2) << 5) | (4 if j != 1 else 0) | (8 if j == 1 else 0) | (16 if j == 2 else 0)
            put("tokenizer", f"kind{kind}-{j}", bytes([flags]) + t)


# ---------------------------------------------------------------- Jinja templates
def jinja_seeds():
    dirs = [os.path.join(SHARED, "chat-templates"), os.path.join(ROOT, "src/server/templates")]
    for d in dirs:
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(".jinja"):
                put("jinja", f, read(os.path.join(d, f)))
    test = read(os.path.join(ROOT, "src/jinja/jinja_test.cpp")) or b""
    for i, m in enumerate(re.findall(rb'R"\((.*?)\)"', test, re.S)):
        if b"{" in m:
            put("jinja", f"jinja_test-{i:03d}", m)
    # Dict literals with keys of every type, sorted, printed and serialized.
    put("jinja", "dict-keys-dictsort",
        "{%- set by_budget = {32768: 'high', 1024: 'low', 8192: 'medium', 0: 'none'} -%}"
        "{%- set ns = namespace(name='none') -%}{%- for budget, name in by_budget | dictsort -%}"
        "{%- if 9000 >= budget -%}{%- set ns.name = name -%}{%- endif -%}{%- endfor -%}"
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{{ ns.name }}")
    put("jinja", "dict-keys-types",
        "{% set d = {1: 'a', 1.5: 'b', true: 'c', none: 'd', 'x': 'e', (1, 2): 'f', -3: 'g'} %}"
        "{{ d }}{{ d[1.0] }}{{ d | items | list }}{{ {2: 'a', 1.5: 'b', -1: 'd'} | dictsort(reverse=true) }}"
        "{{ {10: 1, 9: 2, 1.5: 3, false: 4} | tojson(sort_keys=true, indent=2) }}{{ 1 in d }}{{ d.keys() | sort }}")


# ---------------------------------------------------------------- OpenAI requests
def openai_seeds():
    bodies = []
    for rel in ["src/server/generation_request_test.cpp", "src/server/openai_request_test.cpp",
                "tests/server_e2e_test.cpp"]:
        b = read(os.path.join(ROOT, rel)) or b""
        for m in re.findall(rb'R"\((\{.*?\})\)"', b, re.S):
            bodies.append(m)
    seen = set()
    for i, body in enumerate(bodies):
        if body in seen:
            continue
        seen.add(body)
        chat = b'"messages"' in body
        put("openai_request", f"req-{i:03d}", bytes([1 if chat else 0]) + body)


def main():
    gguf_seeds()
    safetensors_seeds()
    llama2c_seeds()
    hf_tokenizer_seeds()
    tokenizer_seeds()
    jinja_seeds()
    openai_seeds()


if __name__ == "__main__":
    main()
