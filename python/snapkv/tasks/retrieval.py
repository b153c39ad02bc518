"""Synthetic long-context retrieval prompts (associative recall / needle in a haystack).

The prompts use an integer vocabulary of our own (``VOCAB_SIZE`` = 256 ids, no tokenizer):

=====================  ============  =========================================================
ids                    name          role
=====================  ============  =========================================================
0                      ``PAD``       never appears in a prompt
1                      ``BOS``       position 0 of every prompt
2                      ``KEY``       starts a needle
3                      ``END``       ends a needle (and the model's answer)
4                      ``QRY``       starts the question
5-15                   (reserved)    never used
16-111  (``FILLER``)   filler        the haystack, drawn uniformly and independently
112-175 (``KEYS``)     key tokens    a key is ``KEY_LEN`` = 2 of them
176-255 (``VALUES``)   value tokens  a value (the answer) is 1 to 3 of them
=====================  ============  =========================================================

A prompt of length ``L`` is::

    BOS filler ... [KEY k1 k2 v1 .. vm END] ... filler ... [needle] ... filler(13) QRY k1 k2

* A needle is ``KEY k1 k2 v1 .. vm END`` (``m + 4`` tokens). Needles sit anywhere in
  positions ``[SINK, L - TAIL)``: uniformly placed, never overlapping, never inside the first
  ``SINK`` = 4 positions (the attention sinks a StreamingLLM cache keeps) nor in the last
  ``TAIL`` = 16.
* The last ``TAIL`` = 16 positions hold filler and, as the prompt's last ``QUESTION_LEN`` = 3
  tokens, the question ``QRY k1 k2``. Everything the model needs to know *what* to answer is
  therefore inside a SnapKV observation window of 16; *where* the answer is, only the needle
  knows.
* The answer is the asked needle's value ``v1 .. vm``: greedy decoding of ``m`` tokens after
  the prompt must reproduce it exactly (a model trained by
  ``scripts/train_retrieval_model.py`` continues with ``END``).
* Within one prompt all keys differ and all value tokens differ, so copying the token that
  follows a value token is never ambiguous. A *distractor* key differs from the asked key in
  exactly one of its 2 tokens; every other key differs from every non-distractor key in both.

Variants (``VARIANTS``): ``single`` (one needle, 1-token answer), ``multi`` (4 needles, one of
them asked), ``distractor`` (the asked needle and 2 distractors), ``multitoken`` (one needle, a
3-token answer) and ``mixed`` (1-4 needles, 0-2 distractors, 1-3 answer tokens, drawn per
sample; the default).

Everything is a pure function of ``(length, seed, variant, index)``: :func:`generate` draws one
prompt, :func:`samples` the ``n`` prompts ``index = 0 .. n-1`` (so the first ``k`` of ``n`` are
the ``k`` of a smaller draw). Any integer seed works; lengths from :func:`min_length` up.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Optional

import numpy as np

PAD, BOS, KEY, END, QRY = 0, 1, 2, 3, 4
FILLER = range(16, 112)
KEYS = range(112, 176)
VALUES = range(176, 256)
VOCAB_SIZE = 256

KEY_LEN = 2
SINK = 4           # no needle in the first SINK positions
TAIL = 16          # no needle in the last TAIL positions; the question ends the prompt
QUESTION_LEN = KEY_LEN + 1
# Bumped whenever the drawing rules change, so a changed generator never silently reuses a
# seed's old prompts (results caches key on it).
GENERATOR_VERSION = 1


@dataclasses.dataclass(frozen=True)
class VariantSpec:
    """Inclusive ranges ``(lo, hi)`` the per-sample counts are drawn from."""

    needles: tuple      # needles that are not distractors, the asked one included
    distractors: tuple  # needles whose key differs from the asked key in one token
    answer_len: tuple   # value tokens of every needle in the prompt


VARIANTS = {
    "single": VariantSpec(needles=(1, 1), distractors=(0, 0), answer_len=(1, 1)),
    "multi": VariantSpec(needles=(4, 4), distractors=(0, 0), answer_len=(1, 1)),
    "distractor": VariantSpec(needles=(1, 1), distractors=(2, 2), answer_len=(1, 1)),
    "multitoken": VariantSpec(needles=(1, 1), distractors=(0, 0), answer_len=(3, 3)),
    "mixed": VariantSpec(needles=(1, 4), distractors=(0, 2), answer_len=(1, 3)),
}
DEFAULT_VARIANT = "mixed"


@dataclasses.dataclass(frozen=True)
class Needle:
    start: int        # position of its KEY token
    key: tuple        # KEY_LEN key tokens
    value: tuple      # value tokens
    role: str         # "asked", "distractor" or "other"

    @property
    def length(self):
        return KEY_LEN + len(self.value) + 2

    @property
    def value_start(self):
        return self.start + KEY_LEN + 1


@dataclasses.dataclass(frozen=True)
class Sample:
    ids: np.ndarray               # int64 [length], the prompt
    answer: np.ndarray            # int64 [m], the asked needle's value
    needle_positions: np.ndarray  # int64, positions of the asked needle (KEY .. END)
    value_positions: np.ndarray   # int64 [m], where the answer tokens sit in the prompt
    question_position: int        # position of QRY (= length - QUESTION_LEN)
    needles: tuple                # every Needle, in prompt order
    variant: str
    length: int
    seed: int
    index: int

    @property
    def asked(self) -> Needle:
        return next(n for n in self.needles if n.role == "asked")


def min_length(variant: str = DEFAULT_VARIANT) -> int:
    """The shortest prompt the variant can always be drawn at."""
    spec = _spec(variant)
    most = spec.needles[1] + spec.distractors[1]
    return SINK + most * (KEY_LEN + spec.answer_len[1] + 2) + TAIL


def generate(length: int, seed: int, variant: str = DEFAULT_VARIANT, index: int = 0) -> Sample:
    """Prompt number ``index`` of ``(length, seed, variant)``."""
    _check_int("length", length)
    _check_int("seed", seed)
    _check_int("index", index)
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")
    spec = _spec(variant)
    shortest = min_length(variant)
    if length < shortest:
        raise ValueError(f"length {length} is too short for variant {variant!r}: "
                         f"it needs at least {shortest} tokens")
    entropy = [GENERATOR_VERSION, list(VARIANTS).index(variant), length, index,
               abs(seed), int(seed < 0)]
    rng = np.random.default_rng(np.random.SeedSequence(entropy))
    return draw(rng, length, spec, variant=variant, seed=seed, index=index)


def samples(n: int, length: int, seed: int, variant: str = DEFAULT_VARIANT) -> list:
    """The ``n`` prompts ``generate(length, seed, variant, i)`` for ``i < n``."""
    _check_int("n", n)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [generate(length, seed, variant, i) for i in range(n)]


def draw(rng: np.random.Generator, length: int, spec: VariantSpec, variant: str = "custom",
         seed: Optional[int] = None, index: int = 0) -> Sample:
    """One prompt drawn with ``rng`` (the building block of :func:`generate` and of training,
    which uses its own, denser specs)."""
    needles = int(rng.integers(spec.needles[0], spec.needles[1] + 1))
    distractors = int(rng.integers(spec.distractors[0], spec.distractors[1] + 1))
    answer_len = int(rng.integers(spec.answer_len[0], spec.answer_len[1] + 1))
    count = needles + distractors
    if needles < 1:
        raise ValueError("a prompt needs at least one needle (the asked one)")
    if count * answer_len > len(VALUES):
        raise ValueError(f"{count} needles of {answer_len} value tokens need more than the "
                         f"{len(VALUES)} distinct value tokens")
    span = count * (KEY_LEN + answer_len + 2)
    region = length - TAIL - SINK
    if span > region:
        raise ValueError(f"length {length} cannot hold {count} needles of "
                         f"{KEY_LEN + answer_len + 2} tokens")

    keys = _keys(rng, needles, distractors)
    roles = ["asked"] + ["other"] * (needles - 1) + ["distractor"] * distractors
    value_tokens = rng.choice(np.asarray(VALUES), size=count * answer_len, replace=False)
    values = [tuple(int(t) for t in value_tokens[i * answer_len:(i + 1) * answer_len])
              for i in range(count)]

    # Uniform non-overlapping placement: sorted gaps over the free slots, needles in a random
    # order.
    order = rng.permutation(count)
    gaps = np.sort(rng.integers(0, region - span + 1, size=count))
    ids = np.asarray(rng.choice(np.asarray(FILLER), size=length), dtype=np.int64)
    ids[0] = BOS
    placed = []
    offset = SINK
    for slot, which in enumerate(order):
        start = offset + int(gaps[slot])
        needle = Needle(start=start, key=keys[which], value=values[which], role=roles[which])
        ids[start:start + needle.length] = (KEY, *needle.key, *needle.value, END)
        placed.append(needle)
        offset += needle.length
    asked = next(n for n in placed if n.role == "asked")
    question = length - QUESTION_LEN
    ids[question:] = (QRY, *asked.key)
    return Sample(
        ids=ids,
        answer=np.asarray(asked.value, dtype=np.int64),
        needle_positions=np.arange(asked.start, asked.start + asked.length, dtype=np.int64),
        value_positions=np.arange(asked.value_start, asked.value_start + len(asked.value),
                                  dtype=np.int64),
        question_position=question,
        needles=tuple(placed),
        variant=variant,
        length=length,
        seed=seed,
        index=index,
    )


def _keys(rng, needles, distractors):
    """The asked key first, then the other needles' keys, then the distractors'."""
    pool = np.asarray(KEYS)
    asked = tuple(int(t) for t in rng.choice(pool, size=KEY_LEN))
    keys = [asked]
    while len(keys) < needles:
        key = tuple(int(t) for t in rng.choice(pool, size=KEY_LEN))
        if all(_differences(key, other) >= 2 for other in keys):
            keys.append(key)
    while len(keys) < needles + distractors:
        spot = int(rng.integers(KEY_LEN))
        token = int(rng.choice(pool))
        if token == asked[spot]:
            continue
        key = asked[:spot] + (token,) + asked[spot + 1:]
        # Every distractor is one substitution from the asked key; it must still be unique.
        if key not in keys and all(_differences(key, other) >= 2 for other in keys[1:needles]):
            keys.append(key)
    return keys


def _differences(a, b):
    return sum(x != y for x, y in zip(a, b))


def _spec(variant):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {sorted(VARIANTS)}")
    return VARIANTS[variant]


def _check_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
