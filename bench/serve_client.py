#!/usr/bin/env python3
"""Drive llama.cpp's llama-server with a workload written by `sluice bench-serve
--dump-workload`, and report the figures bench-serve reports.

    bench/serve_client.py --url http://127.0.0.1:PORT --workload FILE [--json]

The workload is a JSON list of {prompt_tokens, max_tokens, arrival_s}. Each
request gets its own thread, which waits until t0 + arrival_s and then POSTs to
the native /completion endpoint:

    {"prompt": [ids], "n_predict": max_tokens, "ignore_eos": true,
     "temperature": 0, "stream": true}

and reads the server-sent events. Every event carries `tokens_predicted` (the
tokens decoded so far), so times are per token even when the server holds back
an event for an incomplete UTF-8 character:

    ttft  first event with a token - request sent
    tpot  (last token event - first token event) / (tokens between them)
    e2e   final event (stop: true) - request sent
    wall  last final event - t0

Throughputs are sum max_tokens / wall (output) and (sum prompt + sum
max_tokens) / wall (total); percentiles are exact over requests, linear
between order statistics (the same rule as bench-serve). Python standard
library only. One untimed warm-up request runs first.
"""
import argparse
import http.client
import json
import math
import sys
import threading
import time
import urllib.parse


def percentile(values, q):
    if not values:
        return 0.0
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def complete(host, port, prompt, n_predict, timeout_s):
    """One streamed /completion. Returns (t_sent, t_first, n_first, t_last, n_last, t_end, n_final)."""
    body = json.dumps({
        "prompt": prompt,
        "n_predict": n_predict,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    })
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        t_sent = time.perf_counter()
        conn.request("POST", "/completion", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read(500).decode(errors='replace')}")
        t_first = t_last = t_end = None
        n_first = n_last = n_final = 0
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            now = time.perf_counter()
            ev = json.loads(line[5:])
            if "error" in ev:
                raise RuntimeError(f"server error: {ev['error']}")
            n = int(ev.get("tokens_predicted", 0))
            if ev.get("stop"):
                t_end, n_final = now, n
                break
            if n > n_last:
                if t_first is None:
                    t_first, n_first = now, n
                t_last, n_last = now, n
        if t_end is None or t_first is None:
            raise RuntimeError("the stream ended without tokens or a final event")
        return t_sent, t_first, n_first, t_last, n_last, t_end, n_final
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--workload", required=True, help="JSON from sluice bench-serve --dump-workload")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request and for the whole run")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()

    url = urllib.parse.urlparse(args.url)
    host, port = url.hostname, url.port or 80
    with open(args.workload) as f:
        items = json.load(f)
    if not items:
        sys.exit("error: the workload is empty")

    complete(host, port, items[0]["prompt_tokens"][:1], 2, args.timeout)  # warm-up, untimed

    results = [None] * len(items)
    errors = []
    t0 = time.perf_counter()

    def worker(i, item):
        delay = t0 + item["arrival_s"] - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        try:
            results[i] = complete(host, port, item["prompt_tokens"], item["max_tokens"], args.timeout)
        except Exception as e:  # reported after the run
            errors.append(f"request {i}: {e}")

    threads = [threading.Thread(target=worker, args=(i, it), daemon=True) for i, it in enumerate(items)]
    for t in threads:
        t.start()
    deadline = t0 + args.timeout
    for t in threads:
        t.join(max(0.0, deadline - time.perf_counter()))
    if any(t.is_alive() for t in threads):
        sys.exit(f"error: timed out after {args.timeout:.0f} s")
    if errors:
        sys.exit("error: " + "; ".join(errors[:5]))

    ttft, tpot, e2e = [], [], []
    t_done = t0
    for i, (t_sent, t_first, n_first, t_last, n_last, t_end, n_final) in enumerate(results):
        if n_final != items[i]["max_tokens"]:
            sys.exit(f"error: request {i} generated {n_final} tokens, expected {items[i]['max_tokens']}")
        ttft.append(t_first - t_sent)
        if n_last > n_first:
            tpot.append((t_last - t_first) / (n_last - n_first))
        e2e.append(t_end - t_sent)
        t_done = max(t_done, t_end)
    wall = t_done - t0
    n_prompt = sum(len(it["prompt_tokens"]) for it in items)
    n_output = sum(it["max_tokens"] for it in items)
    out = {
        "n_requests": len(items),
        "wall_s": wall,
        "n_prompt_tokens": n_prompt,
        "n_output_tokens": n_output,
        "output_tps": n_output / wall,
        "total_tps": (n_prompt + n_output) / wall,
        "req_per_s": len(items) / wall,
    }
    for name, v in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}_s"] = percentile(v, q / 100)
        out[f"{name}_mean_s"] = sum(v) / len(v) if v else 0.0
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{len(items)} requests: wall {wall:.3f} s | output {out['output_tps']:.2f} tok/s | "
          f"total {out['total_tps']:.2f} tok/s | {out['req_per_s']:.3f} req/s")
    print("| ms | p50 | p90 | p99 | mean |\n|---|--:|--:|--:|--:|")
    for name in ("ttft", "tpot", "e2e"):
        print(f"| {name.upper()} | " + " | ".join(f"{out[f'{name}_{k}_s'] * 1e3:.2f}" for k in ("p50", "p90", "p99", "mean")) + " |")


if __name__ == "__main__":
    main()
