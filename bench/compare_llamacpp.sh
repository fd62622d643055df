#!/usr/bin/env bash
# sluice against llama.cpp on the same synthetic GGUF files, same machine, same
# session: for each model, `sluice bench --json` and `llama-bench -o json` run
# alternately (the order flips every round, so drift and heat hit both alike),
# then bench/compare_table.py prints the medians as a markdown table.
#
#   bench/compare_llamacpp.sh [options]
#     --llama-cpp-dir DIR  llama.cpp checkout with build/bin/llama-bench
#                          (env LLAMA_CPP_DIR; default: ../llama.cpp beside this repo)
#     --sluice PATH        sluice binary (env SLUICE; default: build/sluice)
#     --presets "P ..."    synth presets (default: "110m 1b"); PRESET@N writes N layers
#                          (e.g. mixtral-8x7b@4, a slice of Mixtral's layers)
#     --types "T ..."      weight types (default: "f16 q8_0 q4_0 q4_k_m")
#     --rounds N           alternating rounds per model (env ROUNDS; default 3)
#     -r, --reps R         repetitions inside each run (env REPS; default 5)
#     -t, --threads T      threads for both engines (env THREADS; default 2)
#     -p N, -n N           prompt and generated tokens (default 512, 128)
#     --models-dir DIR     where synth models are written once (default bench/models)
#     --out-dir DIR        raw JSON and the table (default bench/out); each run
#                          gets its own timestamped folder
#
# Writes OUT_DIR/<timestamp>/<model>.{sluice,llamacpp}.r<k>.{json,err},
# machine.txt, table.md and table.json, and prints the table.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLAMA_CPP_DIR="${LLAMA_CPP_DIR:-$ROOT/../llama.cpp}"
SLUICE="${SLUICE:-$ROOT/build/sluice}"
PRESETS="110m 1b"
TYPES="f16 q8_0 q4_0 q4_k_m"
ROUNDS="${ROUNDS:-3}"
REPS="${REPS:-5}"
THREADS="${THREADS:-2}"
N_PROMPT=512
N_GEN=128
MODELS_DIR="$ROOT/bench/models"
OUT_DIR="$ROOT/bench/out"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --llama-cpp-dir) LLAMA_CPP_DIR="$2"; shift 2 ;;
    --sluice) SLUICE="$2"; shift 2 ;;
    --presets) PRESETS="$2"; shift 2 ;;
    --types) TYPES="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    -r|--reps) REPS="$2"; shift 2 ;;
    -t|--threads) THREADS="$2"; shift 2 ;;
    -p) N_PROMPT="$2"; shift 2 ;;
    -n) N_GEN="$2"; shift 2 ;;
    --models-dir) MODELS_DIR="$2"; shift 2 ;;
    --out-dir) OUT_DIR="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

LLAMA_BENCH="$LLAMA_CPP_DIR/build/bin/llama-bench"
if [[ ! -x "$LLAMA_BENCH" ]]; then
  cat >&2 <<EOF
error: llama-bench not found at $LLAMA_BENCH
llama.cpp is the engine compared against; it is never part of this repository.
Build it beside the repository (CPU only), or point --llama-cpp-dir / LLAMA_CPP_DIR at a build:
  git clone https://github.com/ggerganov/llama.cpp $ROOT/../llama.cpp
  cmake -S $ROOT/../llama.cpp -B $ROOT/../llama.cpp/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON
  cmake --build $ROOT/../llama.cpp/build --target llama-bench -j\$(nproc)
EOF
  exit 1
fi
if [[ ! -x "$SLUICE" ]]; then
  echo "error: sluice binary not found at $SLUICE (build it: cmake -S $ROOT -B $ROOT/build && cmake --build $ROOT/build --target sluice, or pass --sluice)" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "error: python3 is needed for the table" >&2; exit 1; }

mkdir -p "$MODELS_DIR"
# Models are large, generated data: never commit them.
[[ -e "$MODELS_DIR/.gitignore" ]] || printf '*\n' > "$MODELS_DIR/.gitignore"
RUN_DIR="$OUT_DIR/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RUN_DIR"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "sluice commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  # The checkout the build folder belongs to (build/ may be a link to another build tree).
  llama_src="$(dirname "$(readlink -f "$LLAMA_CPP_DIR/build")")"
  echo "llama.cpp commit: $(git -C "$llama_src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
  echo "cpu flags: $(grep -o -w -E 'avx512f|avx512_vnni|avx2|fma|f16c' /proc/cpuinfo 2>/dev/null | sort -u | tr '\n' ' ')"
  echo "sluice isa: ${SLUICE_ISA:-(highest supported)}"
  echo "llama.cpp build: $(grep -E '^GGML_(NATIVE|AVX|AVX2|AVX512|AVX512_VNNI|AVX_VNNI|FMA|F16C):' \
    "$LLAMA_CPP_DIR/build/CMakeCache.txt" 2>/dev/null | sed 's/:BOOL=/=/' | tr '\n' ' ' || echo unknown)"
  echo "cpus online: $(nproc)"
  echo "memory: $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
  echo "threads: $THREADS; pp $N_PROMPT, tg $N_GEN; rounds $ROUNDS x reps $REPS"
} > "$RUN_DIR/machine.txt"
cat "$RUN_DIR/machine.txt" >&2

# run_one ENGINE MODEL_FILE OUT_BASE: one benchmark run; on failure keeps only the .err.
run_one() {
  local engine="$1" file="$2" base="$3" rc=0
  if [[ "$engine" == sluice ]]; then
    "$SLUICE" bench -m "$file" -p "$N_PROMPT" -n "$N_GEN" -t "$THREADS" -r "$REPS" --json \
      > "$base.json" 2> "$base.err" || rc=$?
  else
    "$LLAMA_BENCH" -m "$file" -t "$THREADS" -p "$N_PROMPT" -n "$N_GEN" -r "$REPS" -o json \
      > "$base.json" 2> "$base.err" || rc=$?
  fi
  if [[ $rc -ne 0 ]]; then
    rm -f "$base.json"
    echo "  $engine failed (exit $rc): $(grep -m1 -iE 'error|assert' "$base.err" || tail -n1 "$base.err")" >&2
  fi
}

for spec in $PRESETS; do
  preset="${spec%@*}"
  layers=""
  [[ "$spec" == *@* ]] && layers="${spec#*@}"
  for type in $TYPES; do
    name="$preset${layers:+-${layers}l}-$type"
    file="$MODELS_DIR/$name.gguf"
    if [[ ! -s "$file" ]]; then
      echo "[bench] synth $name -> $file" >&2
      "$SLUICE" synth --preset "$preset" --type "$type" ${layers:+--layers "$layers"} -o "$file.tmp" >&2
      mv "$file.tmp" "$file"
    fi
    for ((round = 1; round <= ROUNDS; round++)); do
      if (( round % 2 )); then order="sluice llamacpp"; else order="llamacpp sluice"; fi
      for engine in $order; do
        echo "[bench] $name round $round/$ROUNDS: $engine" >&2
        run_one "$engine" "$file" "$RUN_DIR/$name.$engine.r$round"
      done
    done
  done
done

python3 "$ROOT/bench/compare_table.py" "$RUN_DIR" --json "$RUN_DIR/table.json" | tee "$RUN_DIR/table.md"
echo "[bench] raw results and table in $RUN_DIR" >&2
