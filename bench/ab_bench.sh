#!/usr/bin/env bash
# Two sluice binaries on the same files, alternating: did a change move speed?
# For each model and round, `sluice bench --json` runs with binary A and binary B
# (the order flips every round, so drift and heat hit both alike); the table
# gives each binary's median over rounds of its per-run medians, and B / A.
#
#   bench/ab_bench.sh --a OLD --b NEW [options] MODEL.gguf ...
#     --a PATH, --b PATH   the two sluice binaries (A: before, B: after)
#     --rounds N           alternating rounds per model (default 3)
#     -r, --reps R         repetitions inside each run (default 3)
#     -t, --threads T      threads (default 2)
#     -p N, -n N           prompt and generated tokens (default 128, 64)
#     --out-dir DIR        raw JSON and table.md (default bench/out/ab-<timestamp>)
#
# Writes OUT_DIR/<model>.{a,b}.r<k>.json and table.md, and prints the table.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
A="" B=""
ROUNDS=3 REPS=3 THREADS=2 N_PROMPT=128 N_GEN=64
OUT_DIR="$ROOT/bench/out/ab-$(date -u +%Y%m%dT%H%M%SZ)"
MODELS=()

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --a) A="$2"; shift 2 ;;
    --b) B="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    -r|--reps) REPS="$2"; shift 2 ;;
    -t|--threads) THREADS="$2"; shift 2 ;;
    -p) N_PROMPT="$2"; shift 2 ;;
    -n) N_GEN="$2"; shift 2 ;;
    --out-dir) OUT_DIR="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) MODELS+=("$1"); shift ;;
  esac
done

for bin in "$A" "$B"; do
  if [[ -z "$bin" || ! -x "$bin" ]]; then
    echo "error: --a and --b must name sluice binaries (got '$bin')" >&2; exit 2
  fi
done
if [[ ${#MODELS[@]} -eq 0 ]]; then
  echo "error: no model files given (see --help)" >&2; exit 2
fi
mkdir -p "$OUT_DIR"

run_one() {  # binary tag model round
  local name; name="$(basename "$3" .gguf)"
  echo "  $name round $4: $2" >&2
  "$1" bench -m "$3" -p "$N_PROMPT" -n "$N_GEN" -r "$REPS" -t "$THREADS" --json \
    --no-probe >"$OUT_DIR/$name.$2.r$4.json" 2>"$OUT_DIR/$name.$2.r$4.err"
}

for model in "${MODELS[@]}"; do
  for ((k = 1; k <= ROUNDS; k++)); do
    if ((k % 2)); then run_one "$A" a "$model" "$k"; run_one "$B" b "$model" "$k"
    else run_one "$B" b "$model" "$k"; run_one "$A" a "$model" "$k"; fi
  done
done

python3 - "$OUT_DIR" <<'EOF' | tee "$OUT_DIR/table.md"
import glob, json, os, re, statistics, sys
d = sys.argv[1]
runs = {}
for path in glob.glob(os.path.join(d, "*.json")):
    m = re.match(r"^(.+)\.([ab])\.r(\d+)\.json$", os.path.basename(path))
    with open(path) as f:
        j = json.load(f)
    runs.setdefault(m.group(1), {}).setdefault(m.group(2), []).append(j)
print("| model | pp A | pp B | pp B/A | tg A | tg B | tg B/A |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for model in sorted(runs):
    med = {t: {k: statistics.median(r[k] for r in runs[model][t]) for k in ("pp_tps", "tg_tps")}
           for t in ("a", "b")}
    print(f"| {model} | {med['a']['pp_tps']:.1f} | {med['b']['pp_tps']:.1f} | "
          f"{med['b']['pp_tps'] / med['a']['pp_tps']:.3f} | {med['a']['tg_tps']:.2f} | "
          f"{med['b']['tg_tps']:.2f} | {med['b']['tg_tps'] / med['a']['tg_tps']:.3f} |")
EOF
