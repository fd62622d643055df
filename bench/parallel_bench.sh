#!/usr/bin/env bash
# Benchmarks of --parallel pp on one machine standing in for two
# (docs/BENCHMARKS.md, "Across processes"). Needs a quiet machine; prints the
# raw lines each round and the medians at the end.
#
#   memory pooling   a model whose half fits each rank's --mem-budget but not
#                    one rank's: 2 ranks (each its half in memory) against 1 rank
#                    streaming the rest from disk under the same budget, as a
#                    1-rank pipeline (pp1: the pipeline planner's prediction of
#                    decode and prefill, its disk leg included) and as a plain
#                    process (one: the weight store's own decode prediction);
#                    with STREAM_BUDGET also 2 ranks each streaming part of its
#                    half (pp2s) against 1 (pp1s); decode and prefill tokens/s,
#                    and the predictions
#   overhead         2 ranks on a model that fits either, bench-serve with 16
#                    concurrent requests, against 1 rank with the same total
#                    threads; bytes per token sent per link against the plan's
#
# Usage: bench/parallel_bench.sh [ROUNDS]   (env: SLUICE=build/sluice, WORK=/tmp/sluice-pp-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
sluice=${SLUICE:-build/sluice}
work=${WORK:-/tmp/sluice-pp-bench}
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi="mpirun --oversubscribe --bind-to none"

# 110m in Q8_0: 12 layers, 117 MiB; half of it (with the head on rank 0) fits
# 90M, all of it does not. Without a budget it fits either rank (the overhead runs).
big=$work/110m-q8_0.gguf
small=$big
[ -f "$big" ] || $sluice synth --preset 110m --type q8_0 -o "$big"
budget=${BUDGET:-90M}
# Both halves beyond each rank's budget (pp2s): 110m with a 4096-token
# vocabulary (93 MiB, a 6 MiB head) under 36M, each rank streaming most of its
# 6 layers, against 1 rank streaming all 12 under the same budget (pp1s).
# STREAM_BUDGET= (empty) skips them.
stream_model=$work/110m-v4096-q8_0.gguf
stream_budget=${STREAM_BUDGET-36M}
[ -z "$stream_budget" ] || [ -f "$stream_model" ] || $sluice synth --preset 110m --vocab 4096 --type q8_0 -o "$stream_model"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
json_field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

: > "$work/pool.txt"
: > "$work/serve.txt"
for r in $(seq "$rounds"); do
  echo "[bench] round $r: memory pooling"
  # 2 ranks, 1 thread each, each its half in memory; then 1 rank, 1 thread,
  # streaming beyond the same budget. The tables' t/s, and each plan's prediction.
  $mpi -np 2 $sluice bench -m "$big" -p 128 -n 32 -r 3 -t 1 --mem-budget "$budget" --parallel pp \
    > "$work/pp2.txt" 2> "$work/pp2.err"
  $mpi -np 1 $sluice bench -m "$big" -p 128 -n 32 -r 3 -t 1 --mem-budget "$budget" --parallel pp \
    > "$work/pp1.txt" 2> "$work/pp1.err"
  $sluice bench -m "$big" -p 128 -n 32 -r 3 -t 1 --mem-budget "$budget" > "$work/one.txt" 2> "$work/one.err"
  kinds="pp2 pp1 one"
  if [ -n "$stream_budget" ]; then
    for n in 2 1; do
      $mpi -np $n $sluice bench -m "$stream_model" -p 128 -n 32 -r 3 -t 1 --mem-budget "$stream_budget" --parallel pp \
        > "$work/pp${n}s.txt" 2> "$work/pp${n}s.err"
    done
    kinds="$kinds pp2s pp1s"
  fi
  for k in $kinds; do
    tps() { awk -F'|' -v t="$1" '$7 ~ t {gsub(/ /, "", $8); print $8}' "$work/$k.txt" "$work/$k.err" | head -1; }
    if [ $k != one ]; then  # the pipeline plan: decode ms/token and prefill tokens/s
      pred=$(sed -nE 's/.*predicted: decode ([0-9.]+) ms.*prefill [0-9]+ tokens [0-9.]+ ms \(([0-9]+) tokens.*/\1 \2/p' "$work/$k.err")
    else                   # decode: compute + stall per step
      pred=$(sed -nE 's/.*predicted per step: compute ([0-9.]+) ms, disk [0-9.]+ ms, stall ([0-9.]+) ms.*/\1 \2/p' "$work/one.err" \
             | awk '{print $1 + $2, "-"}')
    fi
    echo "$k $(tps pp128) $(tps tg32) $pred" | tee -a "$work/pool.txt"
  done

  echo "[bench] round $r: pipeline overhead, 16 concurrent requests"
  args="--requests 32 --prompt-len 64 --output-len 64 --arrival all --max-seqs 16 --json"
  $mpi -np 2 $sluice bench-serve -m "$small" $args -t 1 --parallel pp > "$work/s2.json" 2> "$work/s2.err"
  echo "pp2 $(json_field 'd["output_tps"]' < "$work/s2.json") $(grep 'pipeline:' "$work/s2.err")" \
    | tee -a "$work/serve.txt"
  $sluice bench-serve -m "$small" $args -t 2 > "$work/s1.json" 2> "$work/s1.err"
  echo "one $(json_field 'd["output_tps"]' < "$work/s1.json")" | tee -a "$work/serve.txt"
done
echo "[bench] medians: prefill t/s, decode t/s, predicted decode ms/token, predicted prefill t/s"
for k in pp2 pp1 one pp2s pp1s; do
  grep -q "^$k " "$work/pool.txt" || continue
  echo "$k prefill $(awk -v k=$k '$1==k {print $2}' "$work/pool.txt" | median) decode $(awk -v k=$k '$1==k {print $3}' "$work/pool.txt" | median)" \
       "predicted decode $(awk -v k=$k '$1==k {print $4}' "$work/pool.txt" | median) ms prefill $(awk -v k=$k '$1==k {print $5}' "$work/pool.txt" | median)"
done
for k in pp2 one; do echo "serve $k $(awk -v k=$k '$1==k {print $2}' "$work/serve.txt" | median) output tokens/s"; done
