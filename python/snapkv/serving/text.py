"""Text in and out of the engine: a checkpoint's tokenizer (:mod:`snapkv.tokenizer`), chat
messages through its chat template, and stop strings found in text generated so far."""

from __future__ import annotations

import threading
from typing import List, Optional, Sequence

import numpy as np

from .. import tokenizer as tok
from .engine import RequestError

ROLES = ("system", "user", "assistant")
# HF's fast tokenizers set their truncation and padding state on every call, which fails
# ("Already borrowed") when two threads call one at once: the server's handlers encode while
# the engine's thread decodes.
_LOCK = threading.Lock()


def _load(directory):
    if directory is None:
        raise RequestError("this model has no tokenizer: give the prompt as token ids")
    try:
        return tok.load(directory)
    except tok.TokenizerError as error:
        raise RequestError(str(error)) from None


def encode(directory, text: str) -> np.ndarray:
    """`text`'s ids, exactly as ``snapkv generate --text`` tokenises it."""
    _load(directory)
    with _LOCK:
        return tok.encode(directory, text)


def encode_chat(directory, messages: Sequence[dict]) -> np.ndarray:
    """The ids of `messages` (``[{"role": ..., "content": str}, ...]``) through the
    checkpoint's chat template, the generation prompt added (one user turn gives exactly
    ``snapkv generate --text ... --chat``)."""
    tokenizer = _load(directory)
    checked: List[dict] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or set(message) - {"role", "content", "name"}:
            raise RequestError(f"messages[{i}] must be an object with role and content")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise RequestError(f"messages[{i}].role must be one of {', '.join(ROLES)}, got "
                               f"{role!r}")
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" and
                       isinstance(p.get("text"), str) for p in content):
                raise RequestError(f"messages[{i}].content: only text parts are supported")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string")
        checked.append({"role": role, "content": content})
    if not checked:
        raise RequestError("messages is empty")
    if not getattr(tokenizer, "chat_template", None):
        raise RequestError(f"{directory}: the tokenizer has no chat template")
    with _LOCK:
        text = tokenizer.apply_chat_template(checked, tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False).input_ids
    return np.asarray(ids, dtype=np.int64)


def decode(directory, tokens: Sequence[int]) -> str:
    """The text of generated `tokens` (special tokens left out, as OpenAI servers do)."""
    tokenizer = _load(directory)
    with _LOCK:
        return tokenizer.decode([int(t) for t in tokens], skip_special_tokens=True)


def find_stop(text: str, stops: Sequence[str]) -> Optional[int]:
    """Where the first stop string in `text` starts, or None."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def safe_end(text: str, stops: Sequence[str]) -> int:
    """How much of `text` can be sent: all of it but a tail that may still grow into a stop
    string, and an unfinished character (a U+FFFD the next token may complete)."""
    end = len(text)
    while end and text[end - 1] == "\ufffd":
        end -= 1
    for stop in stops:
        for n in range(min(len(stop) - 1, end), 0, -1):
            if text[:end].endswith(stop[:n]):
                end = min(end, len(text[:end]) - n)
                break
    return end
