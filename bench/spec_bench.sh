#!/usr/bin/env bash
# Speculative decoding benchmark: `sluice bench-spec` over a fixed set of
# target/proposer pairs, resident and with the target's weights streaming, and
# one Markdown table of the results (docs/BENCHMARKS.md).
#
#   bench/spec_bench.sh [--sluice BIN] [--models-dir DIR] [--shared DIR] [-n N] [-r R] [-t T]
#                       [--stream-budget BYTES] [--out-dir DIR]
#
# Models: stories260K from the shared data (real weights), and synthetic 110m
# files in --models-dir (written with `sluice synth --seed 1` when missing: an F16
# target and its Q8_0 and Q4_0 copies, which hold the same weights quantized).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
sluice="$here/../build/sluice"
models="$here/models"
shared="$here/../../shared"
n=64
reps=3
threads=2
budget=130M
out="$here/out/spec-$(date -u +%Y%m%d-%H%M%S)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sluice) sluice="$2"; shift 2 ;;
    --models-dir) models="$2"; shift 2 ;;
    --shared) shared="$2"; shift 2 ;;
    -n) n="$2"; shift 2 ;;
    -r) reps="$2"; shift 2 ;;
    -t) threads="$2"; shift 2 ;;
    --stream-budget) budget="$2"; shift 2 ;;
    --out-dir) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x "$sluice" ]] || { echo "no sluice binary at $sluice (build first or pass --sluice)" >&2; exit 1; }
mkdir -p "$models" "$out"
for t in f16 q8_0 q4_0; do
  f="$models/110m-$t.gguf"
  [[ -f "$f" ]] || "$sluice" synth --preset 110m --type "$t" --seed 1 -o "$f"
done
s260k="$shared/models/stories260K/stories260K.gguf"
lookup_prompt='Lily and Tim went to the park. They played with a ball. Lily and Tim went to the park. They played with a ball. Lily and Tim went to the park. They'

run() {  # name, then bench-spec arguments
  local name="$1"; shift
  echo "== $name" >&2
  if "$sluice" bench-spec -n "$n" -r "$reps" -t "$threads" --json "$@" >"$out/$name.json" 2>"$out/$name.err"; then
    :
  else
    echo "   failed: $(tail -1 "$out/$name.err")" >&2
  fi
}

if [[ -f "$s260k" ]]; then
  run s260k-lookup -m "$s260k" --spec lookup -p "$lookup_prompt"
  run s260k-self -m "$s260k" --draft-model "$s260k"
  run s260k-self-fixed4 -m "$s260k" --draft-model "$s260k" --no-spec-adapt --draft-max 4
fi
for mode in resident streamed; do
  extra=()
  [[ $mode == streamed ]] && extra=(--mem-budget "$budget")
  run "110m-f16-lookup-$mode" -m "$models/110m-f16.gguf" --spec lookup "${extra[@]}"
  run "110m-f16-q8_0-$mode" -m "$models/110m-f16.gguf" --draft-model "$models/110m-q8_0.gguf" "${extra[@]}"
  run "110m-f16-q4_0-$mode" -m "$models/110m-f16.gguf" --draft-model "$models/110m-q4_0.gguf" "${extra[@]}"
  run "110m-f16-q4_0-fixed4-$mode" -m "$models/110m-f16.gguf" --draft-model "$models/110m-q4_0.gguf" \
    --no-spec-adapt --draft-max 4 "${extra[@]}"
done

python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
print("| run | target weights | proposer | plain tok/s | speculative tok/s | ratio | acceptance | tokens per target pass | drafted per run |")
print("|---|---|---|--:|--:|--:|--:|--:|--:|")
for path in sorted(glob.glob(os.path.join(out, "*.json")), key=os.path.getmtime):
    name = os.path.basename(path)[:-5]
    try:
        j = json.load(open(path))
    except Exception:
        err = open(path[:-5] + ".err").read().strip().splitlines()
        print(f"| {name} | | failed: {err[-1] if err else '?'} | | | | | | |")
        continue
    where = "streamed ({:.0f} MiB budget)".format(j["mem_budget_bytes"] / 2**20) if j["mem_budget_bytes"] else "resident"
    print(f"| {name} | {where} | {j['speculative']} | {j['plain_tps']:.2f} | {j['spec_tps']:.2f} | "
          f"{j['ratio']:.2f} | {100 * j['acceptance']:.1f}% | {j['tokens_per_pass']:.2f} | {j['drafted_per_run']:.0f} |")
PY
echo "results in $out" >&2
