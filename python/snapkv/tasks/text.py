"""Real-text long-context prompts for a real tokenizer: ``passkey``, ``needle``, ``multikey``.

Unlike :mod:`snapkv.tasks.retrieval` (integer vocabulary of our own), these prompts are
English text, tokenized by the caller's tokenizer (any callable with the HuggingFace calling
convention; this module never imports transformers). Each prompt is::

    <intro>\\n<filler ... needle ... filler>\\n<question>

and the model answers by continuing the question greedily. The three formats:

* ``passkey`` (Mohtashami & Jaggi 2023; LongLoRA's evaluation): repeated filler sentences, a
  5-digit key (10000-99999) the model must copy::

      There is an important info hidden inside a lot of irrelevant text. Find it and memorize
      them. I will quiz you about the important information there.
      The grass is green. The sky is blue. The sun is yellow. Here we go. There and back
      again. The grass is green. The pass key is 27611. Remember it. 27611 is the pass key.
      The sky is blue. ...
      What is the pass key? The pass key is

  answer ``"27611"``.
* ``needle``: one sentence in English prose (the Python documentation shipped with the standard
  library, ``pydoc_data.topics``), a word answer rather than digits::

      Special magic words are hidden inside the following text. Make sure to memorize them.
      I will quiz you about the words afterwards.
      ... is equivalent to if __debug__: ... The special magic words for Lisbon are lantern
      and pepper. The
      extended form, ...
      What are the special magic words for Lisbon? The special magic words for Lisbon are

  answer ``"lantern"``.
* ``multikey`` (RULER's multi-key needle in a haystack): ``needles`` (default
  ``DEFAULT_NEEDLES`` = 4) sentences with distinct keys and distinct 7-digit numbers at
  distinct depths of the same prose; one key is asked::

      Some special magic numbers are hidden within the following text. Make sure to memorize
      them. I will quiz you about the numbers afterwards.
      ... One of the special magic numbers for Oslo is: 4081337. ... One of the special magic
      numbers for Nairobi is: 9120564. ...
      What is the special magic number for Oslo? The special magic number for Oslo is:

  answer ``"4081337"``.

Everything is a pure function of ``(task, seed, index)``, the options, the depth, the
tokenizer and, for ``needle`` and ``multikey``, the running Python's documentation
(:func:`prose_digest` names it: results cached across Python versions should key on it). The
``length`` only sets the amount of filler: the needles, the keys, the answers, the default
depth and where the prose starts do not depend on it, so a length sweep changes nothing else.

``depth`` is the asked needle's place in the filler (0: right after the intro, 1: right before
the question), counted in filler tokens (in characters for a tokenizer without offsets); a
needle is moved by at most ``SNAP_WORDS`` filler words (and 2 % of them) so that it starts a
sentence. Without ``depth``, :func:`generate` draws one from ``(task, seed, index)`` and
:func:`samples` spreads them evenly, both over ``DEPTHS`` (0.05 to 0.95).

Length guarantee: ``len(ids) <= length``, always (every prompt returned was tokenized whole).
:func:`generate` binary-searches the number of filler words, tokenizing the whole prompt each
time (about log2(length) + 6 tokenizer calls in all), for the longest prompt that fits, so it
is shorter only by about the tokens of the next filler word, which did not fit (typically 0-3
tokens; the tests check ``length - 16 <= len(ids)``), as long as more filler never means fewer
tokens. Moving the needles to their token depth afterwards is kept only if it still fits.

``needle_positions`` (the tokens of the asked needle's sentence) come from the tokenizer's
character offsets (``tokenizer(text, return_offsets_mapping=True)``, what HF fast tokenizers
give): every token whose characters overlap the sentence. A tokenizer without offsets gets the
tokens of the text before the sentence and of the text through its end: the span starts where
the first stops matching ``ids`` and ends where the second does, plus the one token a merge
across the boundary may have made (so a token spanning the boundary counts as the needle's).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import itertools
import numbers
import re
from typing import Optional

import numpy as np

TASKS = ("passkey", "needle", "multikey")
DEFAULT_NEEDLES = 4  # multikey: sentences in the prompt, one of them asked
ANSWER_MARGIN = 4    # max_new_tokens = answer tokens + this (a space, a period, ...)
SNAP_WORDS = 30      # a needle moves at most this many filler words (and 2 %) to start a sentence
DEPTHS = (0.05, 0.95)  # default depths: spread evenly by samples(), drawn by generate()
# Bumped whenever the drawing rules change, so results cached by seed are not silently reused.
GENERATOR_VERSION = 1
# Per task, what cached results are keyed by (GENERATOR_VERSION seeds the draws of every task,
# so a task's own change bumps only its entry). needle 2: two-word answers, because the first
# answer token comes from the full prefill and a one-word answer never tested the cache.
TASK_VERSIONS = {"passkey": 1, "needle": 2, "multikey": 1}

PASSKEY_INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it "
                 "and memorize them. I will quiz you about the important information there.")
PASSKEY_FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There "
                  "and back again.")
PASSKEY_NEEDLE = "The pass key is {answer}. Remember it. {answer} is the pass key."
PASSKEY_QUESTION = "What is the pass key? The pass key is"

NEEDLE_INTRO = ("Special magic words are hidden inside the following text. Make sure to "
                "memorize them. I will quiz you about the words afterwards.")
NEEDLE_SENTENCE = "The special magic words for {key} are {answer}."
NEEDLE_QUESTION = ("What are the special magic words for {key}? The special magic words for "
                   "{key} are")

MULTIKEY_INTRO = ("Some special magic numbers are hidden within the following text. Make sure "
                  "to memorize them. I will quiz you about the numbers afterwards.")
MULTIKEY_SENTENCE = "One of the special magic numbers for {key} is: {answer}."
MULTIKEY_QUESTION = ("What is the special magic number for {key}? The special magic number "
                     "for {key} is:")

# Keys and word answers. Those that occur in the prose are dropped (see _names), so an answer
# is in the prompt only where a needle put it.
CITIES = (
    "Amsterdam", "Athens", "Bangkok", "Barcelona", "Berlin", "Bogota", "Budapest", "Cairo",
    "Chicago", "Dublin", "Geneva", "Havana", "Helsinki", "Istanbul", "Jakarta", "Kyoto",
    "Lagos", "Lima", "Lisbon", "London", "Madrid", "Manila", "Melbourne", "Montreal", "Moscow",
    "Mumbai", "Nairobi", "Oslo", "Paris", "Prague", "Rome", "Santiago", "Seoul", "Shanghai",
    "Stockholm", "Sydney", "Tokyo", "Toronto", "Vienna", "Warsaw",
)
WORDS = (
    "apple", "basket", "blanket", "bottle", "bridge", "butter", "candle", "carpet",
    "castle", "cherry", "cloud", "coffee", "cookie", "dragon", "eagle", "feather", "forest",
    "garden", "giraffe", "guitar", "hammer", "honey", "island", "jacket", "kitten", "ladder",
    "lantern", "lemon", "meadow", "mirror", "monkey", "mountain", "orange", "painting",
    "parrot", "pencil", "pepper", "pillow", "pumpkin", "rabbit", "river", "saddle", "shadow",
    "silver", "spider", "squirrel", "sunset", "tiger", "tomato", "turtle", "umbrella", "valley",
    "violin", "wagon", "walnut", "whistle", "window", "winter", "zebra",
)

_WORD = r"(?<![A-Za-z0-9]){}(?![A-Za-z0-9])"  # a whole word or number, not part of a longer one


@dataclasses.dataclass(frozen=True)
class TextSample:
    task: str
    seed: int
    index: int
    text: str                     # the whole prompt text
    ids: np.ndarray               # int64 [n] = tokenizer(text).input_ids, as returned
    answer: str                   # the expected answer, e.g. "27611"
    depth: float                  # the asked needle's depth in the filler, in [0, 1]
    needle_positions: np.ndarray  # int64 positions (into ids) of the asked needle's sentence
    max_new_tokens: int           # greedy steps for the answer to appear (answer tokens + margin)

    @property
    def length(self) -> int:
        return len(self.ids)


@dataclasses.dataclass(frozen=True)
class _Draw:
    """A prompt before its filler is sized."""

    intro: str
    question: str
    answer: str
    needles: tuple  # (depth, sentence) pairs, the asked one first
    filler: object  # () -> an endless iterator of filler words


def generate(task: str, length: int, seed: int, index: int, tokenizer, *,
             depth: Optional[float] = None, **task_options) -> TextSample:
    """Prompt number ``index`` of ``(task, seed)``, at most ``length`` tokens long.

    ``depth`` places the asked needle (default: drawn from ``(task, seed, index)``, uniform
    over ``DEPTHS``); ``task_options``: ``needles`` for ``multikey``.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    _check_int("length", length, 1)
    _check_int("seed", seed, 0)
    _check_int("index", index, 0)
    if depth is None:
        # Its own stream, so giving a depth changes nothing else.
        depth = float(_rng(task, seed, index, 1).uniform(*DEPTHS))
    if (isinstance(depth, bool) or not isinstance(depth, numbers.Real)
            or not 0.0 <= depth <= 1.0):
        raise ValueError(f"depth must be a number in [0, 1], got {depth!r}")
    unknown = sorted(set(task_options) - set(_OPTIONS[task]))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for task {task!r}; it takes "
                         f"{', '.join(_OPTIONS[task]) or 'none'}")
    draw = _DRAWS[task](_rng(task, seed, index, 0), float(depth), **task_options)

    text, (start, end), ids = _fit(draw, length, tokenizer)
    answer_tokens = len(_encode(tokenizer, " " + draw.answer, add_special_tokens=False))
    return TextSample(
        task=task, seed=seed, index=index, text=text,
        ids=np.asarray(ids, dtype=np.int64),
        answer=draw.answer, depth=float(depth),
        needle_positions=_span(tokenizer, text, ids, start, end),
        max_new_tokens=answer_tokens + ANSWER_MARGIN,
    )


def samples(task: str, n: int, length: int, seed: int, tokenizer, **kw) -> list:
    """``generate(task, length, seed, i, tokenizer, ...)`` for ``i < n``, the depth spread
    evenly over ``DEPTHS`` (0.05 to 0.95) across the ``n`` prompts unless ``depth`` is given."""
    _check_int("n", n, 0)
    if "depth" in kw:
        depths = [kw.pop("depth")] * n
    else:
        depths = [float(d) for d in np.linspace(*DEPTHS, n)] if n > 1 else [0.5] * n
    return [generate(task, length, seed, i, tokenizer, depth=d, **kw)
            for i, d in enumerate(depths)]


def correct(sample: TextSample, continuation: str) -> bool:
    """Whether the greedy continuation holds the answer as a whole word or number ("27611" is
    not found in "276110" nor in "127611"; case matters)."""
    return re.search(_WORD.format(re.escape(sample.answer)), continuation.lstrip()) is not None


# --- the three tasks ------------------------------------------------------------------------

def _passkey(rng, depth):
    answer = str(int(rng.integers(10000, 100000)))
    return _Draw(PASSKEY_INTRO, PASSKEY_QUESTION, answer,
                 needles=((depth, PASSKEY_NEEDLE.format(answer=answer)),),
                 filler=lambda: itertools.cycle(PASSKEY_FILLER.split()))


def _needle(rng, depth):
    filler = _prose(rng)
    cities, words = _names()
    key = str(rng.choice(cities))
    first, second = (str(w) for w in rng.choice(words, 2, replace=False))
    answer = f"{first} and {second}"
    return _Draw(NEEDLE_INTRO, NEEDLE_QUESTION.format(key=key), answer,
                 needles=((depth, NEEDLE_SENTENCE.format(key=key, answer=answer)),),
                 filler=filler)


def _multikey(rng, depth, needles=DEFAULT_NEEDLES):
    cities = _names()[0]
    _check_int("needles", needles, 1)
    if needles > len(cities):
        raise ValueError(f"needles must be at most {len(cities)} (distinct keys), got {needles}")
    filler = _prose(rng)
    # A permutation, so the first keys (the asked one first) do not depend on `needles`.
    keys = [cities[i] for i in rng.permutation(len(cities))[:needles]]
    numbers_in_prose = _prose_numbers()
    answers = []
    while len(answers) < needles:
        number = str(int(rng.integers(1_000_000, 10_000_000)))
        if number not in answers and number not in numbers_in_prose:
            answers.append(number)
    # Other needles at least 0.25 / needles of depth from each other (at most half of [0, 1]
    # is excluded, so the draw ends quickly).
    depths = [depth]
    while len(depths) < needles:
        other = float(rng.uniform())
        if all(abs(other - d) >= 0.25 / needles for d in depths):
            depths.append(other)
    sentences = [MULTIKEY_SENTENCE.format(key=k, answer=a) for k, a in zip(keys, answers)]
    return _Draw(MULTIKEY_INTRO, MULTIKEY_QUESTION.format(key=keys[0]), answers[0],
                 needles=tuple(zip(depths, sentences)), filler=filler)


_DRAWS = {"passkey": _passkey, "needle": _needle, "multikey": _multikey}
_OPTIONS = {"passkey": (), "needle": (), "multikey": ("needles",)}


# --- filler ---------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _prose_words() -> tuple:
    """The words of pydoc_data.topics (sorted keys, whitespace normalised), without the runs of
    punctuation that draw headings and tables."""
    from pydoc_data.topics import topics

    text = " ".join(topics[k] for k in sorted(topics))
    return tuple(w for w in text.split() if not re.fullmatch(r"[^\w\s]{3,}", w))


@functools.lru_cache(maxsize=None)
def prose_digest() -> str:
    """A short hash of the filler prose (it changes with the Python version)."""
    return hashlib.sha256(" ".join(_prose_words()).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _prose_numbers() -> frozenset:
    return frozenset(re.findall(r"\d+", " ".join(_prose_words())))


@functools.lru_cache(maxsize=None)
def _names() -> tuple:
    """(cities, words) that never occur in the prose, case ignored."""
    seen = set(re.findall(r"[a-z]+", " ".join(_prose_words()).lower()))
    return tuple(tuple(n for n in names if n.lower() not in seen) for names in (CITIES, WORDS))


def _prose(rng):
    """Filler from a seed-drawn offset into the prose, starting a sentence, wrapping around."""
    words = _prose_words()
    start = int(rng.integers(len(words)))
    while not _ends_sentence(words[start - 1]):
        start = (start + 1) % len(words)
    return lambda: itertools.chain(words[start:], itertools.cycle(words))


def _ends_sentence(word):
    return word[-1] in ".?!"


# --- sizing the prompt ----------------------------------------------------------------------

def _render(draw, words, spots=None):
    """The prompt with ``words`` of filler and the needles before the words numbered ``spots``
    (default: at their depth in characters): (text, (start, end) of the asked needle)."""
    if spots is None:
        ends = list(itertools.accumulate(len(w) + 1 for w in words))
        chars = ends[-1] if ends else 0
        spots = [_snap(words, bisect.bisect(ends, d * chars)) for d, _ in draw.needles]
    body, done = [], 0
    for spot, j in sorted(zip(spots, range(len(spots)))):
        body.extend(words[done:spot])
        body.append(j)  # the needle's index, for its sentence
        done = spot
    body.extend(words[done:])
    pieces, at = [], len(draw.intro) + 1
    for piece in body:
        if isinstance(piece, int):
            sentence = draw.needles[piece][1]
            if piece == 0:
                span = (at, at + len(sentence))
            piece = sentence
        pieces.append(piece)
        at += len(piece) + 1
    return draw.intro + "\n" + " ".join(pieces) + "\n" + draw.question, span


def _token_spots(draw, words, tokenizer):
    """Needle spots at their depth in filler *tokens*, from the offsets of the prompt without
    needles; None if the tokenizer gives no offsets."""
    text = draw.intro + "\n" + " ".join(words) + "\n" + draw.question
    offsets = _offsets(tokenizer, text)
    if offsets is None:
        return None
    token_ends = [e for s, e in offsets if e > s]  # special tokens have no characters
    word_starts = len(draw.intro) + 1 + np.cumsum([0] + [len(w) + 1 for w in words])
    before = np.searchsorted(token_ends, word_starts, side="right")  # tokens before each word
    before -= before[0]
    return [_snap(words, int(np.abs(before - d * before[-1]).argmin())) for d, _ in draw.needles]


def _snap(words, target):
    """The word boundary nearest ``target`` that starts a sentence, if one is within
    ``SNAP_WORDS`` and 2 % of the filler; ``target`` otherwise."""
    n = len(words)
    for step in range(min(SNAP_WORDS, n // 50) + 1):
        for spot in (target - step, target + step):
            if 0 <= spot <= n and (spot in (0, n) or _ends_sentence(words[spot - 1])):
                return spot
    return target


def _fit(draw, length, tokenizer):
    """The longest prompt of at most ``length`` tokens: (text, needle span, ids)."""
    stream, words = draw.filler(), []

    def measure(n, spots=None):
        words.extend(itertools.islice(stream, max(0, n - len(words))))
        text, span = _render(draw, words[:n], spots)
        return text, span, _encode(tokenizer, text)

    best = measure(0)
    if len(best[2]) > length:
        raise ValueError(f"length {length} is too short: the instructions, needle(s) and "
                         f"question alone take {len(best[2])} tokens")
    # Every filler word should add a token, so this many words should not fit; checked.
    lo, hi = 0, length - len(best[2]) + 1
    for _ in range(8):
        trial = measure(hi)
        if len(trial[2]) > length:
            break
        lo, best, hi = hi, trial, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        trial = measure(mid)
        if len(trial[2]) <= length:
            lo, best = mid, trial
        else:
            hi = mid
    # The search placed the needles by characters (a token count per try would double the
    # calls); now that the filler is sized, place them by tokens, if that still fits.
    spots = _token_spots(draw, words[:lo], tokenizer)
    if spots is not None:
        trial = measure(lo, spots)
        if len(trial[2]) <= length:
            best = trial
    return best


# --- tokenizer ------------------------------------------------------------------------------

def _encode(tokenizer, text, **kwargs):
    if kwargs:
        try:
            return list(tokenizer(text, **kwargs).input_ids)
        except TypeError:  # a tokenizer without the option: its default will do
            pass
    return list(tokenizer(text).input_ids)


def _span(tokenizer, text, ids, start, end):
    """Positions of the tokens covering ``text[start:end]`` (see the module docstring)."""
    offsets = _offsets(tokenizer, text, ids)
    if offsets is not None:
        hit = [i for i, (s, e) in enumerate(offsets) if s < e and s < end and e > start]
        if hit:
            return np.arange(hit[0], hit[-1] + 1, dtype=np.int64)
    first = _common_prefix(ids, _encode(tokenizer, text[:start]))
    through = _encode(tokenizer, text[:end])
    common = _common_prefix(ids, through)
    last = common if common == len(through) else min(common + 1, len(ids))
    return np.arange(first, max(last, first + 1), dtype=np.int64)


def _offsets(tokenizer, text, ids=None):
    """Character offsets of ``tokenizer(text)`` (checked to be of ``ids``, if given), or None
    where the tokenizer cannot give them."""
    try:
        encoding = tokenizer(text, return_offsets_mapping=True)
    except (TypeError, NotImplementedError, ValueError):  # slow HF tokenizers: NotImplemented
        return None
    offsets = getattr(encoding, "offset_mapping", None)
    if offsets is None or len(offsets) != len(encoding.input_ids) or (
            ids is not None and list(encoding.input_ids) != list(ids)):
        return None
    return [(int(s), int(e)) for s, e in offsets]


def _common_prefix(a, b):
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


def _rng(task, seed, index, stream):
    entropy = [GENERATOR_VERSION, TASKS.index(task), seed, index, stream]
    return np.random.default_rng(np.random.SeedSequence(entropy))


def _check_int(name, value, least):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value}")

