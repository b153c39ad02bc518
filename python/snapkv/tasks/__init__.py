"""Synthetic long-context tasks for measuring KV-cache compression.

* :mod:`snapkv.tasks.retrieval` -- associative recall / needle-in-a-haystack prompts over an
  integer vocabulary of our own (numpy only; see its docstring for the format).
"""

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
