#!/usr/bin/env bash
# The fluid split against the split fixed at load, side by side: one
# bench-serve workload (give it a ramp of arrivals, --arrival ramp:SECONDS)
# run with the split fixed and moving in alternation for R rounds; the median
# of each figure, whether every round's tokens match, and each run's timeline
# (requests running and waiting, KV blocks, units given up, preemptions) as an
# SVG chart beside one Markdown table (docs/BENCHMARKS.md).
#
#   bench/fluid_ramp.sh [--sluice BIN] [-r R] [--out-dir DIR] -- BENCH_SERVE_ARGS...
#
# BENCH_SERVE_ARGS are bench-serve's (model, budgets, workload); the script adds
# --json, --dump-outputs, --timeline and, for the moving runs, --fluid-split.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
sluice="$here/../build/sluice"
reps=3
out="$here/out/fluid-$(date -u +%Y%m%d-%H%M%S)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sluice) sluice="$2"; shift 2 ;;
    -r) reps="$2"; shift 2 ;;
    --out-dir) out="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (bench-serve's arguments go after --)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "give bench-serve's arguments after --" >&2; exit 2; }
[[ -x "$sluice" ]] || { echo "no sluice binary at $sluice (build first or pass --sluice)" >&2; exit 1; }
mkdir -p "$out"
for r in $(seq 1 "$reps"); do
  for split in fixed fluid; do
    extra=()
    [[ $split = fluid ]] && extra=(--fluid-split)
    echo "[fluid_ramp] round $r, $split" >&2
    "$sluice" bench-serve "$@" "${extra[@]}" --json --dump-outputs "$out/$split-$r.tokens.json" \
      --timeline "$out/$split-$r.svg" > "$out/$split-$r.json" 2> "$out/$split-$r.log" ||
      { echo "[fluid_ramp] round $r, $split failed:" >&2; tail -5 "$out/$split-$r.log" >&2; exit 1; }
  done
  cmp -s "$out/fixed-$r.tokens.json" "$out/fluid-$r.tokens.json" && echo identical > "$out/tokens-$r" ||
    echo differ > "$out/tokens-$r"
done
python3 - "$out" "$reps" <<'EOF'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def load(split, r):
    with open(f"{out}/{split}-{r}.json") as f:
        return json.load(f)
print("| split | wall s (rounds) | output tok/s (median) | requests/s (median) | TTFT p50 s (median) | preemptions | units given up | tokens |")
print("|---|---|--:|--:|--:|--:|--:|---|")
for split in ("fixed", "fluid"):
    runs = [load(split, r) for r in range(1, reps + 1)]
    med = lambda k: statistics.median(j[k] for j in runs)
    tokens = ", ".join(open(f"{out}/tokens-{r}").read().strip() for r in range(1, reps + 1)) if split == "fluid" else ""
    demoted = ", ".join(str(j.get("fluid_demotions", "-")) for j in runs) if split == "fluid" else "-"
    walls = ", ".join("%.2f" % j["wall_s"] for j in runs)
    preempted = ", ".join(str(j["preemptions"]) for j in runs)
    print(f"| {split} | {walls} | {med('output_tps'):.1f} | {med('req_per_s'):.2f} | {med('ttft_p50_s'):.2f} | "
          f"{preempted} | {demoted} | {tokens} |")
EOF
echo "[fluid_ramp] charts and JSON in $out" >&2
