#!/usr/bin/env bash
# Fine-tuning benchmarks (docs/BENCHMARKS.md, "Fine-tuning"). Needs a quiet
# machine; prints the raw JSON of every run and a table at the end.
#
#   speed    sluice finetune on the CPU against bench/train_torch.py (PyTorch,
#            same synth shape, f32 base, same rank, targets, batch, sequence
#            and threads): the median step time and tokens/s of each. PyTorch's
#            products go through the BLAS Debian's alternatives name: it must be
#            OpenBLAS (libopenblas0-pthread; the netlib reference BLAS that
#            python3-torch pulls in alone is many times slower and no anchor),
#            and the kernels OpenBLAS picks for the CPU (printed; OPENBLAS_CORETYPE
#            chooses them, and an environment may set it) change its speed by up
#            to 1.5x on AVX-512 machines: compare against its fastest core
#   stream   the base streamed from disk under --mem-budget (a third of the
#            file) against the same run resident, per tokens a step (--batch
#            sequences of --seq tokens); plan train's predicted overhead beside
#            the measured one, and its crossover (the tokens a step past which
#            streaming costs under 5%). The disk is capped at DISK_RATE
#            (--disk-rate-cap, for plan train and the streamed runs alike) so
#            that the crossover falls inside the rows (DISK_RATE=0: the disk as it is)
#
#   gpu      on a GPU: sluice finetune --backend cuda against bench/train_peft.py
#            (PyTorch + PEFT) at the 8b shape, and seed 002's rows on the device
#            (host -> HBM, disk -> host -> HBM) against resident
#
# Usage: bench/train_bench.sh speed|stream|gpu
# env: SLUICE=build/sluice WORK=/tmp/sluice-train-bench THREADS=2 PYTHON=/usr/bin/python3
#      speed:  PRESET=110m RANK=8 BATCH=4 SEQ=512 STEPS=5 TORCH_WARMUP=1
#              ANY_BLAS=1 (run against a PyTorch whose BLAS is not OpenBLAS)
#      stream: PRESET=110m TYPE=q8_0 SEQ=128 BATCHES="1 2 3 4 6 8" STEPS=4 DISK_RATE=100M
#      gpu:    LAYERS=8 RANK=8 BATCH=4 SEQ=512 STEPS=3 BATCHES="1 4 16"
#              LAYERS=(the preset's)
#              (a 512-token vocabulary, so the layers, which stream, are nearly all of the file)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: bench/train_bench.sh speed|stream}
sluice=${SLUICE:-build/sluice}
work=${WORK:-/tmp/sluice-train-bench}
threads=${THREADS:-2}
python=${PYTHON:-/usr/bin/python3}
preset=${PRESET:-110m}
data=tests/data/finetune/stories.txt
mkdir -p "$work"
field() { python3 -c "import json,math,sys; d=json.load(sys.stdin); print($1)"; }

case "$what" in
speed)
  rank=${RANK:-8} batch=${BATCH:-4} seq=${SEQ:-512} steps=${STEPS:-5}
  "$python" bench/train_torch.py --blas > "$work/blas.json"
  core=$(field 'd["blas"].get("openblas_core", "")' < "$work/blas.json")
  if [ -z "$core" ]; then
    echo "PyTorch's BLAS is not OpenBLAS ($(field '" ".join(d["blas"]["libraries"]) or "none found"' < "$work/blas.json")):" \
      "the netlib reference BLAS is no anchor; install libopenblas0-pthread (or set ANY_BLAS=1)" >&2
    [ -n "${ANY_BLAS:-}" ] || exit 1
  else
    echo "PyTorch's BLAS: OpenBLAS, kernels for $core (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-unset})"
  fi
  model=$work/$preset-f32.gguf
  [ -f "$model" ] || $sluice synth --preset "$preset" --type f32 -o "$model"
  # sluice's first step is not timed (median_timed_step_s); PyTorch's warm-up step neither.
  $sluice finetune -m "$model" -d "$data" -o "$work/speed.gguf" --rank "$rank" --alpha $((2 * rank)) \
    --targets all --batch "$batch" --seq "$seq" --steps $((steps + 1)) --val-split 0 --backend cpu \
    -t "$threads" --json > "$work/sluice.json" 2> "$work/sluice.err"
  "$python" bench/train_torch.py --preset "$preset" --rank "$rank" --alpha $((2 * rank)) --targets all \
    --batch "$batch" --seq "$seq" --threads "$threads" --steps "$steps" --warmup-steps "${TORCH_WARMUP:-1}" \
    > "$work/torch.json"
  cat "$work/sluice.json" "$work/torch.json"
  s=$(field 'd["median_timed_step_s"]' < "$work/sluice.json")
  p=$(field 'd["median_step_s"]' < "$work/torch.json")
  printf '%-8s %-6s %5s %4s %5s %3s %12s %10s\n' engine preset rank bat seq t median_step_s tokens/s
  for e in "sluice $s" "pytorch $p"; do
    set -- $e
    printf '%-8s %-6s %5s %4s %5s %3s %12.3f %10.1f\n' "$1" "$preset" "$rank" "$batch" "$seq" "$threads" "$2" \
      "$(python3 -c "print($batch * $seq / $2)")"
  done
  python3 -c "print('sluice / pytorch tokens/s: %.2fx' % ($p / $s))"
  ;;
stream)
  type=${TYPE:-q8_0} seq=${SEQ:-128} batches=${BATCHES:-"1 2 3 4 6 8"} steps=${STEPS:-4}
  cap=(--disk-rate-cap "${DISK_RATE:-100M}")
  model=$work/$preset-v512-$type${LAYERS:+-$LAYERS}.gguf
  [ -f "$model" ] || $sluice synth --preset "$preset" --vocab 512 --type "$type" ${LAYERS:+--layers "$LAYERS"} -o "$model"
  budget=$(python3 -c "import os; print(os.path.getsize('$model') // 3)")
  tokens=$(for b in $batches; do printf '%s,' $((b * seq)); done)
  $sluice plan train -m "$model" --budget-gb "$(python3 -c "print($budget / 1e9)")" --tokens "${tokens%,}" \
    --seq "$seq" --calibrate -t "$threads" "${cap[@]}" --json > "$work/plan.json" 2> "$work/plan.err"
  # The table again as text, from the same rates (a second calibration would differ a little).
  $sluice plan train -m "$model" --budget-gb "$(python3 -c "print($budget / 1e9)")" --tokens "${tokens%,}" \
    --seq "$seq" --tflops "$(field 'd["compute_tflops"]' < "$work/plan.json")" \
    --disk-gbps "$(field 'd["disk_gbps"]' < "$work/plan.json")"
  : > "$work/stream.txt"
  mkdir -p "$work/resident" "$work/streamed"  # the adapter is named after its file's stem: the same in both
  for b in $batches; do
    common=(-m "$model" -d "$data" --rank 8 --alpha 16 --batch "$b" --seq "$seq" --steps $((steps + 1))
            --val-split 0 --backend cpu -t "$threads" --json)
    $sluice finetune "${common[@]}" -o "$work/resident/adapter.gguf" > "$work/resident.json" 2> "$work/resident.err"
    $sluice finetune "${common[@]}" -o "$work/streamed/adapter.gguf" --mem-budget "$budget" "${cap[@]}" \
      > "$work/streamed.json" 2> "$work/streamed.err"
    cat "$work/resident.json" "$work/streamed.json"
    cmp -s "$work/resident/adapter.gguf" "$work/streamed/adapter.gguf" || echo "[bench] the adapters differ (batch $b)" >&2
    r=$(field 'd["median_timed_step_s"]' < "$work/resident.json")
    s=$(field 'd["median_timed_step_s"]' < "$work/streamed.json")
    pred=$(field '"%.4f" % (d["stream"]["predicted_step_s"] / d["stream"]["predicted_compute_s"] - 1)' \
           < "$work/streamed.json")
    disk=$(field 'd["stream"]["run_disk_gbps"] * 1e3' < "$work/streamed.json")
    echo "$((b * seq)) $r $s $pred $disk" >> "$work/stream.txt"
  done
  printf '%7s %11s %11s %9s %9s %14s\n' tokens resident_s streamed_s overhead predicted run_disk_MB/s
  awk '{printf "%7d %11.3f %11.3f %8.1f%% %8.1f%% %14.0f\n", $1, $2, $3, 100 * ($3 / $2 - 1), 100 * $4, $5}' \
    "$work/stream.txt"
  echo "plan train's crossover (overhead under 5%): $(field 'math.ceil(d["tokens_overhead_5pct"])' < "$work/plan.json") tokens a micro-batch"
  ;;
gpu)
  # On a GPU: sluice finetune --backend cuda against bench/train_peft.py
  # (PyTorch + PEFT, BF16 base, same rank, targets, batch and sequence) at
  # the 8b shape cut to LAYERS layers; then seed 002's rows on the device:
  # the same run with the base streamed host -> HBM (--gpu-budget: the
  # essentials and a third of the layers) and disk -> host -> HBM
  # (--gpu-budget and --mem-budget, that much each), per tokens a step,
  # against resident, each beside the overhead and crossover its own
  # predicted copies give at the device's pinned rate; and plan train's
  # crossover at the device's rates.
  layers=${LAYERS:-8} rank=${RANK:-8} batch=${BATCH:-4} seq=${SEQ:-512} steps=${STEPS:-3}
  model=$work/8b-bf16-$layers.gguf
  [ -f "$model" ] || $sluice synth --preset 8b --type bf16 --layers "$layers" -o "$model"
  # The budgets hold the essentials (embeddings, head) and a third of the
  # layers, at least the ring's two: a third of the file alone would not hold
  # the 8b shape's 2.1 GB of embeddings and head at a few layers.
  read -r ess lay < <($sluice info "$model" | awk '/^tensors:/ {on = 1; next}
    on && $1 != "name" {if ($1 ~ /^blk\./) l += $(NF - 2); else e += $(NF - 2)} END {printf "%d %d\n", e, l}')
  third=$(python3 -c "print(int($ess + 1.1 * max(2 * $lay / $layers, $lay / 3)))")
  gcommon=(-m "$model" -d "$data" --rank "$rank" --alpha $((2 * rank)) --targets all --seq "$seq"
           --steps $((steps + 1)) --val-split 0 --backend cuda --json)
  $sluice finetune "${gcommon[@]}" --batch "$batch" -o "$work/gpu.gguf" > "$work/gpu.json" 2> "$work/gpu.err"
  "$python" bench/train_peft.py --layers "$layers" --rank "$rank" --targets all --batch "$batch" --seq "$seq" \
    --steps "$steps" --warmup-steps 1 > "$work/peft.json"
  cat "$work/gpu.json" "$work/peft.json"
  s=$(field 'd["median_timed_step_s"]' < "$work/gpu.json")
  p=$(field 'd["median_step_s"]' < "$work/peft.json")
  python3 -c "print('8b x $layers layers, rank $rank, $batch x $seq tokens: sluice %.1f tokens/s, pytorch+peft %.1f, ratio %.2fx' % ($batch * $seq / $s, $batch * $seq / $p, $p / $s))"
  rm -f "$work"/gpu-row-*.json
  for b in ${BATCHES:-1 4 16}; do
    for how in resident hbm tiers; do
      case $how in
        resident) extra=() ;;
        hbm) extra=(--gpu-budget "$third") ;;
        tiers) extra=(--gpu-budget "$third" --mem-budget "$third") ;;
      esac
      $sluice finetune "${gcommon[@]}" --batch "$b" -o "$work/gpu-$how.gguf" "${extra[@]}" \
        > "$work/gpu-$how.json" 2> "$work/gpu-$how.err" || { echo "[bench] $how failed: $(tail -1 "$work/gpu-$how.err")" >&2; continue; }
      cp "$work/gpu-$how.json" "$work/gpu-row-$((b * seq))-$how.json"
    done
  done
  # The crossover plan train predicts for the host -> HBM leg, from this
  # device's rates: the link is the pinned copy gpu-bench measures, compute
  # the resident step's 6 x parameters x tokens per second.
  h2d=$($sluice gpu-bench --types bf16 --tokens 1 --reps 1 2> /dev/null |
        sed -n 's/.*host to device \([0-9.]*\) GB\/s pinned.*/\1/p')
  tflops=$(python3 -c "import os; print(6 * os.path.getsize('$model') / 2 * $batch * $seq / $s / 1e12)")
  tokens=$(for b in ${BATCHES:-1 4 16}; do printf '%s,' $((b * seq)); done)
  echo "plan train at this device's rates: host -> HBM ${h2d:-?} GB/s pinned, ${tflops} TFLOP/s (the resident step);" \
    "it counts 2 (S - K) layer copies a micro-batch, where a device step copies each layer outside its device tier at each visit (2 (L - G)), and the hbm ring about 2.1 L"
  [ -n "$h2d" ] && $sluice plan train -m "$model" --budget-gb "$(python3 -c "print($third / 1e9)")" \
    --tokens "${tokens%,}" --seq "$seq" --tflops "$tflops" --disk-gbps "$h2d"
  # Each streamed row beside the engine's own prediction: the bytes finetune
  # predicted it would copy (hbm: the ring's schedule; tiers: the layers
  # outside the device tier, twice) at gpu-bench's pinned rate, and the
  # tiers' disk reads at the rate they got, against the resident step's
  # compute: overhead max(0, link / compute - 1), and the crossover, the
  # tokens a step past which the link hides behind the compute.
  H2D="${h2d:-0}" python3 - "$work" <<'PY'
import glob, json, os, sys
rows = {}  # (tokens, how): step s, copies predicted and measured, disk bytes predicted, the disk's rate
for path in glob.glob(os.path.join(sys.argv[1], "gpu-row-*.json")):
    n, how = os.path.basename(path)[len("gpu-row-"):-len(".json")].split("-")
    d = json.load(open(path))
    r = d.get("device_ring") or d.get("stream") or {}
    rows[(int(n), how)] = [d["median_timed_step_s"], r.get("predicted_copy_bytes", 0), r.get("measured_copy_bytes", 0),
                           r.get("predicted_read_bytes", 0), r.get("run_disk_gbps", 0)]
h2d = float(os.environ["H2D"]) * 1e9
print("%7s %9s %-6s %9s %9s %9s %11s %11s %10s" % ("tokens", "resident", "how", "step", "overhead", "predicted",
                                                 "copies_MB", "measured_MB", "crossover"))
for n in sorted({k[0] for k in rows}):
    if (n, "resident") not in rows:
        continue
    res = rows[(n, "resident")][0]
    for how in ("hbm", "tiers"):
        if (n, how) not in rows:
            continue
        step, cp, cm, rd, disk = rows[(n, how)]
        link = max(cp / h2d if h2d > 0 else 0.0, rd / (disk * 1e9) if disk > 0 else 0.0)
        pred = max(0.0, link / res - 1) if res > 0 else 0.0
        cross = n * link / res if res > 0 else 0.0
        print("%7d %8.3fs %-6s %8.3fs %8.1f%% %8.1f%% %11.1f %11.1f %10.0f" % (
            n, res, how, step, 100 * (step / res - 1), 100 * pred, cp / 1e6, cm / 1e6, cross))
PY
  ;;
*)
  echo "usage: bench/train_bench.sh speed|stream|gpu" >&2
  exit 2
  ;;
esac
