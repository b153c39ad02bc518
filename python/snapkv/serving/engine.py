"""Many sequences on one compiled model: :class:`Engine` (continuous batching by cache budget).

The engine loads a compiled model once (:mod:`.loading`) and serves any number of prompts:

* a sequence waits in a bounded queue (:class:`QueueFull` past ``max_queue``) until its
  cache fits in the budget (``cache_budget`` bytes of persistent K/V: the rows prefill keeps
  plus one row per token it may generate, summed over the running sequences);
* every :meth:`Engine.step` admits (prefills) at most one waiting sequence, then runs one
  decode step of every running sequence, so a new prompt is prefilled while the others
  decode; a sequence that ends (``max_tokens``, an end-of-sequence token, a stop string, or
  :meth:`Engine.cancel`) drops its cache and frees its share of the budget at once.

Decode is one compiled call per model and step for all the sequences running on it
(``@decode_batch``, :meth:`CompiledModel.decode_batch`): their caches are segments of one
:class:`~snapkv.runtime.KVPool` per model, each sequence's token at its own logical position,
so the weights are read once per step for all of them. A model without a batched decode for
its caches (``gqa=expand``, ``kv-dtype=i8``, decode-time compression, or ``batched=False``)
runs one ``@decode`` call per sequence (each cache its own buffers, written in place). Either
way a sequence's greedy tokens are those of its single-sequence run (``snapkv generate``,
:meth:`CompiledModel.generate`; docs/serving.md).

Sampling: ``temperature == 0`` is greedy (the argmax, first index on ties, as ``snapkv
generate``); otherwise softmax(logits / temperature), truncated to the smallest set of tokens
whose probability reaches ``top_p``, drawn from a per-sequence ``numpy.random.default_rng(seed)``
(so a seeded request draws the same tokens whatever runs beside it).

Thread safety: :meth:`submit`, :meth:`cancel` and the results may be used from any thread;
the model is only called from the thread that runs :meth:`step` (the background thread of
:meth:`start`, or the caller of :meth:`generate` / :meth:`stream` when none runs).
"""

from __future__ import annotations

import collections
import itertools
import queue
import resource
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Deque, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..runtime import CompiledCheckError, CompiledModel, KVPool, ResourceLimitError

MiB = 2 ** 20


class RequestError(ValueError):
    """A request the engine refuses (bad prompt, parameters, or one that can never fit);
    the message says what is wrong. The server answers it with HTTP 400."""


class QueueFull(RuntimeError):
    """The waiting queue is at its bound (the server answers 503)."""


class EngineStopped(RuntimeError):
    """The engine is draining or stopped and takes no new requests (503)."""


@dataclass(frozen=True)
class SamplingParams:
    """How one sequence is generated. ``max_tokens``: tokens generated at most (the first
    comes from prefill, each further one from a decode step); ``stop``: strings that end the
    text (not included in it); ``ignore_eos``: do not stop at the model's end-of-sequence
    tokens."""
    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    seed: Optional[int] = None
    stop: Tuple[str, ...] = ()
    ignore_eos: bool = False

    def check(self):
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or \
                self.max_tokens < 1:
            raise RequestError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not (isinstance(self.temperature, (int, float)) and 0 <= self.temperature <= 100):
            raise RequestError(f"temperature must be a number in [0, 100], got "
                               f"{self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise RequestError(f"top_p must be a number in (0, 1], got {self.top_p!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or
                                      not isinstance(self.seed, int) or self.seed < 0):
            raise RequestError(f"seed must be an integer >= 0, got {self.seed!r}")
        if any(not isinstance(s, str) or not s for s in self.stop) or len(self.stop) > 4:
            raise RequestError("stop must be at most 4 non-empty strings")


def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """The next token of `logits` [V] (see the module docstring)."""
    if params.temperature == 0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / params.temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if params.top_p < 1:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        keep = order[:int(np.searchsorted(cumulative, params.top_p)) + 1]
        kept = probs[keep] / probs[keep].sum()
        return int(keep[rng.choice(len(keep), p=kept)])
    return int(rng.choice(len(probs), p=probs))


@dataclass
class Delta:
    """What a step added to one sequence: new token ids and the text they completed (text
    that might still become a stop string is held back), and ``finish_reason`` on its last
    delta (``"length"``, ``"stop"``, ``"cancelled"`` or ``"error"``)."""
    tokens: List[int]
    text: str = ""
    finish_reason: Optional[str] = None
    error: Optional[str] = None


@dataclass
class Completion:
    """A finished sequence: its generated ``tokens`` (an end-of-sequence token that ended it
    not included), ``text`` (None without a tokenizer), ``finish_reason``, ``prompt_tokens``,
    ``cache_bytes`` (the K/V rows it held at the end) and ``cache_allocated`` (its buffers,
    room for the tokens it could still generate included), ``ttft_s`` (submission to its
    first token) and ``seconds`` (submission to its end)."""
    id: int
    tokens: List[int]
    text: Optional[str]
    finish_reason: str
    prompt_tokens: int
    cache_bytes: int
    cache_allocated: int
    ttft_s: Optional[float]
    seconds: float
    model: str
    error: Optional[str] = None

    def to_json(self) -> dict:
        return dict(id=self.id, tokens=self.tokens, text=self.text,
                    finish_reason=self.finish_reason, prompt_tokens=self.prompt_tokens,
                    completion_tokens=len(self.tokens), cache_bytes=self.cache_bytes,
                    cache_allocated_bytes=self.cache_allocated, ttft_s=self.ttft_s,
                    seconds=self.seconds, model=self.model, error=self.error)


class Request:
    """One sequence inside the engine: what :meth:`Engine.submit` returns (the scheduler's
    bookkeeping; :meth:`Engine.result` and :meth:`Engine.deltas` read it)."""

    def __init__(self, sid: int, ids: np.ndarray, params: SamplingParams, model: CompiledModel,
                 label: str, reserve: int):
        self.id, self.ids, self.params, self.model, self.label = sid, ids, params, model, label
        self.reserved = reserve        # budget bytes held while running
        self.tokens: List[int] = []    # generated (including the last one, not yet fed)
        self.cache = None
        self.rng = np.random.default_rng(params.seed)
        self.events: "queue.SimpleQueue[Delta]" = queue.SimpleQueue()
        self.emitted = 0               # characters of text already sent
        self.finish_reason: Optional[str] = None
        self.error: Optional[str] = None
        self.cancelled = False
        self.submitted = time.perf_counter()
        self.first_token: Optional[float] = None
        self.finished_at: Optional[float] = None
        self.text: Optional[str] = None
        self.done = threading.Event()
        self.completion: Optional[Completion] = None

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])


@dataclass
class Stats:
    """What the engine measured since it started (or since :meth:`Engine.reset_stats`)."""
    sequences: int = 0
    finished: int = 0
    peak_running: int = 0
    peak_cache_bytes: int = 0        # the most K/V buffer bytes held at once
    generated_tokens: int = 0
    decode_tokens: int = 0           # tokens from decode steps (not prefill's first)
    decode_calls: int = 0            # compiled decode calls (batched: several tokens each)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    started: Optional[float] = None
    ended: Optional[float] = None
    # The most recent sequences' times to first token (bounded: a server runs for long).
    ttft_s: Deque[float] = field(default_factory=lambda: collections.deque(maxlen=100_000))

    def to_json(self) -> dict:
        wall = (self.ended or time.perf_counter()) - self.started if self.started else 0.0
        return dict(sequences=self.sequences, finished=self.finished,
                    peak_concurrent_sequences=self.peak_running,
                    peak_cache_bytes=self.peak_cache_bytes,
                    generated_tokens=self.generated_tokens, decode_tokens=self.decode_tokens,
                    decode_calls=self.decode_calls,
                    wall_s=wall, prefill_s=self.prefill_s, decode_s=self.decode_s,
                    tokens_per_s=self.generated_tokens / wall if wall > 0 else None,
                    decode_tokens_per_s=self.decode_tokens / self.decode_s
                    if self.decode_s > 0 else None,
                    ttft_s=dict(median=float(np.median(self.ttft_s)),
                                max=float(max(self.ttft_s))) if self.ttft_s else None,
                    peak_rss_bytes=peak_rss())


class PoolSlot:
    """A sequence's cache as segments of a model's :class:`KVPool` (batched decode)."""

    def __init__(self, pool: KVPool, key):
        self.pool, self.key = pool, key

    @property
    def nbytes(self) -> int:
        return self.pool.nbytes(self.key)

    @property
    def allocated(self) -> int:
        return self.pool.allocated(self.key)

    def release(self):
        self.pool.remove(self.key)


def _allocated(cache) -> int:
    """Bytes of a sequence's cache buffers (a KVCache's room included; a functional decode's
    list of arrays)."""
    if cache is None:
        return 0
    return int(getattr(cache, "allocated", None) or sum(c.nbytes for c in cache))


def peak_rss() -> int:
    """This process's peak resident set (bytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


Prompt = Union[str, Sequence[int], np.ndarray, List[dict]]


@dataclass(frozen=True)
class Served:
    """A compiled model as the engine runs it: ``label`` names it in results; ``capacity``
    is the rows a prompt keeps per head after prefill (SnapKV's C; None: a full cache), and
    ``window`` the shortest prompt it takes (SnapKV's W; None: any)."""
    model: CompiledModel
    label: str = "model"
    capacity: Optional[int] = None
    window: Optional[int] = None


class Engine:
    """Continuous batching of many sequences over compiled models (module docstring).

    `served`: the default model (usually SnapKV-compacted, :class:`Served`); `models`: an
    optional callable ``settings -> Served`` for per-request settings (:meth:`submit`'s
    `settings`; :mod:`.loading` compiles them on first use); `short`: a callable giving the
    model for prompts shorter than a model's window (the full-cache one: with nothing to
    compact, SnapKV keeps every row, exactly as the full cache does); `tokenizer`: a
    checkpoint directory with tokenizer files (None: prompts and results are token ids);
    `eos`: end-of-sequence ids; `cache_budget`: bytes of K/V the running sequences may hold
    together; `max_queue`: waiting sequences at most; `batched`: advance the sequences of a
    model that has ``@decode_batch`` with one call per step (False: one call per sequence)."""

    def __init__(self, served: Served, *, tokenizer=None, eos: Sequence[int] = (),
                 cache_budget: int = 1024 * MiB, max_queue: int = 256,
                 models: Optional[Callable[[object], Served]] = None,
                 short: Optional[Callable[[], Served]] = None, batched: bool = True):
        if cache_budget <= 0:
            raise ValueError(f"the cache budget must be > 0 bytes, got {cache_budget}")
        if max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {max_queue}")
        self.served, self.tokenizer = served, tokenizer
        self.eos = frozenset(int(e) for e in eos)
        self.cache_budget, self.max_queue = int(cache_budget), int(max_queue)
        self._models, self._short = models, short
        self._waiting: List[Request] = []
        self._running: List[Request] = []
        self._ids = itertools.count()
        self._lock = threading.Lock()           # the queues and the budget
        self._step_lock = threading.Lock()      # one thread calls the models
        self._work = threading.Condition(self._lock)
        self._thread: Optional[threading.Thread] = None
        self._accepting = True
        self._stop = False
        self.reserved = 0
        self.stats = Stats()
        self.catalogue = None  # the ModelSet of loading.load_engine
        self.batched = batched
        self._pools = {}  # id(model) -> its KVPool (batched decode)

    @property
    def model(self) -> CompiledModel:
        return self.served.model

    @classmethod
    def load(cls, model=None, compaction=None, *, full_cache: bool = False,
             **options) -> "Engine":
        """An engine over `model` (a known model's name, a checkpoint directory or a module
        file; None: the bundled tiny Llama) compiled with SnapKV `compaction` (a
        :class:`~snapkv.hf.Compaction`; or its fields as keywords, e.g. ``capacity=256``;
        default: the pass's defaults), or with the full cache (`full_cache`). Other keywords
        go to :func:`~snapkv.serving.loading.load_engine` (``cache_budget_mb``,
        ``max_queue``, ``max_models``, ``tokenizer``, ``per_request``, ``log``)."""
        import dataclasses

        from .. import hf
        from .loading import load_engine

        fields = {f.name for f in dataclasses.fields(hf.Compaction)}
        settings = {k: options.pop(k) for k in list(options) if k in fields}
        if full_cache and (compaction is not None or settings):
            raise ValueError("full_cache takes no SnapKV settings")
        if compaction is None and not full_cache:
            compaction = hf.Compaction(**settings)
        elif settings:
            compaction = dataclasses.replace(compaction, **settings)
        return load_engine(model, None if full_cache else compaction, **options)

    # -- prompts -------------------------------------------------------------------------

    def encode(self, prompt: Prompt) -> np.ndarray:
        """int64 ids of `prompt`: token ids as they are, text through the checkpoint's
        tokenizer (as ``snapkv generate --text``), a list of chat messages (``{"role",
        "content"}``) through its chat template."""
        from . import text as text_mod

        if isinstance(prompt, str):
            ids = text_mod.encode(self.tokenizer, prompt)
        elif isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], dict):
            ids = text_mod.encode_chat(self.tokenizer, prompt)
        else:
            try:
                ids = np.asarray(prompt)
            except (TypeError, ValueError):
                raise RequestError("a prompt is a string, a list of token ids or a list of "
                                   "chat messages") from None
            if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
                raise RequestError("a prompt given as tokens must be a flat list of integers")
            ids = ids.astype(np.int64)
        if ids.size == 0:
            raise RequestError("the prompt has no tokens")
        return ids

    def decode_text(self, tokens: Sequence[int]) -> Optional[str]:
        from . import text as text_mod

        return None if self.tokenizer is None else text_mod.decode(self.tokenizer, tokens)

    # -- admission -----------------------------------------------------------------------

    def _row_bytes(self, model: CompiledModel) -> int:
        """K/V bytes of one more row of every cache head, all layers."""
        sig = model.prefill_signature.results[1:]
        if model.ragged:  # (keys [B, T, D], values [B, T, D], offsets [B, Hc + 1]) per layer
            total = 0
            for k, offsets in zip(sig[0::3], sig[2::3]):
                heads = offsets.shape[1]
                if heads is None or k.shape[2] is None:
                    raise RequestError("a ragged cache of unknown head count")
                total += 2 * (heads - 1) * k.shape[2] * k.dtype.itemsize
            return total
        return sum(t.shape[1] * t.shape[3] * t.dtype.itemsize for t in model.cache_types)

    def reservation(self, served: Served, length: int, max_tokens: int) -> int:
        """The K/V bytes a `length`-token prompt with `max_tokens` may hold: the rows prefill
        keeps (``min(L, C)`` compacted, ``L`` full) plus one per decode step."""
        kept = length if served.capacity is None else min(length, served.capacity)
        return self._row_bytes(served.model) * (kept + max_tokens - 1)

    def submit(self, prompt: Prompt, params: SamplingParams = SamplingParams(),
               settings=None) -> Request:
        """Queue one sequence; returns its handle (:meth:`result`, :meth:`deltas`).
        Raises :class:`RequestError` for a prompt or parameters that can never run (tokens
        out of the vocabulary, positions past the model's, a cache larger than the whole
        budget), :class:`QueueFull` when ``max_queue`` sequences wait, and
        :class:`EngineStopped` while draining."""
        params.check()
        ids = self.encode(prompt)
        served = self.served
        if settings is not None:
            if self._models is None:
                raise RequestError("this engine takes no per-request settings")
            served = self._models(settings)
        if served.window is not None and ids.shape[0] < served.window:
            if self._short is None:
                raise RequestError(f"the prompt has {ids.shape[0]} tokens, fewer than the "
                                   f"SnapKV window ({served.window})")
            served = self._short()
        model = served.model
        vocab = model.vocab_size
        if vocab is not None and (ids.min() < 0 or ids.max() >= vocab):
            raise RequestError(f"token ids must be in [0, {vocab}) for this model")
        try:
            model.check_limits(int(ids.shape[0]), params.max_tokens - 1)
        except ResourceLimitError as error:
            raise RequestError(str(error)) from None
        reserve = self.reservation(served, int(ids.shape[0]), params.max_tokens)
        if reserve > self.cache_budget:
            raise RequestError(
                f"this sequence needs {reserve / MiB:.1f} MiB of K/V cache ({ids.shape[0]} "
                f"prompt tokens, max_tokens {params.max_tokens}), more than the whole cache "
                f"budget ({self.cache_budget / MiB:.1f} MiB)")
        with self._lock:
            if not self._accepting:
                raise EngineStopped("the engine is shutting down")
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"{len(self._waiting)} requests are waiting (the queue's "
                                f"bound); try again later")
            seq = Request(next(self._ids), ids, params, model, served.label, reserve)
            self._waiting.append(seq)
            self.stats.sequences += 1
            if self.stats.started is None:
                self.stats.started = time.perf_counter()
            self._work.notify_all()
        return seq

    def cancel(self, seq: Request):
        """End `seq` at the next step (its cache freed then); a no-op once it finished."""
        seq.cancelled = True
        with self._lock:
            self._work.notify_all()

    # -- the scheduler -------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def held_bytes(self) -> int:
        """K/V buffer bytes the running sequences hold now."""
        return sum(_allocated(s.cache) for s in list(self._running))

    def step(self) -> bool:
        """Admit (prefill) at most one waiting sequence that fits, then one decode step of
        every running sequence. Returns whether there was anything to do."""
        with self._step_lock:
            admitted = None
            with self._lock:
                for seq in [s for s in self._waiting if s.cancelled]:
                    self._waiting.remove(seq)
                    self._finish(seq, "cancelled")
                if self._waiting and \
                        self.reserved + self._waiting[0].reserved <= self.cache_budget:
                    admitted = self._waiting.pop(0)
                    self.reserved += admitted.reserved
                    self._running.append(admitted)
                    self.stats.peak_running = max(self.stats.peak_running, len(self._running))
                batch = [s for s in self._running if s is not admitted]
            if admitted is not None:
                self._prefill(admitted)
            start = time.perf_counter()
            stepped = 0
            pooled = {}  # the sequences of each pool, advanced by one call
            for seq in batch:
                if seq.finish_reason is None:
                    if isinstance(seq.cache, PoolSlot):
                        pooled.setdefault(id(seq.cache.pool), []).append(seq)
                    else:
                        self._decode(seq)
                    stepped += 1
            for seqs in pooled.values():
                self._decode_batch(seqs)
            if stepped:
                self.stats.decode_s += time.perf_counter() - start
            self.stats.peak_cache_bytes = max(self.stats.peak_cache_bytes, self.held_bytes())
            with self._lock:
                for seq in [s for s in self._running if s.finish_reason is not None]:
                    self._running.remove(seq)
                    self.reserved -= seq.reserved
                    if isinstance(seq.cache, PoolSlot):
                        seq.cache.release()
                    seq.cache = None  # its rows go back
                if not self._running and not self._waiting:
                    self.stats.ended = time.perf_counter()
            return admitted is not None or stepped > 0

    def _prefill(self, seq: Request):
        if seq.cancelled:
            return self._finish(seq, "cancelled")
        start = time.perf_counter()
        try:
            logits, caches = seq.model.prefill(seq.ids[None])
            spare = seq.params.max_tokens - 1
            pool = self._pool(seq.model)
            if pool is not None:
                seq.model.add_to_pool(pool, seq.id, caches, spare)
                seq.cache = PoolSlot(pool, seq.id)
            else:
                seq.cache = seq.model.cache(caches, spare)
        except (CompiledCheckError, ValueError) as error:
            return self._finish(seq, "error", str(error))
        self.stats.prefill_s += time.perf_counter() - start
        seq.first_token = time.perf_counter()
        self.stats.ttft_s.append(seq.first_token - seq.submitted)
        self._append(seq, sample(logits[0, -1], seq.params, seq.rng))

    def _decode(self, seq: Request):
        if seq.cancelled:
            return self._finish(seq, "cancelled")
        fed = len(seq.tokens) - 1  # tokens already in the cache after the prompt
        try:
            logits, seq.cache = seq.model.decode(seq.tokens[-1], seq.length + fed, seq.cache)
            self.stats.decode_tokens += 1
            self.stats.decode_calls += 1
            token = sample(logits[0, 0], seq.params, seq.rng)
            # Decode-time compression (decode-interval) compacts when due, as generate() does.
            seq.cache, _ = seq.model.compress_if_due(
                seq.cache, seq.tokens + [token], seq.length,
                seq.params.max_tokens - len(seq.tokens) - 1)
        except (CompiledCheckError, ValueError) as error:
            return self._finish(seq, "error", str(error))
        self._append(seq, token)

    def _pool(self, model: CompiledModel) -> Optional[KVPool]:
        """`model`'s pool when its sequences decode batched (created on first use)."""
        if not self.batched or not model.batched or model.decode_compression:
            return None
        if id(model) not in self._pools:
            self._pools[id(model)] = model.pool()
        return self._pools[id(model)]

    def _decode_batch(self, seqs: List[Request]):
        """One decode step of `seqs` (the running sequences of one pool) in one call."""
        for seq in [s for s in seqs if s.cancelled]:
            seqs.remove(seq)
            self._finish(seq, "cancelled")
        if not seqs:
            return
        model, pool = seqs[0].model, seqs[0].cache.pool
        try:
            logits = model.decode_batch([s.tokens[-1] for s in seqs],
                                        [s.length + len(s.tokens) - 1 for s in seqs], pool,
                                        [s.id for s in seqs])
        except (CompiledCheckError, ValueError) as error:
            for seq in seqs:
                self._finish(seq, "error", str(error))
            return
        self.stats.decode_tokens += len(seqs)
        self.stats.decode_calls += len(model.batch_calls(len(seqs)))
        for seq, row in zip(seqs, logits):
            self._append(seq, sample(row, seq.params, seq.rng))

    def _append(self, seq: Request, token: int):
        """Record `token`, send what it adds, and end the sequence when it should."""
        if token in self.eos and not seq.params.ignore_eos:
            return self._finish(seq, "stop")
        seq.tokens.append(token)
        self.stats.generated_tokens += 1
        reason = "length" if len(seq.tokens) >= seq.params.max_tokens else None
        if self.tokenizer is None:
            seq.events.put(Delta([token]))
            if reason:
                self._finish(seq, reason)
            return
        from . import text as text_mod

        text = self.decode_text(seq.tokens)
        cut = text_mod.find_stop(text, seq.params.stop)
        if cut is not None:
            seq.events.put(Delta([token], text[seq.emitted:cut]))
            seq.emitted = cut
            seq.text = text[:cut]
            return self._finish(seq, "stop")
        safe = len(text) if reason else text_mod.safe_end(text, seq.params.stop)
        seq.events.put(Delta([token], text[seq.emitted:safe] if safe > seq.emitted else ""))
        seq.emitted = max(seq.emitted, safe)
        seq.text = text
        if reason:
            self._finish(seq, reason)

    def _finish(self, seq: Request, reason: str, error: Optional[str] = None):
        if seq.finish_reason is not None:
            return
        seq.finish_reason, seq.error = reason, error
        seq.finished_at = time.perf_counter()
        cache = seq.cache
        nbytes = 0 if cache is None else int(
            getattr(cache, "nbytes", None) or sum(c.nbytes for c in cache))
        allocated = _allocated(cache)
        text = seq.text if seq.text is not None else (
            None if self.tokenizer is None else self.decode_text(seq.tokens))
        # What was held back (a possible stop string's start, an unfinished character).
        tail = text[seq.emitted:] if text is not None else ""
        seq.completion = Completion(
            seq.id, list(seq.tokens), text, reason, seq.length, nbytes, allocated,
            None if seq.first_token is None else seq.first_token - seq.submitted,
            seq.finished_at - seq.submitted, seq.label, error)
        self.stats.finished += 1
        seq.events.put(Delta([], tail, reason, error))
        seq.done.set()

    # -- driving -------------------------------------------------------------------------

    def start(self):
        """Run the scheduler on a background thread (what the server does)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="snapkv-engine", daemon=True)
        self._thread.start()

    def _loop(self):
        while True:
            with self._lock:
                while not self._stop and not self._waiting and not self._running:
                    self._work.wait()
                if self._stop and not self._waiting and not self._running:
                    return
            try:
                self.step()
            except Exception as error:  # a bug: end what runs, say why, keep serving
                with self._lock:
                    broken = self._running + self._waiting
                    self._running, self._waiting, self.reserved = [], [], 0
                for seq in broken:
                    self._finish(seq, "error", f"internal error: {type(error).__name__}: "
                                               f"{error}")

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Take no new requests, finish the queued and running ones, stop the background
        thread. Returns whether everything finished within `timeout` seconds."""
        with self._lock:
            self._accepting = False
            self._stop = True
            self._work.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        deadline = None if timeout is None else time.perf_counter() + timeout
        while (self._waiting or self._running) and \
                (deadline is None or time.perf_counter() < deadline):
            self.step()
        return not (self._waiting or self._running)

    def _wait(self, seq: Request, timeout: Optional[float] = None) -> bool:
        """Block until `seq` has news: drive the scheduler here when no thread runs it."""
        if self._thread is not None:
            return seq.done.wait(timeout) if timeout is not None else seq.done.wait()
        if not seq.done.is_set():
            self.step()
        return seq.done.is_set()

    def result(self, seq: Request) -> Completion:
        """`seq`'s completion, once it finished (driving the scheduler if need be)."""
        while not seq.done.is_set():
            self._wait(seq)
        return seq.completion

    def deltas(self, seq: Request, timeout: Optional[float] = None) -> Iterator[Delta]:
        """`seq`'s deltas as they come, the last one with its ``finish_reason``. With a
        background thread, `timeout` seconds without news raise :class:`queue.Empty`."""
        while True:
            try:
                delta = seq.events.get_nowait()
            except queue.Empty:
                if self._thread is not None:
                    delta = seq.events.get(timeout=timeout)
                else:
                    self.step()
                    continue
            yield delta
            if delta.finish_reason is not None:
                return

    def generate(self, prompts: Sequence[Prompt],
                 params: Union[SamplingParams, Sequence[SamplingParams]] = SamplingParams(),
                 settings=None) -> List[Completion]:
        """Every prompt's :class:`Completion`, in order, run together under the budget."""
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling parameters")
        saved, self.max_queue = self.max_queue, max(self.max_queue, len(prompts))
        try:
            seqs = [self.submit(p, s, settings) for p, s in zip(prompts, params)]
        finally:
            self.max_queue = saved
        return [self.result(s) for s in seqs]

    def stream(self, prompt: Prompt, params: SamplingParams = SamplingParams(),
               settings=None) -> Iterator[Delta]:
        """One prompt's deltas as they are generated (others submitted before run beside
        it)."""
        seq = self.submit(prompt, params, settings)
        try:
            yield from self.deltas(seq)
        finally:
            if not seq.done.is_set():
                self.cancel(seq)

    def reset_stats(self):
        self.stats = Stats()
