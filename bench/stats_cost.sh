#!/usr/bin/env bash
# What the live page's polling costs the server: decode throughput of a burst of
# HTTP requests with a /stats poller running against without, alternating runs.
#
#   bench/stats_cost.sh MODEL [ROUNDS=5] [REQUESTS=32] [TOKENS=256] [POLL_HZ=1] [-- serve flags...]
#
# One `sluice serve` ($SLUICE, default build/sluice) on a free port; each round runs the same
# burst twice, once alone and once while a poller GETs /stats POLL_HZ times a
# second (the page polls once a second; more shows the cost per request). A
# burst is REQUESTS completions at once, TOKENS tokens each (ignore_eos, greedy),
# and its throughput is the generated tokens (the server's own counter) over
# the burst's wall time. Prints each pair and the medians' ratio; on a quiet
# machine the cost is 1 - ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/stats_cost.sh MODEL [ROUNDS] [REQUESTS] [TOKENS] [POLL_HZ] [-- serve flags]}
shift
rounds=${1:-5}; requests=${2:-32}; tokens=${3:-256}; hz=${4:-1}
extra=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done
if [ "${1:-}" = "--" ]; then shift; extra=("$@"); fi

source bench/serve_start.sh
serve_start "$model" "$requests" "${extra[@]}"
generated() { curl -s "$url/metrics" | awk '$1 == "sluice_generated_tokens_total" {print $2}'; }
burst() {  # prints tokens/s
  local g0 t0 t1 g1
  g0=$(generated); t0=$(date +%s.%N)
  seq "$requests" | xargs -P "$requests" -I{} curl -s -o /dev/null "$url/v1/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": $tokens, \"temperature\": 0, \"ignore_eos\": true}"
  t1=$(date +%s.%N); g1=$(generated)
  awk -v g="$((g1 - g0))" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", g / (b - a)}'
}
burst >/dev/null  # warm-up
plain=(); polled=()
for r in $(seq "$rounds"); do
  plain+=("$(burst)")
  ( while :; do curl -s -o /dev/null "$url/stats"; sleep "$(awk -v h="$hz" 'BEGIN {print 1 / h}')"; done ) &
  poller=$!
  polled+=("$(burst)")
  kill $poller; wait $poller 2>/dev/null || true
  echo "round $r: without ${plain[-1]} tok/s, polling /stats at ${hz} Hz ${polled[-1]} tok/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
m0=$(median "${plain[@]}"); m1=$(median "${polled[@]}")
awk -v a="$m0" -v b="$m1" 'BEGIN {printf "median without %.1f tok/s, with polling %.1f tok/s: ratio %.4f (cost %.2f %%)\n", a, b, b / a, 100 * (1 - b / a)}'
