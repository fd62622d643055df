#!/usr/bin/env bash
# What the live page's polling costs the server, in the server's own CPU time
# (robust to other load on the machine, unlike wall-clock throughput ratios):
#
#   bench/stats_cpu.sh MODEL [N=200] [REQUESTS=8] [TOKENS=128] [POLL_HZ=1] [-- serve flags...]
#
# One `sluice serve` ($SLUICE, default build/sluice) on a free port. The server's CPU time is
# utime + stime of /proc/PID/stat (every thread, exited ones included):
#   idle       over 3 s with no requests: the baseline, subtracted below
#   /stats     N GETs one after another on one keep-alive connection (what
#              the page polls, POLL_HZ times a second: once), server idle
#   /metrics   the same, N GETs
#   /stats/stream  one stream at interval_ms=200 for N / 5 s (2 to 20): per event
#   decode     a burst of REQUESTS completions at once, TOKENS tokens each
#              (greedy, ignore_eos): CPU per generated token (prefill and HTTP
#              included, so an upper bound) and the burst's tokens/s
# and what the polling takes from decode: the poll's CPU per second (ms per
# /stats x POLL_HZ) as tokens of decode forgone and as a share of one core.
# When decode is CPU-bound on one core that share is the throughput lost
# (on T cores, 1/T of it); run with -t 1 for the per-token figure, since
# spinning pool threads on a shared machine add CPU time that is not work.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/stats_cpu.sh MODEL [N] [REQUESTS] [TOKENS] [POLL_HZ] [-- serve flags]}
shift
n=${1:-200}; requests=${2:-8}; tokens=${3:-128}; hz=${4:-1}
extra=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done
if [ "${1:-}" = "--" ]; then shift; extra=("$@"); fi

source bench/serve_start.sh
serve_start "$model" "$requests" "${extra[@]}"
tck=$(getconf CLK_TCK)
cpu_ms() { awk -v t="$tck" '{printf "%.0f\n", ($14 + $15) * 1000 / t}' "/proc/$pid/stat"; }
now() { date +%s.%N; }
# N sequential GETs of a path on one keep-alive connection; prints the body bytes of the last.
gets() {
  python3 - "$port" "$1" "$2" <<'EOF'
import http.client, socket, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
c.connect()
c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
size = 0
for _ in range(int(sys.argv[3])):
    c.request("GET", sys.argv[2])
    r = c.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"GET {sys.argv[2]}: HTTP {r.status}")
    size = len(body)
print(size)
EOF
}

# A first request of each kind (the model's description is cached on the first /stats).
gets /stats 1 >/dev/null; gets /metrics 1 >/dev/null
sleep 1
c0=$(cpu_ms); t0=$(now); sleep 3; c1=$(cpu_ms); t1=$(now)
idle=$(awk -v c="$((c1 - c0))" -v a="$t0" -v b="$t1" 'BEGIN {print c / (b - a)}')  # ms per s
printf 'model %s, serve flags: %s\n' "$model" "${extra[*]:-}"
printf 'idle: %.2f ms of CPU per s\n' "$idle"
per_request() {  # path label: ms of CPU per request, idle subtracted
  local c0 t0 c1 t1 bytes
  c0=$(cpu_ms); t0=$(now); bytes=$(gets "$1" "$n"); c1=$(cpu_ms); t1=$(now)
  awk -v c="$((c1 - c0))" -v a="$t0" -v b="$t1" -v i="$idle" -v n="$n" -v p="$1" -v s="$bytes" \
    'BEGIN {printf "%s: %d GETs in %.2f s, %.3f ms of CPU each (%d bytes)\n", p, n, b - a, (c - i * (b - a)) / n, s}'
}
stats_line=$(per_request /stats); echo "$stats_line"
per_request /metrics
stats_ms=$(sed 's/.*s, \([0-9.]*\) ms of CPU each.*/\1/' <<<"$stats_line")

s=$(( n / 5 > 20 ? 20 : (n / 5 > 2 ? n / 5 : 2) ))
c0=$(cpu_ms); t0=$(now)
events=$(curl -sN --max-time "$s" "$url/stats/stream?interval_ms=200" | grep -c '^data: ' || true)
c1=$(cpu_ms); t1=$(now)
awk -v c="$((c1 - c0))" -v a="$t0" -v b="$t1" -v i="$idle" -v e="$events" \
  'BEGIN {printf "/stats/stream: %d events in %.2f s, %.3f ms of CPU each\n", e, b - a, (c - i * (b - a)) / e}'

generated() { curl -s "$url/metrics" | awk '$1 == "sluice_generated_tokens_total" {print $2}'; }
burst() {
  seq "$requests" | xargs -P "$requests" -I{} curl -s -o /dev/null "$url/v1/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": $tokens, \"temperature\": 0, \"ignore_eos\": true}"
}
burst  # warm-up
g0=$(generated); c0=$(cpu_ms); t0=$(now)
burst
c1=$(cpu_ms); t1=$(now); g1=$(generated)
awk -v c="$((c1 - c0))" -v a="$t0" -v b="$t1" -v g="$((g1 - g0))" -v sm="$stats_ms" -v hz="$hz" 'BEGIN {
  w = b - a; tok_ms = c / g
  printf "decode: %d tokens in %.2f s (%.1f tok/s), %.3f ms of CPU per token, %.0f ms of CPU per s\n", g, w, g / w, tok_ms, c / w
  printf "polling /stats at %g Hz: %.3f ms of CPU per s = %.2f tokens of decode per poll = %.3f %% of a decode core\n",
         hz, sm * hz, sm / tok_ms, 100 * sm * hz / 1000
}'
