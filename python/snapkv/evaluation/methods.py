"""The methods the evaluation compares: each a set of overrides of the published SnapKV's
compaction options (:class:`snapkv.hf.Compaction`), and the budgets (shares of the prompt
length) they are run at."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Dict, Optional

from .. import hf

# budget=adaptive: the share of each head's C - W it keeps before the layer's budget is shared
# (kvpress's AdaKVPress alpha_safeguard).
ADAPTIVE_FLOOR_SHARE = 0.2

# What a method's options override: the published SnapKV (kernel 5, gqa expand), not the
# rewrite's defaults (kernel 15, gqa mean), so that a method's name says what it measures.
PUBLISHED = {"kernel": 5, "gqa": "expand"}


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    options: Optional[dict]    # overrides of the published SnapKV; None: the full cache
    summary: str

    @property
    def full(self) -> bool:
        return self.options is None

    def window(self, default: int) -> int:
        """The method's observation window: its own, else the evaluation's."""
        return (self.options or {}).get("window", default)

    @property
    def chunk(self) -> int:
        """Chunked prefill's chunk (0: one-shot). A chunked method runs its own compiled
        model (``@prefill`` on the first chunk, ``@extend`` on the others), not the shared
        prefill: its chunks after the first attend over the compacted cache."""
        return (self.options or {}).get("chunk", 0)

    @property
    def adaptive(self) -> bool:
        """Ada-KV's shared budget (``snapkv.select_adaptive``): the rewrite's selects with
        their heads sharing the layer's budget, the ragged caches decoded by the model
        compiled with ``budget=adaptive`` (each head its own rows, appended in place)."""
        return (self.options or {}).get("budget") == "adaptive"

    def floor(self, window: int, capacity: int) -> int:
        """Positions each head keeps before the rest is shared (adaptive only): kvpress's
        AdaKVPress default, ``alpha_safeguard = 0.2`` of the head's ``C - W``."""
        return int(ADAPTIVE_FLOOR_SHARE * (capacity - self.window(window)))

    @property
    def block(self) -> int:
        """Block-granular selection's block (1: single positions)."""
        return (self.options or {}).get("block", 1)

    def capacity(self, window: int, capacity: int) -> int:
        """The capacity the method's selects get: `capacity`, except that a block method
        keeps only whole blocks, so it gets the largest ``W + n * block`` not above it
        (never more than the budget; the cache bytes measured are the smaller ones)."""
        w = self.window(window)
        if self.block == 1 or capacity <= w:
            return capacity
        return w + (capacity - w) // self.block * self.block

    def compaction(self, window: int, capacity: int, seed: int) -> hf.Compaction:
        capacity = self.capacity(window, capacity)
        options = {**PUBLISHED, **(self.options or {})}
        options.pop("window", None)
        # Two-level chunked prefill: the staging capacity is a multiple of C.
        if factor := options.pop("staging_factor", 0):
            options["staging"] = factor * capacity
        if self.adaptive:
            options["floor"] = self.floor(window, capacity)
        if options.get("scoring") == "random":
            options["seed"] = seed
        return hf.Compaction(window=self.window(window), capacity=capacity, **options)

    def key(self, window: int, seed: int) -> str:
        """What results depend on, capacity aside (names may change, options do not)."""
        if self.full:
            return "full"
        compaction = self.compaction(window, 0, seed)
        if self.adaptive:  # the floor follows the capacity: its share is the option
            compaction = dataclasses.replace(compaction, budget="uniform", floor=0)
        options = compaction.pass_options()
        if self.adaptive:
            options += f" budget=adaptive floor-share={ADAPTIVE_FLOOR_SHARE}"
        if factor := (self.options or {}).get("staging_factor"):
            # Capacity 0 gives staging 0: name the factor and what ranks the staged rows.
            options += f" staging-factor={factor} staging-scoring={compaction.staging_scoring}"
        return options.replace("capacity=0 ", "", 1)


CHUNKED_PREFIX, BLOCK_PREFIX = "chunked-", "block-"


def chunked(n: int) -> Method:
    """Chunked prefill with N-token chunks and the rewrite's defaults."""
    return Method(f"chunked-{n}", {"gqa": "mean", "kernel": 15, "chunk": n},
                  f"chunked prefill, {n} tokens a chunk, the cache compacted back to C after "
                  f"each (the rewrite's defaults: gqa mean, kernel 15); compare "
                  f"snapkv-gqa-mean-k15")


# Two-level chunked prefill: ``chunked-N-mKc`` stages the chunks at M = K x C rows ranked by
# accumulated attention (``-norm``: normalised, OpenVINO's NORM_SUM; ``-carry``, ``-carry-norm``:
# each staged row's score carried from chunk to chunk, as H2O and OpenVINO do; ``-keydiff``:
# by the keys' distinctness, KeyDiff, no attention), then keeps C by the prompt's last window.
STAGED_SCORINGS = {"": "sum", "-norm": "norm_sum", "-votes": "votes", "-carry": "carried-sum",
                   "-carry-norm": "carried-norm_sum", "-keydiff": "keydiff"}


def staged(n: int, factor: int, scoring: str = "sum") -> Method:
    """Two-level chunked prefill: N-token chunks staged at ``factor`` x C rows."""
    suffix = {v: k for k, v in STAGED_SCORINGS.items()}[scoring]
    ranks = f"{scoring} scores of the chunk's queries"
    if scoring == "keydiff":
        ranks = "the keys' distinctness from their head's mean key (KeyDiff)"
    elif scoring.startswith(hf.CARRIED):
        ranks = f"{scoring.removeprefix(hf.CARRIED)} scores carried over the chunks so far"
    return Method(f"chunked-{n}-m{factor}c{suffix}",
                  {"gqa": "mean", "kernel": 15, "chunk": n, "staging_factor": factor,
                   "staging_scoring": scoring},
                  f"two-level chunked prefill, {n} tokens a chunk: the chunks before the last "
                  f"compacted to {factor} x C rows by {ranks}, "
                  f"then C kept by the prompt's last window (gqa mean, kernel 15); compare "
                  f"chunked-{n}")


def _staged_name(name: str) -> Optional[Method]:
    """``chunked-N-mKc[-norm|-votes|-carry|-carry-norm|-keydiff]`` as a method, or None."""
    parts = name[len(CHUNKED_PREFIX):].split("-", 2) if name.startswith(CHUNKED_PREFIX) \
        else []
    if len(parts) < 2 or not parts[1].startswith("m") or not parts[1].endswith("c"):
        return None
    n, factor = parts[0], parts[1][1:-1]
    scoring = STAGED_SCORINGS.get("-" + parts[2] if len(parts) == 3 else "")
    if not (n.isascii() and n.isdigit() and factor.isascii() and factor.isdigit()) \
            or scoring is None or int(n) < 1 or int(factor) < 1:
        return None
    return staged(int(n), int(factor), scoring)


def blocked(n: int) -> Method:
    """Block-granular SnapKV: whole blocks of N positions, with the rewrite's defaults."""
    return Method(f"{BLOCK_PREFIX}{n}", {"gqa": "mean", "kernel": 15, "block": n},
                  f"SnapKV keeping whole blocks of {n} positions ranked by their summed "
                  f"pooled votes (gqa mean, kernel 15; C rounded down to W + a multiple of "
                  f"{n}); compare snapkv-gqa-mean-k15")


_METHODS = [
    Method("full", None, "the original module: every prompt position cached"),
    Method("snapkv", {}, "SnapKV: votes of the window, avg pooling kernel 5, gqa expand"),
    Method("snapkv-gqa-mean", {"gqa": "mean"}, "SnapKV, votes averaged over a kv head's "
           "query heads (Hkv cache heads)"),
    Method("snapkv-gqa-max", {"gqa": "max"}, "SnapKV, votes maximised over a kv head's "
           "query heads (Hkv cache heads)"),
    Method("snapkv-k1", {"kernel": 1}, "SnapKV without pooling (kernel 1)"),
    Method("snapkv-k7", {"kernel": 7}, "SnapKV, pooling kernel 7"),
    Method("snapkv-k15", {"kernel": 15}, "SnapKV, pooling kernel 15"),
    Method("snapkv-k31", {"kernel": 31}, "SnapKV, pooling kernel 31"),
    Method("snapkv-gqa-mean-k7", {"gqa": "mean", "kernel": 7}, "SnapKV, gqa mean, pooling "
           "kernel 7"),
    Method("snapkv-gqa-mean-k15", {"gqa": "mean", "kernel": 15}, "SnapKV, gqa mean, "
           "pooling kernel 15"),
    Method("snapkv-maxpool", {"pooling": "max"}, "SnapKV, max pooling"),
    Method("snapkv-w64", {"window": 64}, "SnapKV with a 64-query observation window "
           "(kvpress's default), whatever --window says"),
    Method("snapkv-order-score", {"order": "score"}, "SnapKV, kept positions ordered by "
           "score"),
    Method("snapkv-prefix-softmax", {"scoring": "prefix_votes"}, "SnapKV with the window "
           "columns left out of the softmax denominator (as TRT-LLM does)"),
    Method("pyramid", {"budget": "pyramid"}, "PyramidKV: SnapKV's selection with per-layer "
           "budgets falling from the lowest layer to the highest (beta 20), the same total"),
    Method("pyramid-gqa-mean-k15", {"gqa": "mean", "kernel": 15, "budget": "pyramid"},
           "PyramidKV's per-layer budgets with the rewrite's defaults (gqa mean, kernel 15)"),
    Method("inverted-pyramid", {"budget": "inverted-pyramid"}, "PyramidKV's per-layer "
           "budgets the other way up: fewer positions in lower layers, more in upper ones"),
    Method("inverted-pyramid-gqa-mean-k15", {"gqa": "mean", "kernel": 15,
                                             "budget": "inverted-pyramid"},
           "the inverted pyramid with the rewrite's defaults (gqa mean, kernel 15)"),
    Method("ada-snapkv", {"budget": "adaptive"}, "Ada-KV: SnapKV's scores, one budget per "
           "layer shared by its heads (each first keeps 20 % of C - W), a ragged cache "
           "decoded by the PyTorch reference"),
    Method("ada-snapkv-gqa-mean", {"gqa": "mean", "budget": "adaptive"}, "Ada-KV's shared "
           "budget over gqa-mean scores (Hkv cache heads): kvpress's AdaKV(SnapKV)"),
    Method("ada-snapkv-gqa-mean-k15", {"gqa": "mean", "kernel": 15, "budget": "adaptive"},
           "Ada-KV's shared budget with the rewrite's defaults (gqa mean, kernel 15)"),
    *(chunked(n) for n in (512, 1024, 2048)),
    blocked(16),
    Method("streaming", {"scoring": "recent"}, "StreamingLLM: 4 attention sinks and the "
           "most recent positions"),
    Method("streaming-gqa-mean", {"scoring": "recent", "gqa": "mean"}, "StreamingLLM with "
           "Hkv cache heads (its positions do not depend on the head): the bytes of the "
           "gqa-mean methods at the same budget"),
    Method("random", {"scoring": "random"}, "uniformly drawn prefix positions plus the "
           "window (seeded with --seed)"),
]
METHODS: Dict[str, Method] = {m.name: m for m in _METHODS}


def method_named(name: str) -> Optional[Method]:
    """The method called `name`: one of :data:`METHODS`, ``chunked-N`` for any chunk N >= 1,
    ``chunked-N-mKc`` (two-level, staged at K x C rows; ``-norm`` / ``-votes`` / ``-carry`` /
    ``-carry-norm`` / ``-keydiff`` for the staging scoring) or ``block-N`` for any block N >= 1
    (the ones in METHODS are those ``all`` runs); None for another name."""
    if name in METHODS:
        return METHODS[name]
    for prefix, make in ((CHUNKED_PREFIX, chunked), (BLOCK_PREFIX, blocked)):
        digits = name[len(prefix):] if name.startswith(prefix) else ""
        if digits.isascii() and digits.isdigit() and int(digits) >= 1:
            return make(int(digits))
    return _staged_name(name)


DEFAULT_BUDGETS = (Fraction(1, 2), Fraction(1, 4), Fraction(1, 8), Fraction(1, 16))


def capacity_of(length: int, budget: Fraction) -> int:
    return int(length * budget)


def fraction_text(budget: Fraction) -> str:
    return f"{budget.numerator}/{budget.denominator}" if budget.numerator != 1 or \
        budget.denominator != 1 else "1"
