#!/usr/bin/env bash
# Serving throughput and latency of sluice against llama.cpp's llama-server on the
# same synthetic GGUF, the same requests (same token ids, lengths and arrival
# times) and the same machine, in one session.
#
#   bench/serve_compare.sh [options]
#     --llama-cpp-dir DIR  llama.cpp build with build/bin/llama-server
#                          (env LLAMA_CPP_DIR; default: ../llama.cpp beside this repo)
#     --sluice PATH        sluice binary (env SLUICE; default: build/sluice)
#     --model FILE         GGUF (default: bench/models/110m-q8_0.gguf, written by
#                          `sluice synth --preset 110m --type q8_0` when missing)
#     --requests N         requests per run (default 64)
#     --concurrency C      sequences at once: sluice --max-seqs, llama-server -np (default 16)
#     --prompt-len DIST    bench-serve distribution (default uniform:16:128)
#     --output-len DIST    (default 64)
#     --rate R             requests/s of the Poisson workload (default 1.5)
#     --single-requests N  requests of the one-at-a-time baseline (default 4)
#     --seed S             workload seed (default 42)
#     --rounds N           alternating rounds per workload (default 1)
#     -t, --threads T      threads for both engines (default 2)
#     --timeout S          per run (default 300)
#     --out-dir DIR        results (default bench/out); each run gets its own folder
#     --table RUN_DIR      only rebuild the table of an earlier run from its JSON
#
# Workloads: "all" (every request at t = 0) and "poisson:R", each at C concurrent,
# plus a baseline of N requests one at a time (sluice --max-seqs 1, llama-server
# -np 1) for the batching gain. For each workload, `sluice bench-serve
# --dump-workload` writes the requests once; then, alternating which engine goes
# first every round: `sluice bench-serve --json` with those arguments, and
# llama-server (started on 127.0.0.1 at a free port, -np C, -c C x per-request
# context, --cont-batching, stopped after) driven by bench/serve_client.py.
# Writes OUT_DIR/<timestamp>/{machine.txt, <workload>.workload.json,
# <workload>.{sluice,llamacpp}.r<k>.{json,err}, table.md} and prints the table.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLAMA_CPP_DIR="${LLAMA_CPP_DIR:-$ROOT/../llama.cpp}"
SLUICE="${SLUICE:-$ROOT/build/sluice}"
MODEL=""
REQUESTS=64
CONC=16
PROMPT_LEN="uniform:16:128"
OUTPUT_LEN=64
RATE=1.5
SINGLE_REQUESTS=4
SEED=42
ROUNDS=1
THREADS=2
TIMEOUT=300
OUT_DIR="$ROOT/bench/out"
TABLE_ONLY=""

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --llama-cpp-dir) LLAMA_CPP_DIR="$2"; shift 2 ;;
    --sluice) SLUICE="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --requests) REQUESTS="$2"; shift 2 ;;
    --concurrency) CONC="$2"; shift 2 ;;
    --prompt-len) PROMPT_LEN="$2"; shift 2 ;;
    --output-len) OUTPUT_LEN="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --single-requests) SINGLE_REQUESTS="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    -t|--threads) THREADS="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --out-dir) OUT_DIR="$2"; shift 2 ;;
    --table) TABLE_ONLY="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# make_table RUN_DIR: the markdown table (medians over rounds) and the batching gain.
make_table() {
python3 - "$1" <<'EOF'
import glob, json, os, statistics, sys
run_dir = sys.argv[1]

def med(workload, engine, key):
    vals = []
    for f in sorted(glob.glob(os.path.join(run_dir, f"{workload}.{engine}.r*.json"))):
        with open(f) as fh:
            vals.append(json.load(fh)[key])
    return statistics.median(vals) if vals else None

def fmt(v, scale=1.0, digits=1):
    return "n/a" if v is None else f"{v * scale:.{digits}f}"

cols = [("output tok/s", "output_tps", 1, 1), ("TTFT p50 ms", "ttft_p50_s", 1e3, 0), ("TTFT p99 ms", "ttft_p99_s", 1e3, 0),
        ("TPOT p50 ms", "tpot_p50_s", 1e3, 1), ("TPOT p99 ms", "tpot_p99_s", 1e3, 1), ("E2E p50 s", "e2e_p50_s", 1, 2)]
workloads = sorted({os.path.basename(p)[:-len(".workload.json")] for p in glob.glob(os.path.join(run_dir, "*.workload.json"))},
                   key=lambda w: (w == "single", w))
conc = {}  # workload -> concurrency, from sluice's config
for w in workloads:
    for f in glob.glob(os.path.join(run_dir, f"{w}.sluice.r*.json")):
        with open(f) as fh:
            conc[w] = json.load(fh)["config"]["max_seqs"]
print("| workload | concurrency | engine | " + " | ".join(c[0] for c in cols) + " |")
print("|---|--:|---|" + "--:|" * len(cols))
for w in workloads:
    c = conc.get(w, "?")
    for engine, label in (("sluice", "sluice"), ("llamacpp", "llama.cpp")):
        print(f"| {w} | {c} | {label} | " + " | ".join(fmt(med(w, engine, k), s, d) for _, k, s, d in cols) + " |")
    ratios = []
    for _, k, _, _ in cols:
        a, b = med(w, "sluice", k), med(w, "llamacpp", k)
        ratios.append("n/a" if a is None or not b else f"{a / b:.2f}")
    print(f"| {w} | {c} | sluice / llama.cpp | " + " | ".join(ratios) + " |")
print()
for engine, label in (("sluice", "sluice"), ("llamacpp", "llama.cpp")):
    batched, single = med("all", engine, "output_tps"), med("single", engine, "output_tps")
    if batched and single:
        print(f"batching gain, {label}: {batched:.1f} tok/s at {conc.get('all', '?')} concurrent (all at once) / "
              f"{single:.1f} tok/s one at a time = {batched / single:.2f}x")
EOF
}

if [[ -n "$TABLE_ONLY" ]]; then
  make_table "$TABLE_ONLY"
  exit 0
fi

LLAMA_SERVER="$LLAMA_CPP_DIR/build/bin/llama-server"
if [[ ! -x "$LLAMA_SERVER" ]]; then
  cat >&2 <<EOF
error: llama-server not found at $LLAMA_SERVER
llama.cpp is the engine compared against; it is never part of this repository.
Build it beside the repository (CPU only), or point --llama-cpp-dir / LLAMA_CPP_DIR at a build:
  git clone https://github.com/ggerganov/llama.cpp $ROOT/../llama.cpp
  cmake -S $ROOT/../llama.cpp -B $ROOT/../llama.cpp/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON
  cmake --build $ROOT/../llama.cpp/build --target llama-server -j\$(nproc)
EOF
  exit 1
fi
[[ -x "$SLUICE" ]] || { echo "error: sluice binary not found at $SLUICE (build it, or pass --sluice)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 is needed for the client and the table" >&2; exit 1; }
command -v curl >/dev/null || { echo "error: curl is needed to poll llama-server's /health" >&2; exit 1; }

if [[ -z "$MODEL" ]]; then
  MODEL="$ROOT/bench/models/110m-q8_0.gguf"
  mkdir -p "$(dirname "$MODEL")"
  [[ -e "$(dirname "$MODEL")/.gitignore" ]] || printf '*\n' > "$(dirname "$MODEL")/.gitignore"
  if [[ ! -s "$MODEL" ]]; then
    echo "[serve] synth 110m q8_0 -> $MODEL" >&2
    "$SLUICE" synth --preset 110m --type q8_0 -o "$MODEL.tmp" >&2
    mv "$MODEL.tmp" "$MODEL"
  fi
fi

RUN_DIR="$OUT_DIR/serve-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RUN_DIR"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "sluice commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "llama.cpp commit: $(git -C "$LLAMA_CPP_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
  echo "cpus online: $(nproc)"
  echo "memory: $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
  echo "model: $MODEL"
  echo "threads $THREADS; requests $REQUESTS at concurrency $CONC; prompt $PROMPT_LEN, output $OUTPUT_LEN; poisson rate $RATE/s; seed $SEED; rounds $ROUNDS"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$RUN_DIR/machine.txt"
cat "$RUN_DIR/machine.txt" >&2

SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    kill -INT "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    { wait "$SERVER_PID"; } 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap stop_server EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Positions one request needs (longest prompt + its output), rounded up to 64.
per_request_ctx() {
  python3 -c 'import json, sys; w = json.load(open(sys.argv[1])); n = max(len(x["prompt_tokens"]) + x["max_tokens"] for x in w); print((n + 63) // 64 * 64)' "$1"
}

# run_llamacpp WORKLOAD_FILE PARALLEL OUT_BASE
run_llamacpp() {
  local wl="$1" np="$2" base="$3" port ctx rc=0
  port="$(free_port)"
  ctx=$(( np * $(per_request_ctx "$wl") ))
  "$LLAMA_SERVER" -m "$MODEL" -np "$np" -c "$ctx" -t "$THREADS" --cont-batching --host 127.0.0.1 --port "$port" \
    > "$base.server.log" 2>&1 &
  SERVER_PID=$!
  local up=0
  for _ in $(seq 240); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then up=1; break; fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.25
  done
  if [[ $up -eq 1 ]]; then
    timeout "$((TIMEOUT + 30))" python3 "$ROOT/bench/serve_client.py" --url "http://127.0.0.1:$port" --workload "$wl" \
      --timeout "$TIMEOUT" --json > "$base.json" 2> "$base.err" || rc=$?
  else
    echo "llama-server did not become healthy; see $base.server.log" > "$base.err"
    rc=1
  fi
  stop_server
  if [[ $rc -ne 0 ]]; then
    rm -f "$base.json"
    echo "  llama.cpp failed (exit $rc): $(tail -n1 "$base.err")" >&2
  fi
}

# run_sluice MAX_SEQS OUT_BASE ARGS...
run_sluice() {
  local seqs="$1" base="$2" rc=0
  shift 2
  timeout "$((TIMEOUT + 60))" "$SLUICE" bench-serve -m "$MODEL" -t "$THREADS" --max-seqs "$seqs" --timeout "$TIMEOUT" \
    --json "$@" > "$base.json" 2> "$base.err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    rm -f "$base.json"
    echo "  sluice failed (exit $rc): $(tail -n1 "$base.err")" >&2
  fi
}

# workload NAME CONCURRENCY ARGS...: dump the requests once, then alternate engines.
workload() {
  local name="$1" conc="$2"
  shift 2
  local wl="$RUN_DIR/$name.workload.json"
  "$SLUICE" bench-serve -m "$MODEL" --seed "$SEED" "$@" --dump-only --dump-workload "$wl" 2>> "$RUN_DIR/$name.dump.err"
  for ((round = 1; round <= ROUNDS; round++)); do
    if (( round % 2 )); then order="sluice llamacpp"; else order="llamacpp sluice"; fi
    for engine in $order; do
      echo "[serve] $name round $round/$ROUNDS: $engine (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      if [[ "$engine" == sluice ]]; then
        run_sluice "$conc" "$RUN_DIR/$name.sluice.r$round" --seed "$SEED" "$@"
      else
        run_llamacpp "$wl" "$conc" "$RUN_DIR/$name.llamacpp.r$round"
      fi
    done
  done
}

workload all "$CONC" --requests "$REQUESTS" --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN" --arrival all
workload single 1 --requests "$SINGLE_REQUESTS" --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN" --arrival all
workload "poisson-$RATE" "$CONC" --requests "$REQUESTS" --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN" \
  --arrival "poisson:$RATE"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$RUN_DIR/machine.txt"

make_table "$RUN_DIR" | tee "$RUN_DIR/table.md"
echo "[serve] raw results and table in $RUN_DIR" >&2
