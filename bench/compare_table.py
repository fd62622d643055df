#!/usr/bin/env python3
"""Markdown table of a compare_llamacpp.sh run: sluice against llama.cpp.

Reads RUN_DIR/<model>.sluice.r<k>.json (one `sluice bench --json` object) and
RUN_DIR/<model>.llamacpp.r<k>.json (`llama-bench -o json`: a list with one
object per test) for every round k, and prints one row per model:

  pp, tg t/s   per round: the median of that round's repetitions; per model:
               the median over rounds
  ratio        sluice / llama.cpp
  bw fraction  tg t/s x bytes read per token / machine read bandwidth, where the
               bytes per token are sluice's count for the model (weights + f32 KV
               at the mean context) and the read bandwidth is sluice's probe of
               this machine (median over the rounds); the same two figures are
               used for both engines, so the fractions compare like with like

A model whose runs failed shows the first line of the error (<model>.<engine>.r<k>.err).
Usage: compare_table.py RUN_DIR [--json OUT.json]
"""
import glob
import json
import os
import re
import statistics
import sys

FILE_RE = re.compile(r"^(?P<model>.+)\.(?P<engine>sluice|llamacpp)\.r(?P<round>\d+)\.(?P<ext>json|err)$")


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def human_bytes(n):
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, u = float(n), 0
    while v >= 1024 and u < len(units) - 1:
        v /= 1024
        u += 1
    return f"{v:.2f} {units[u]}"


def llamacpp_medians(tests):
    """(pp t/s, tg t/s) of one llama-bench JSON list: the median of each test's samples."""
    pp = tg = None
    for t in tests:
        samples = t.get("samples_ts") or [t.get("avg_ts")]
        if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
            pp = median(samples)
        elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
            tg = median(samples)
    return pp, tg


def first_error_line(path):
    with open(path, errors="replace") as f:
        lines = [l.strip() for l in f if l.strip()]
    # llama.cpp's assertion or sluice's "error:" line, else the last line.
    for l in lines:
        if "error" in l.lower() or "assert" in l.lower():
            return l
    return lines[-1] if lines else "failed (no message)"


def collect(run_dir):
    models = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "*"))):
        m = FILE_RE.match(os.path.basename(path))
        if not m:
            continue
        entry = models.setdefault(m["model"], {"sluice": [], "llamacpp": [], "errors": {}})
        if m["ext"] == "err":
            if os.path.getsize(path) > 0 and not os.path.exists(path[: -len(".err")] + ".json"):
                entry["errors"].setdefault(m["engine"], first_error_line(path))
            continue
        with open(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError:
                entry["errors"].setdefault(m["engine"], f"unreadable JSON in {os.path.basename(path)}")
                continue
        entry[m["engine"]].append(data)
    return models


def summarize(name, entry):
    s, l = entry["sluice"], entry["llamacpp"]
    row = {"model": name, "errors": entry["errors"], "rounds_sluice": len(s), "rounds_llamacpp": len(l)}
    if s:
        row["type"] = s[0].get("model_type")
        row["model_size"] = s[0].get("model_size")
        row["bytes_per_token"] = s[0].get("bytes_per_token")
        row["machine_read_gbps"] = median([j.get("machine_read_gbps") for j in s])
        row["sluice_pp_tps"] = median([j.get("pp_tps") for j in s])
        row["sluice_tg_tps"] = median([j.get("tg_tps") for j in s])
        row["isa"] = s[0].get("isa")
        row["n_threads"] = s[0].get("n_threads")
    if l:
        pts = [llamacpp_medians(j) for j in l]
        row["llamacpp_pp_tps"] = median([p for p, _ in pts])
        row["llamacpp_tg_tps"] = median([t for _, t in pts])
        row.setdefault("type", l[0][0].get("model_type") if l[0] else None)
        row.setdefault("model_size", l[0][0].get("model_size") if l[0] else None)
        row["llamacpp_build_commit"] = l[0][0].get("build_commit") if l[0] else None
    bpt, gbps = row.get("bytes_per_token"), row.get("machine_read_gbps")
    for engine in ("sluice", "llamacpp"):
        tg = row.get(f"{engine}_tg_tps")
        row[f"{engine}_bw_fraction"] = tg * bpt / 1e9 / gbps if tg and bpt and gbps else None
    for test in ("pp", "tg"):
        a, b = row.get(f"sluice_{test}_tps"), row.get(f"llamacpp_{test}_tps")
        row[f"{test}_ratio"] = a / b if a and b else None
    return row


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def table(rows):
    out = [
        "| model | type | size | sluice pp t/s | llama.cpp pp t/s | ratio | sluice tg t/s | llama.cpp tg t/s | ratio"
        " | sluice bw fraction | llama.cpp bw fraction |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        size = human_bytes(r["model_size"]) if r.get("model_size") else "—"
        out.append(
            f"| {r['model']} | {r.get('type') or '—'} | {size}"
            f" | {fmt(r.get('sluice_pp_tps'), '.2f')} | {fmt(r.get('llamacpp_pp_tps'), '.2f')}"
            f" | {fmt(r.get('pp_ratio'), '.2f')}"
            f" | {fmt(r.get('sluice_tg_tps'), '.2f')} | {fmt(r.get('llamacpp_tg_tps'), '.2f')}"
            f" | {fmt(r.get('tg_ratio'), '.2f')}"
            f" | {fmt(r.get('sluice_bw_fraction'), '.1%')} | {fmt(r.get('llamacpp_bw_fraction'), '.1%')} |"
        )
    notes = []
    for r in rows:
        for engine, msg in sorted(r["errors"].items()):
            notes.append(f"- {r['model']}: {'llama.cpp' if engine == 'llamacpp' else 'sluice'} failed: `{msg}`")
    gbps = median([r.get("machine_read_gbps") for r in rows])
    threads = {r.get("n_threads") for r in rows if r.get("n_threads")}
    isa = {r.get("isa") for r in rows if r.get("isa")}
    commit = {r.get("llamacpp_build_commit") for r in rows if r.get("llamacpp_build_commit")}
    rounds = {(r["rounds_sluice"], r["rounds_llamacpp"]) for r in rows}
    footer = [
        "",
        f"threads {', '.join(map(str, sorted(threads))) or '—'}; sluice isa {', '.join(sorted(isa)) or '—'};"
        f" llama.cpp build {', '.join(map(str, sorted(commit))) or '—'};"
        f" rounds (sluice, llama.cpp) {', '.join(map(str, sorted(rounds)))};"
        f" machine read bandwidth (sluice probe, median) {fmt(gbps, '.2f')} GB/s",
    ]
    return "\n".join(out + footer + ([""] + notes if notes else []))


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    run_dir = argv[1]
    models = collect(run_dir)
    if not models:
        print(f"error: no sluice/llama.cpp results in {run_dir}", file=sys.stderr)
        return 1
    rows = [summarize(name, entry) for name, entry in models.items()]
    print(table(rows))
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
