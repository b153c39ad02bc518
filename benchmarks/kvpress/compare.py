"""Prompt by prompt: did kvpress and our compiled pipeline give the same verdict and the same
continuation? Reads run.py's --json and the results cache of `snapkv eval` (each prompt's
greedy continuation, under $SNAPKV_EVAL_CACHE or ~/.cache/snapkv/eval) for the same task,
length and seed (prompts.py wrote kvpress's prompts from the same draw).

    python3 benchmarks/kvpress/compare.py --kvpress /tmp/kvpress-passkey.json --task passkey \\
        --length 2048

Pairs: full = full; streaming at ratio r = our streaming at C = int(L (1 - r)); snapkv at
ratio r = our snapkv-gqa-mean (avg pooling, kernel `--kernel`: 5, or 15 for a run.py
--kernel 15 run, our snapkv-gqa-mean-k15) at that C (kvpress's SnapKV averages the query heads
of a kv head: benchmarks/kvpress/README.md).
"""

from __future__ import annotations

import argparse
import json

from snapkv.evaluation.results import default_cache_dir
from snapkv.tasks import text


def ours(task: str, length: int, seed: int, kernel: int = 5) -> dict:
    """{(method, capacity): {index: sample result}} from the eval's results cache."""
    found = {}
    # Only the prompts prompts.py draws today (older generator versions drew others).
    # (Results cached before per-task versions were keyed by GENERATOR_VERSION alone.)
    generators = [[text.GENERATOR_VERSION, text.TASK_VERSIONS[task]]]
    if text.TASK_VERSIONS[task] == 1:
        generators.append(text.GENERATOR_VERSION)
    for path in default_cache_dir().glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        key = data.get("key", {})
        if key.get("variant") != f"text:{task}" or key.get("length") != length or \
                key.get("seed") != seed or key.get("generator") not in generators:
            continue
        method = key["method"]
        name = "full" if method == "full" else "streaming" if "scoring=recent" in method \
            else "snapkv" if ("gqa=mean" in method and f"kernel={kernel} " in method and
                              "pooling=avg" in method and "scoring" not in method and
                              f"window={key['window']}" in method) else None
        if name:
            found[(name, key["capacity"])] = {int(i): s for i, s in data["samples"].items()}
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kvpress", required=True, help="run.py --json output")
    p.add_argument("--task", required=True)
    p.add_argument("--length", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kernel", type=int, default=5,
                   help="the pooling kernel of the kvpress run (run.py --kernel; default 5)")
    args = p.parse_args()
    rows = json.load(open(args.kvpress))
    mine = ours(args.task, args.length, args.seed, args.kernel)
    print("press      ratio  prompts  same verdict  same continuation")
    groups = {}
    for row in rows:
        groups.setdefault((row["press"], row["ratio"]), []).append(row)
    for (press, ratio), group in groups.items():
        capacity = args.length if press == "full" else int(args.length * (1 - ratio))
        other = mine.get((press, capacity))
        if other is None:
            continue
        verdicts = texts = n = 0
        for row in group:
            sample = other.get(int(row["prompt_id"].split("-")[-1]))
            if sample is None:
                continue
            n += 1
            verdicts += sample["correct"] == row["correct"]
            # kvpress stops at EOS; ours decodes on: compare up to kvpress's end.
            texts += sample.get("said", "").startswith(row["continuation"])
        print(f"{press:<10} {ratio if ratio is not None else '-':>5}  {n:>7}  {verdicts:>12}  "
              f"{texts:>17}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
