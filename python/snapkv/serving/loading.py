"""Loading a model for the engine: a known model's name (``snapkv models``), a checkpoint
directory or a module file, rewritten with SnapKV settings (:class:`~snapkv.hf.Compaction`)
or kept whole (the full cache), compiled once (the runner's cache makes later loads quick).

:class:`ModelSet` keeps one compiled model per setting, so requests may name their own
settings (the server's ``"snapkv"`` body field): a new setting is rewritten and compiled on
first use, at most ``max_models`` of them.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple, Union

from .. import hf, models, runtime, tools
from ..dtypes import ELEMENT_TYPES
from .engine import Engine, MiB, RequestError, Served

# Settings a request may change (the Compaction fields), with what each takes.
SETTINGS = dict(window=int, capacity=int, kernel=int, pooling=("avg", "max"),
                gqa=("expand", "mean", "max"), order=("position", "score"),
                budget=("uniform", "pyramid", "inverted-pyramid", "adaptive"), floor=int,
                pyramid_beta=int, chunk=int, decode_interval=int, decode_capacity=int)
FULL = "full"  # the setting of the full (uncompressed) cache
# The most sequences one batched decode call takes (@decode_batch; more take several calls).
DECODE_BATCH = 8
DEFAULT = hf.Compaction()


class LoadError(Exception):
    """A model that cannot be found, exported, rewritten or compiled (one-line message)."""


def bundled_model() -> Path:
    from ..cli.locate import FIXTURE, models_dir

    return models_dir() / FIXTURE


@dataclasses.dataclass
class Source:
    """Where a model comes from: its module text (before any rewrite), the checkpoint its
    weights come from (None for a module with its weights inside), its tokenizer directory,
    end-of-sequence ids and max positions."""
    label: str
    text: str
    checkpoint: object
    tokenizer: Optional[Path]
    eos: tuple
    max_positions: Optional[int]
    extend: bool = False


def _eos_of(directory: Path) -> tuple:
    """The end-of-sequence ids that config.json and generation_config.json name."""
    found = []
    for name in ("generation_config.json", "config.json"):
        try:
            value = json.loads((directory / name).read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and item not in found:
                found.append(item)
    return tuple(found)


def _has_tokenizer(directory: Path) -> bool:
    from ..tokenizer import TOKENIZER_FILES

    return any((directory / name).is_file() for name in TOKENIZER_FILES)


def _shown(path: Path) -> str:
    """`path` relative to the current directory when it is under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def decode_batch_sizes(batch: int) -> Tuple[int, ...]:
    """The batched decode steps exported for at most `batch` sequences a call: every power
    of two below it, and `batch`. A step of k running sequences takes the smallest that
    fits them, so it pads fewer than k rows (two sequences are not padded to eight)."""
    return tuple(sorted({1 << i for i in range(batch.bit_length()) if 1 << i < batch} |
                        {batch})) if batch else ()


def source(model: Union[str, Path, None], *, extend: bool = False,
           batch: int = DECODE_BATCH, dtype: Optional[str] = None,
           log: Optional[Callable[[str], None]] = None) -> Source:
    """The :class:`Source` of a MODEL argument (None: the bundled tiny Llama); a checkpoint
    is exported in `dtype` (None: f32) with batched decode steps for up to `batch` sequences
    (:func:`decode_batch_sizes`; 0: without); a module file must compute in `dtype` when
    it is given."""
    if model is None:
        model = bundled_model()
    given = str(model)
    try:
        path = models.resolve(given, log=log)
    except models.ModelError as error:
        raise LoadError(str(error)) from None
    label = models.name_of(path) or _shown(path)
    if path.is_dir():
        try:
            checkpoint = hf.Checkpoint(path)
            exported = hf.export(checkpoint, hf.ExportOptions(
                extend=extend, dtype=dtype or "f32", batch=decode_batch_sizes(batch) or 0),
                log=log)
        except (hf.CheckpointError, tools.ToolError) as error:
            raise LoadError(f"{given}: {error}") from None
        return Source(label, exported.text, checkpoint, path if _has_tokenizer(path) else None,
                      _eos_of(path), exported.meta.get("max_position_embeddings"), extend)
    if not path.is_file():
        raise LoadError(f"{given}: no such file or directory, and not a known model "
                        f"({', '.join(sorted(models.KNOWN))})")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise LoadError(f"{given}: {error}") from None
    checkpoint = None
    try:
        prefill = runtime.signature(text, "prefill")
        if prefill.weight_args:
            checkpoint = runtime.checkpoint_of(path)
    except (ValueError, tools.ToolError) as error:
        raise LoadError(f"{given}: {error}") from None
    held = prefill.results[1].elem if len(prefill.results) > 1 else None
    if dtype is not None and held != dtype:
        raise LoadError(f"{given}: the module computes in {held} and keeps the element type "
                        f"it was exported in, not {dtype}; give the checkpoint directory to "
                        f"export it in {dtype}")
    found = runtime.max_positions_of(path)
    directory = getattr(checkpoint, "path", None)
    return Source(label, text, checkpoint,
                  directory if directory and _has_tokenizer(Path(directory)) else None,
                  _eos_of(Path(directory)) if directory else (), found[0] if found else None,
                  extend)


def compaction_of(base: Optional[hf.Compaction], settings) -> Optional[hf.Compaction]:
    """The setting a request names: ``"full"`` (or ``{"full_cache": true}``) for the full
    cache, a dict of Compaction fields over `base` (the server's), or None for `base`."""
    if settings is None:
        return base
    if settings == FULL:
        return None
    if not isinstance(settings, dict):
        raise RequestError('"snapkv" must be "full" or an object of SnapKV settings')
    settings = dict(settings)
    if settings.pop("full_cache", False) is True:
        if settings:
            raise RequestError('"snapkv": full_cache takes no other settings')
        return None
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise RequestError(f'"snapkv": unknown setting {unknown[0]!r} (known: full_cache, '
                           f'{", ".join(SETTINGS)})')
    for name, value in settings.items():
        kind = SETTINGS[name]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or
                            not 0 <= value <= 1 << 24):
            raise RequestError(f'"snapkv".{name} must be an integer in [0, 16777216], got '
                               f'{value!r}')
        if isinstance(kind, tuple) and value not in kind:
            raise RequestError(f'"snapkv".{name} must be one of {", ".join(kind)}, got '
                               f'{value!r}')
    compaction = dataclasses.replace(base or hf.Compaction(), **settings)
    problem = check_compaction(compaction)
    if problem:
        raise RequestError(f'"snapkv": {problem}')
    return compaction


def check_compaction(c: hf.Compaction) -> Optional[str]:
    """What is wrong with a setting (what the CLI checks too), or None."""
    if c.window < 1:
        return f"window must be >= 1, got {c.window}"
    if c.capacity <= c.window:
        return f"capacity ({c.capacity}) must be greater than window ({c.window})"
    if c.kernel < 1 or c.kernel % 2 == 0:
        return f"kernel must be odd and >= 1, got {c.kernel}"
    if c.floor and c.budget != "adaptive":
        return "floor goes with budget adaptive"
    if c.floor > c.capacity - c.window:
        return f"floor must be at most capacity - window ({c.capacity - c.window})"
    if c.budget == "pyramid" and c.pyramid_beta < 1:
        return "pyramid_beta must be >= 1"
    if c.chunk and c.chunk < c.window:
        return f"chunk ({c.chunk}) must be at least window ({c.window})"
    if c.decode_capacity and not c.decode_interval:
        return "decode_capacity needs decode_interval"
    if c.decode_capacity and c.decode_capacity <= c.window:
        return f"decode_capacity must be greater than window ({c.window})"
    if (c.chunk or c.decode_interval) and (c.gqa == "expand" or c.budget != "uniform"):
        return "chunk and decode_interval need gqa mean or max and budget uniform"
    if c.kv_dtype != "same" and (c.chunk or c.decode_interval or c.budget == "adaptive"):
        return f"kv_dtype {c.kv_dtype} does not go with chunk, decode_interval or budget " \
            f"adaptive"
    return None


class ModelSet:
    """The compiled models of one source, one per setting (None: the full cache), compiled
    on first use; thread safe."""

    def __init__(self, src: Source, default: Optional[hf.Compaction], *,
                 max_models: int = 4, log: Optional[Callable[[str], None]] = None):
        self.source, self.default, self.max_models, self.log = src, default, max_models, log
        self._models: Dict[Optional[hf.Compaction], Served] = {}
        self._lock = threading.Lock()

    def get(self, compaction: Optional[hf.Compaction]) -> Served:
        with self._lock:
            if compaction in self._models:
                return self._models[compaction]
            if len(self._models) >= self.max_models:
                raise RequestError(f"this server compiles at most {self.max_models} SnapKV "
                                   f"settings; use one it has: "
                                   f"{'; '.join(describe(c) for c in self._models)}")
            served = self._compile(compaction)
            self._models[compaction] = served
            return served

    def _compile(self, compaction: Optional[hf.Compaction]) -> Served:
        src = self.source
        if compaction is not None and compaction.extends and not src.extend:
            raise RequestError("chunk and decode_interval need the model exported with "
                               "extend (start the server with such a setting)")
        if self.log:
            self.log(f"compiling {src.label} with {describe(compaction)} (cached after the "
                     f"first time) ...")
        try:
            text = src.text if compaction is None else hf.rewrite(src.text, compaction)
            model = runtime.CompiledModel(text, weights=src.checkpoint,
                                          max_positions=src.max_positions)
        except tools.RewriteRefused as error:
            raise LoadError(f"the rewrite refused {src.label}: {error}") from None
        except (tools.ToolError, ValueError) as error:
            raise LoadError(f"compiling {src.label} failed: {error}") from None
        if compaction is None:
            return Served(model, f"{src.label} (full cache)")
        # Every budget keeps C rows per head on average (pyramid: per layer; adaptive: per
        # head), which is what the admission estimate counts.
        return Served(model, f"{src.label} (snapkv C={compaction.capacity})",
                      capacity=compaction.capacity, window=compaction.window)

    def request(self, settings) -> Served:
        """The model of a request's settings (see :func:`compaction_of`)."""
        return self.get(compaction_of(self.default, settings))

    def labels(self):
        return [s.label for s in self._models.values()]


def describe(compaction: Optional[hf.Compaction]) -> str:
    if compaction is None:
        return "the full cache"
    return f"SnapKV {compaction.pass_options()}"


def load_engine(model: Union[str, Path, None] = None,
                compaction: Optional[hf.Compaction] = DEFAULT, *,
                cache_budget_mb: float = 1024, max_queue: int = 256, max_models: int = 4,
                tokenizer: Optional[Path] = None, per_request: bool = True,
                decode_batch: int = DECODE_BATCH, dtype: Optional[str] = None,
                log: Optional[Callable[[str], None]] = None) -> Engine:
    """An :class:`Engine` over `model` with `compaction` (None: the full cache), compiled
    now. `tokenizer`: a directory with tokenizer files, for a model that has none beside it.
    `per_request`: requests may name their own settings. `decode_batch`: the running
    sequences of a model advance together, at most `decode_batch` per compiled call
    (:func:`decode_batch_sizes`; 0: one call per sequence). `dtype`: the element type a
    checkpoint is exported in (``f32``, the default, ``bf16`` or ``f16``; weights,
    activations and K/V caches, so the budget holds twice the rows in 16 bits)."""
    if compaction is not None:
        problem = check_compaction(compaction)
        if problem:
            raise LoadError(problem)
    if isinstance(decode_batch, bool) or not isinstance(decode_batch, int) or \
            not 0 <= decode_batch <= 1024:
        raise LoadError(f"decode_batch must be an integer in [0, 1024], got {decode_batch!r}")
    if dtype is not None and dtype not in ELEMENT_TYPES:
        raise LoadError(f"dtype must be one of {', '.join(ELEMENT_TYPES)}, got {dtype!r}")
    src = source(model, extend=bool(compaction and compaction.extends), batch=decode_batch,
                 dtype=dtype, log=log)
    if tokenizer is not None:
        if not _has_tokenizer(Path(tokenizer)):
            raise LoadError(f"{tokenizer}: no tokenizer files there")
        src.tokenizer = Path(tokenizer)
    if src.tokenizer is not None:  # now, not on the first request (transformers loads slowly)
        from .. import tokenizer as tok

        try:
            tok.load(src.tokenizer)
        except tok.TokenizerError as error:
            raise LoadError(str(error)) from None
    if max_models < 1:
        raise LoadError("max_models must be >= 1")
    if cache_budget_mb <= 0:
        raise LoadError(f"the cache budget must be > 0 MB, got {cache_budget_mb}")
    catalogue = ModelSet(src, compaction, max_models=max(max_models, 2), log=log)
    try:
        served = catalogue.get(compaction)
    except RequestError as error:
        raise LoadError(str(error)) from None
    engine = Engine(served, tokenizer=src.tokenizer, eos=src.eos,
                    cache_budget=int(cache_budget_mb * MiB), max_queue=max_queue,
                    models=catalogue.request if per_request else None,
                    short=lambda: catalogue.get(None), batched=decode_batch > 0)
    engine.catalogue = catalogue
    return engine
