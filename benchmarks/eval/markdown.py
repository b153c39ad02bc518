"""Render `snapkv eval --json` files (and kvpress run.py --json files) as the markdown tables
of docs/eval.md: one row per method, one column per budget, "accuracy [95 % interval]".

    python3 benchmarks/eval/markdown.py eval /tmp/passkey.json [--length 2048]
    python3 benchmarks/eval/markdown.py kvpress /tmp/kvpress-passkey.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from snapkv.evaluation.results import wilson  # noqa: E402


def cell(correct: int, n: int, interval=None) -> str:
    if not n:
        return "-"
    if interval is None:
        interval = wilson(correct, n)
    low, high = interval
    return f"{correct}/{n} [{100 * low:.0f}-{100 * high:.0f}]"


def eval_tables(path: str, only_length=None):
    doc = json.load(open(path))
    by_length = defaultdict(list)
    for row in doc["results"]:
        by_length[row["length"]].append(row)
    for length, rows in sorted(by_length.items()):
        if only_length and length != only_length:
            continue
        budgets = sorted({r["budget_fraction"] for r in rows if r["method"] != "full"},
                         key=lambda b: -eval(b))
        print(f"\nL = {length} ({doc['task']}, window {doc['window']}, {doc['samples']} "
              f"prompts; cells: right / n [95 % interval, %]; KiB: K/V after prefill)\n")
        print("| method | " + " | ".join(f"C = L·{b}" for b in budgets) + " | KiB at "
              f"{budgets[1] if len(budgets) > 1 else budgets[0]} |")
        print("|---|" + "---:|" * (len(budgets) + 1))
        methods = list(dict.fromkeys(r["method"] for r in rows))
        for method in methods:
            mine = {r["budget_fraction"]: r for r in rows if r["method"] == method}
            if method == "full":
                r = mine["1"]
                print("| full (every position) | " + " | ".join(
                    [cell(r["correct"], r["n"], r["interval"])] * len(budgets))
                    + f" | {r['kept_bytes'] // 1024:,} |")
                continue
            ref = mine.get(budgets[1] if len(budgets) > 1 else budgets[0])
            print(f"| {method} | " + " | ".join(
                cell(mine[b]["correct"], mine[b]["n"], mine[b]["interval"]) if b in mine
                else "-" for b in budgets) + f" | {ref['kept_bytes'] // 1024:,} |")


def kvpress_tables(path: str):
    rows = json.load(open(path))
    groups = defaultdict(list)
    for r in rows:
        groups[(r["press"], r["ratio"])].append(r)
    ratios = sorted({r["ratio"] for r in rows if r["ratio"] is not None})
    print("\n| press | " + " | ".join(f"ratio {r} (C = L·{1 - r:g})" for r in ratios)
          + " | prefill s | decode ms | KiB held at " + f"{ratios[0]} |")
    print("|---|" + "---:|" * (len(ratios) + 3))
    for press in dict.fromkeys(r["press"] for r in rows):
        cells, timing = [], None
        for ratio in ratios:
            found = groups.get((press, ratio)) or groups.get((press, None))
            if not found:
                cells.append("-")
                continue
            cells.append(cell(sum(r["correct"] for r in found), len(found)))
            timing = timing or found
        prefill = sorted(r["prefill_s"] for r in timing)[len(timing) // 2]
        decode = sorted(r["decode_ms"] for r in timing)[len(timing) // 2]
        held = sorted(r["kv_bytes"] for r in timing)[len(timing) // 2]
        effective = sorted(r.get("kv_bytes_effective", r["kv_bytes"]) for r in timing)[
            len(timing) // 2]
        masked = f" (masked: {effective // 1024:,} attended)" if effective != held else ""
        print(f"| {press} | " + " | ".join(cells) + f" | {prefill:.2f} | {decode:.0f} | "
              f"{held // 1024:,}{masked} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=("eval", "kvpress"))
    p.add_argument("path")
    p.add_argument("--length", type=int)
    args = p.parse_args()
    if args.kind == "eval":
        eval_tables(args.path, args.length)
    else:
        kvpress_tables(args.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
