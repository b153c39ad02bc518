"""Synthetic long-context tasks for measuring KV-cache compression.

* :mod:`snapkv.tasks.retrieval` -- associative recall / needle-in-a-haystack prompts over an
  integer vocabulary of our own (numpy only; see its docstring for the format).
* :mod:`snapkv.tasks.text` -- real-text passkey, needle and multikey prompts for a real
  tokenizer (its ``generate`` and ``samples``: ``text.generate``, ``text.samples``).
"""

from . import text  # noqa: F401
from .retrieval import (  # noqa: F401
    DEFAULT_VARIANT,
    VARIANTS,
    VOCAB_SIZE,
    Needle,
    Sample,
    generate,
    min_length,
    samples,
)
from .text import TASKS as TEXT_TASKS  # noqa: F401
from .text import TextSample  # noqa: F401
