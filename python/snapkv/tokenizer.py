"""Text in and out: a checkpoint's own tokenizer, used exactly as HuggingFace uses it.

``encode(directory, text)`` is ``AutoTokenizer.from_pretrained(directory)(text).input_ids``
(so the BOS handling is HF's); with ``chat=True`` the checkpoint's chat template is applied
first (one user turn, the generation prompt added) and the templated text is tokenised
without adding special tokens again (the template holds them). Needs transformers; a
checkpoint without tokenizer files is a :class:`TokenizerError`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from typing import Sequence, Union

import numpy as np

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


class TokenizerError(Exception):
    """No usable tokenizer (none in the checkpoint, or transformers missing)."""


@functools.lru_cache(maxsize=8)
def load(directory: Union[str, os.PathLike]):
    """The tokenizer saved in checkpoint `directory` (cached per directory)."""
    directory = Path(directory)
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise TokenizerError(f"{directory} holds no tokenizer ({', '.join(TOKENIZER_FILES)}): "
                             f"give token ids instead (--prompt), or save the tokenizer with "
                             f"the checkpoint")
    if importlib.util.find_spec("transformers") is None:
        raise TokenizerError("text prompts need transformers (pip install transformers)")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(directory))
    except Exception as error:  # transformers raises many kinds for a bad directory
        raise TokenizerError(f"{directory}: the tokenizer does not load: "
                             f"{type(error).__name__}: {error}") from None


def encode(directory, text: str, chat: bool = False) -> np.ndarray:
    """int64 token ids [n] of `text` (see the module docstring)."""
    tokenizer = load(directory)
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            raise TokenizerError(f"{directory}: the tokenizer has no chat template (--chat)")
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False).input_ids
    else:
        ids = tokenizer(text).input_ids
    return np.asarray(ids, dtype=np.int64)


def decode(directory, ids: Sequence[int]) -> str:
    """The text of `ids` (special tokens kept, so an end-of-turn token is visible)."""
    return load(directory).decode([int(i) for i in ids])

