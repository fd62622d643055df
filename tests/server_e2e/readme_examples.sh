#!/usr/bin/env bash
# The curl examples of the README's "HTTP server" section, run against a live
# `sluice serve` by tests/server_e2e_test.cpp (through e2e.mjs). Each example is
# followed by a check of its output, so a README that drifts from the server fails.
#   SLUICE_URL       base URL (default http://127.0.0.1:8080)
#   SLUICE_API_KEY   the server's --api-key (default: none)
#   SLUICE_MODEL_ID  the id /v1/models reports (default: llama, stories260K's)
set -euo pipefail
URL=${SLUICE_URL:-http://127.0.0.1:8080}
MODEL=${SLUICE_MODEL_ID:-llama}
AUTH=()
if [ -n "${SLUICE_API_KEY:-}" ]; then AUTH=(-H "Authorization: Bearer $SLUICE_API_KEY"); fi

expect() {  # expect NAME PATTERN OUTPUT
  if ! grep -q -- "$2" <<<"$3"; then
    echo "readme example '$1': output lacks '$2':" >&2
    echo "$3" >&2
    exit 1
  fi
  echo "ok: $1"
}

# Liveness and readiness.
out=$(curl -sS "$URL/health")
expect health '"status":"ok"' "$out"

# The served model.
out=$(curl -sS "${AUTH[@]}" "$URL/v1/models")
expect models "\"id\":\"$MODEL\"" "$out"

# A greedy completion.
out=$(curl -sS "${AUTH[@]}" "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"$MODEL\", \"prompt\": \"Once upon a time\", \"max_tokens\": 32, \"temperature\": 0}")
expect completion '"object":"text_completion"' "$out"
expect completion-usage '"completion_tokens":32' "$out"

# A chat completion, streamed as Server-Sent Events, with usage in the last chunk.
out=$(curl -sS -N "${AUTH[@]}" "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"$MODEL\", \"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story.\"}],
       \"max_tokens\": 16, \"stream\": true, \"stream_options\": {\"include_usage\": true}}")
expect chat-stream '"object":"chat.completion.chunk"' "$out"
expect chat-stream-usage '"usage":{' "$out"
expect chat-stream-done 'data: \[DONE\]' "$out"

# Sampling controls: n, seed, stop, penalties, logprobs.
out=$(curl -sS "${AUTH[@]}" "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"$MODEL\", \"prompt\": \"Lily\", \"max_tokens\": 16, \"n\": 2, \"seed\": 7,
       \"temperature\": 0.9, \"top_p\": 0.95, \"stop\": [\".\"], \"presence_penalty\": 0.5, \"logprobs\": 2}")
expect sampling '"index":1' "$out"
expect sampling-logprobs '"token_logprobs"' "$out"

# Errors are OpenAI-style bodies with the matching status.
code=$(curl -sS -o /dev/null -w '%{http_code}' "${AUTH[@]}" "$URL/v1/completions" \
  -H 'Content-Type: application/json' -d '{"model": "no-such-model", "prompt": "x"}')
expect unknown-model-404 '^404$' "$code"
out=$(curl -sS "${AUTH[@]}" "$URL/v1/completions" -H 'Content-Type: application/json' -d '{"prompt": ')
expect bad-json '"code":"invalid_json"' "$out"

# Prometheus metrics.
out=$(curl -sS "$URL/metrics")
expect metrics 'sluice_server_requests_total{endpoint="completions",outcome="ok"}' "$out"
expect metrics-kv 'sluice_kv_blocks_used' "$out"
expect metrics-ttft 'sluice_ttft_seconds_bucket' "$out"

# The same figures as JSON (the live page reads them), and as Server-Sent Events.
out=$(curl -sS "${AUTH[@]}" "$URL/stats")
expect stats '"kv":{"blocks_used":' "$out"
expect stats-model '"placement":{' "$out"
out=$(curl -s -N --max-time 3 "${AUTH[@]}" "$URL/stats/stream?interval_ms=1000" || true)
expect stats-stream '^data: {"time":' "$out"

# The live page.
out=$(curl -sS "$URL/")
expect page '<title>sluice serve</title>' "$out"
