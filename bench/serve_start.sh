# Sourced by the bench scripts that measure a running server: starts
# `sluice serve -m MODEL --port 0 --max-seqs REQUESTS EXTRA...` ($SLUICE, else
# build/sluice) in the background, stops it on exit, and waits until /health
# answers. Sets pid (the server's), port and url; exits 1 with the server's log if it
# never comes up.
#
#   source bench/serve_start.sh; serve_start MODEL REQUESTS [serve flags...]
serve_start() {
  local model=$1 requests=$2
  shift 2
  serve_log=$(mktemp)
  "${SLUICE:-build/sluice}" serve -m "$model" --port 0 --max-seqs "$requests" "$@" 2>"$serve_log" &
  pid=$!
  trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$serve_log"' EXIT
  port=
  for _ in $(seq 600); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$serve_log" | grep -o '[0-9]*$' || true)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.2
  done
  [ -n "$port" ] || { cat "$serve_log" >&2; exit 1; }
  url="http://127.0.0.1:$port"
}
