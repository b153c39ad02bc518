"""Write the prompts of `snapkv eval --task TASK` (snapkv.tasks.text, the same seed, indices
and lengths) in run.py's input format, so that kvpress answers exactly the prompts our
compiled pipeline answers (the token ids are written, not re-tokenised by the other
transformers version). Run it with the main environment's python:

    python3 benchmarks/kvpress/prompts.py --model smollm2-135m-instruct --task passkey \\
        --lengths 2048 --samples 10 --out /tmp/passkey-2048.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from snapkv import models
from snapkv.evaluation.tasks import TextTask


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True,
                   help="checkpoint directory or known model name (its tokenizer)")
    p.add_argument("--task", required=True, choices=("passkey", "needle", "multikey"))
    p.add_argument("--lengths", default="2048", help="comma-separated prompt lengths")
    p.add_argument("--samples", type=int, default=10, help="prompts per length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    directory = models.resolve(args.model)
    task = TextTask(args.task, directory)
    rows = []
    for length in (int(x) for x in args.lengths.split(",")):
        for index in range(args.samples):
            sample = task.sample(length, args.seed, index)
            rows.append(dict(id=f"{args.task}-{length}-{args.seed}-{index}",
                             ids=sample.ids.tolist(), answer=sample.answer,
                             max_new_tokens=sample.steps + 1,
                             text=""))
    args.out.write_text(json.dumps(rows))
    print(f"wrote {len(rows)} prompts to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
