"""Accuracy of KV-cache policies on long-context tasks, run through the compiled pipeline:
``snapkv-compress-kv-cache``, ``snapkv.select`` and the CPU pipeline (``snapkv eval`` and
``snapkv needle`` drive it; docs/eval.md). By concern:

* :mod:`.methods`: the methods compared (SnapKV variants, PyramidKV, Ada-KV, StreamingLLM,
  chunked and block-granular selection) as compaction options, and the budgets;
* :mod:`.pipeline`: the compiled pieces (one shared prefill, a select library per method and
  capacity, a decode per GQA policy) and running a prompt through them;
* :mod:`.tasks`: what a prompt is and when its answer is right (retrieval, text tasks);
* :mod:`.results`: the per-prompt results cache and the Wilson interval;
* :mod:`.suite`: the (length, method, budget) cells, their checks, running them and their
  summary rows.
"""

from ..tools import REPO


class EvalError(Exception):
    """A problem to report as one message (bad option, missing model, failed tool)."""


DEFAULT_MODEL = REPO / "models" / "retrieval-llama"
DEFAULT_WINDOW = 16            # the task keeps the question inside the last 16 positions
