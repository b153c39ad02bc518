"""Tasks: what a prompt is as the evaluation runs it, and when its answer is right."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional

import numpy as np

from ..models import file_digest
from ..tasks import retrieval
from . import DEFAULT_WINDOW, EvalError

if TYPE_CHECKING:
    from .pipeline import Pipeline

# A bound on the greedy tokens a text task's sample asks for (its answer's tokens and a
# margin), for refusing lengths that would reach past the model's positions.
MAX_TEXT_ANSWER_TOKENS = 16


@dataclasses.dataclass
class EvalSample:
    """One prompt as the eval runs it: `ids` [L]; `steps` decode steps after prefill's token;
    `judge(tokens)` says whether the greedy tokens answer it; `positions`: the prompt
    positions that hold the answer (what ``answer_kept`` looks for); `spans`: (start, end,
    role) of each needle, for the plots; `answer`: what is expected (JSON)."""
    ids: np.ndarray
    index: int
    steps: int
    answer: object
    positions: np.ndarray
    judge: Callable[[List[int]], bool]
    spans: List[tuple]
    said: Callable[[List[int]], Optional[str]] = lambda tokens: None

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])


class RetrievalTask:
    """The synthetic retrieval task (:mod:`snapkv.tasks.retrieval`): right when the greedy
    tokens are exactly the answer's; ``answer_kept`` is the share of (layer, head) caches
    that hold every answer token."""
    default_window = DEFAULT_WINDOW

    def __init__(self, variant: str = retrieval.DEFAULT_VARIANT):
        self.variant = variant
        self.name = variant

    def key(self) -> dict:
        return dict(variant=self.variant, generator=retrieval.GENERATOR_VERSION)

    def min_length(self) -> int:
        return retrieval.min_length(self.variant)

    def max_new_tokens(self) -> int:
        return retrieval.VARIANTS[self.variant].answer_len[1]

    def check(self, pipeline: "Pipeline"):
        vocab = pipeline.checkpoint.config.get("vocab_size")
        if vocab is not None and vocab < retrieval.VOCAB_SIZE:
            raise EvalError(f"{pipeline.model_dir}: vocabulary of {vocab} ids, the retrieval "
                            f"task uses {retrieval.VOCAB_SIZE}")

    def sample(self, length: int, seed: int, index: int) -> EvalSample:
        return self.wrap(retrieval.generate(length, seed, self.variant, index))

    @staticmethod
    def wrap(sample) -> EvalSample:
        answer = sample.answer.tolist()
        return EvalSample(sample.ids, sample.index, len(answer) - 1, answer,
                          sample.value_positions, lambda tokens: list(tokens) == answer,
                          [(n.start, n.start + n.length, n.role) for n in sample.needles])

    @staticmethod
    def kept_share(sample: EvalSample, kept) -> float:
        return float(np.mean([np.isin(sample.positions, row).all()
                              for layer in kept for row in layer[0]]))


class TextTask:
    """A real-text task (:mod:`snapkv.tasks.text`: passkey, needle, multikey) tokenised with
    the checkpoint's own tokenizer: right when the answer string appears in the decoded
    greedy continuation; ``answer_kept`` is the mean share of the asked needle's tokens that
    a (layer, head) cache holds."""
    default_window = 32

    def __init__(self, name: str, checkpoint_dir: Path):
        from ..tasks import text

        if name not in text.TASKS:
            raise EvalError(f"unknown task {name!r} (choose from {', '.join(text.TASKS)})")
        self.name, self.directory, self._text = name, Path(checkpoint_dir), text

    def _tokenizer(self):
        from .. import tokenizer

        try:
            return tokenizer.load(self.directory)
        except tokenizer.TokenizerError as error:
            raise EvalError(str(error)) from None

    def key(self) -> dict:
        digest = hashlib.sha256()
        for name in sorted(p.name for p in self.directory.iterdir()
                           if p.name.startswith(("tokenizer", "special_tokens", "vocab"))):
            digest.update(name.encode() + file_digest(self.directory / name).encode())
        # The needle/multikey filler is this Python's own documentation (pydoc_data), which
        # differs between Python versions: its digest is part of what a prompt depends on.
        return dict(variant=f"text:{self.name}",
                    generator=[self._text.GENERATOR_VERSION, self._text.TASK_VERSIONS[self.name]],
                    tokenizer=digest.hexdigest(), prose=self._text.prose_digest())

    def min_length(self) -> int:
        return 0  # the generator refuses a length too short for its sentences, with the reason

    def max_new_tokens(self) -> int:
        return MAX_TEXT_ANSWER_TOKENS

    def check(self, pipeline: "Pipeline"):
        self._tokenizer()

    def sample(self, length: int, seed: int, index: int) -> EvalSample:
        from .. import tokenizer

        try:
            found = self._text.generate(self.name, length, seed, index, self._tokenizer())
        except ValueError as error:
            raise EvalError(str(error)) from None

        def said(tokens):
            return tokenizer.decode(self.directory, tokens)

        return EvalSample(np.asarray(found.ids, dtype=np.int64), index,
                          found.max_new_tokens - 1, found.answer,
                          np.asarray(found.needle_positions),
                          lambda tokens: self._text.correct(found, said(tokens)),
                          [(int(found.needle_positions.min()),
                            int(found.needle_positions.max()) + 1, "asked")], said)

    @staticmethod
    def kept_share(sample: EvalSample, kept) -> float:
        return float(np.mean([np.isin(sample.positions, row).mean()
                              for layer in kept for row in layer[0]]))
