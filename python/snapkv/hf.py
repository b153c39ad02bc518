"""Your own model: a local HuggingFace checkpoint in, a compiled model with a SnapKV-compacted
KV cache out.

    import numpy as np
    from snapkv import hf

    full = hf.load("my-model/")                                    # the original model
    compact = hf.load("my-model/", hf.Compaction(window=32, capacity=256, gqa="mean"))
    ids = np.array([[1, 15043, 29892, ...]])
    out = compact.generate(ids, steps=16)    # tokens, logits, logical/physical lengths, caches
    logits, caches = compact.prefill(ids)    # or step by step: compact.decode(token, pos, caches)

The steps, each usable on its own:

1. :class:`~snapkv.frontend.checkpoint.Checkpoint` reads ``config.json`` and the safetensors
   headers (numpy only; refuses, with the reason, what it cannot use);
2. :func:`export` traces the architecture with torch.export and torch-mlir
   (:mod:`snapkv.frontend.hf_export`: needs torch, transformers, torch-mlir) into a module
   whose weights are function arguments; cached under ``~/.cache/snapkv/exports`` (keyed by
   the checkpoint's path, config and tensor layout, the options, the exporter's sources and
   the package versions), so only the first call needs torch;
3. :func:`rewrite` runs ``snapkv-compress-kv-cache`` (strict) on the layer functions;
4. :class:`~snapkv.runtime.CompiledModel` compiles the module (cached by its text, so
   every checkpoint of one architecture shares the library) and binds the weights, mapped
   from the safetensors files.

Everything stays local: nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

from . import interface, tools
from .frontend import quantized
from .frontend.checkpoint import Checkpoint, CheckpointError
from .runtime import DEFAULT_CFLAGS, CompiledModel, default_cache_dir
from .tools import ToolError

__all__ = ["Checkpoint", "CheckpointError", "Compaction", "Exported", "ExportOptions",
           "export", "extend_function", "layer_functions", "load", "quantize_weights",
           "rewrite"]

PREFILL_LAYER, DECODE_LAYER, EXTEND_LAYER = "prefill_layer", "decode_layer", "extend_layer"
EXPORT_PACKAGES = ("torch", "transformers", "torch-mlir")
_FRONTEND = Path(__file__).resolve().parent / "frontend"


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """``attention``: the HF attention implementation traced, ``sdpa`` (HF's default) or
    ``eager``; ``logits``: ``last`` (prefill returns the last row, ``[1, 1, V]``) or ``all``
    (``[1, L, V]``, e.g. for perplexity); ``extend``: also export ``@extend`` (a prompt chunk
    over the caches so far), which chunked prefill needs; ``dtype``: the element type of the
    weights, activations and K/V caches, ``f32`` (the default), ``bf16`` or ``f16`` (matmuls
    accumulate, softmax and RMSNorm compute in f32 as in HF's own model in that dtype; the
    logits are f32; weights stored otherwise are rounded to it when they are bound);
    ``batch``: N > 0 also exports ``@decode_batch``, one decode step of N sequences of
    different lengths (:meth:`~snapkv.runtime.CompiledModel.decode_batch`); a tuple of
    sizes, one step per size (a step of fewer sequences takes the smallest that fits)."""
    attention: str = "sdpa"
    logits: str = "last"
    extend: bool = False
    dtype: str = "f32"
    batch: Union[int, Tuple[int, ...]] = 0


@dataclasses.dataclass(frozen=True)
class Compaction:
    """The options of ``snapkv-compress-kv-cache`` (docs/semantics.md defines them).
    ``scoring`` other than ``votes`` is a comparison ranking (``prefix_votes``, ``recent``
    with ``sinks`` (None: the pass's default), ``random`` with ``seed``). The defaults are the
    pass's: kernel 15 and ``gqa="mean"``, not the published method's 5 and ``"expand"``
    (docs/eval.md, "The defaults")."""
    window: int = 32
    capacity: int = 1024
    kernel: int = 15
    pooling: str = "avg"
    gqa: str = "mean"
    order: str = "position"
    scoring: str = "votes"
    sinks: Optional[int] = None
    seed: int = 0
    # "pyramid" / "inverted-pyramid": per-layer, `capacity` on average; "adaptive": Ada-KV,
    # per head, `capacity` on average, each head keeping at least `floor` prefix positions.
    budget: str = "uniform"
    pyramid_beta: int = 20
    floor: int = 0
    # Chunked prefill (docs/semantics.md): the prompt fed `chunk` tokens at a time, the cache
    # compacted after each chunk; 0: one-shot. Needs a module exported with extend.
    chunk: int = 0
    # Decode-time compression: every `decode_interval` generated tokens the caches are
    # compacted back to `capacity` (CompiledModel.generate); 0: off. Needs extend too.
    decode_interval: int = 0
    # What decode-time compression compacts back to (0: `capacity`).
    decode_capacity: int = 0
    # Block-granular selection: whole blocks of `block` prefix positions (1: single ones).
    block: int = 1
    # The compacted cache's element type: "same" (the model's) or "i8" (int8 rows with a
    # per-token per-head f32 scale, docs/model-rewrite.md "An 8-bit cache").
    kv_dtype: str = "same"
    # Two-level chunked prefill: the chunks before the last compacted to `staging` rows
    # (>= capacity), ranked by `staging_scoring`; 0: off. Needs chunk. "carried-sum" /
    # "carried-norm_sum": sum / norm_sum with each staged row's score carried from chunk to
    # chunk (the pass's staging-carry).
    staging: int = 0
    staging_scoring: str = "sum"

    @property
    def extends(self) -> bool:
        """Whether the rewrite needs the extend function."""
        return bool(self.chunk or self.decode_interval)

    def pass_options(self) -> str:
        options = (f"window={self.window} capacity={self.capacity} kernel={self.kernel} "
                   f"pooling={self.pooling} gqa={self.gqa} order={self.order}")
        if self.budget == "adaptive":
            options += f" budget=adaptive floor={self.floor}"
        elif self.budget != "uniform":
            options += f" budget={self.budget} pyramid-beta={self.pyramid_beta}"
        if self.scoring != "votes":
            options += f" scoring={self.scoring}"
        if self.scoring == "recent" and self.sinks is not None:
            options += f" sinks={self.sinks}"
        if self.scoring == "random":
            options += f" seed={self.seed}"
        if self.chunk:
            options += f" chunk={self.chunk}"
        if self.decode_interval:
            options += f" decode-interval={self.decode_interval}"
        if self.decode_capacity:
            options += f" decode-capacity={self.decode_capacity}"
        if self.block != 1:
            options += f" block={self.block}"
        if self.kv_dtype != "same":
            options += f" kv-dtype={self.kv_dtype}"
        if self.staging:
            options += staging_options(self.staging, self.staging_scoring)
        return options


CARRIED = "carried-"


def staging_options(staging: int, scoring: str) -> str:
    """The pass options of two-level chunked prefill staged at `staging` rows by `scoring`
    (``carried-sum`` / ``carried-norm_sum``: that scoring with staging-carry)."""
    carry = scoring.startswith(CARRIED)
    return f" staging={staging} staging-scoring={scoring.removeprefix(CARRIED)}" + \
        (" staging-carry=true" if carry else "")


@dataclasses.dataclass(frozen=True)
class Exported:
    """An exported module: its file, text and metadata (``model.json``: the checkpoint, the
    config, ``max_position_embeddings`` (the positions it is exact for), the weight names,
    notes, versions)."""
    path: Path
    text: str
    meta: dict

    @property
    def checkpoint(self) -> Path:
        return Path(self.meta["checkpoint"])


def missing_export_packages():
    import importlib.util

    modules = {"torch": "torch", "transformers": "transformers", "torch-mlir": "torch_mlir"}
    return [name for name, module in modules.items() if importlib.util.find_spec(module) is None]


def _versions() -> dict:
    found = {}
    for name in EXPORT_PACKAGES + ("numpy",):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def _exporter_digest() -> str:
    digest = hashlib.sha256()
    for name in ("checkpoint.py", "export.py", "glue.py", "model.py", "hf_export.py"):
        digest.update((_FRONTEND / name).read_bytes())
    return digest.hexdigest()


def export_key(checkpoint: Checkpoint, options: ExportOptions) -> str:
    """What a cached export is named by (see :func:`export`)."""
    return hashlib.sha256(json.dumps([checkpoint.fingerprint(), str(checkpoint.path),
                                      dataclasses.asdict(options), _exporter_digest(),
                                      _versions()]).encode()).hexdigest()[:24]


def export(checkpoint: Union[Checkpoint, os.PathLike, str],
           options: ExportOptions = ExportOptions(), *, out: Optional[os.PathLike] = None,
           cache_dir: Optional[os.PathLike] = None, log=None) -> Exported:
    """The module of `checkpoint` (``@prefill`` / ``@decode`` and the layer functions, weights
    as arguments; see :mod:`snapkv.frontend.hf_export`).

    With `out`, written to ``<out>/model.mlir`` and ``<out>/model.json``; otherwise taken from
    (or stored in) the export cache (`cache_dir`, default ``~/.cache/snapkv/exports``, next to
    the runner's cache). Needs torch, transformers and torch-mlir unless it is cached."""
    if not isinstance(checkpoint, Checkpoint):
        checkpoint = Checkpoint(checkpoint)
    folder = Path(out) if out is not None else \
        (Path(cache_dir) if cache_dir is not None else default_cache_dir().parent / "exports") \
        / export_key(checkpoint, options)
    module, meta_file = folder / "model.mlir", folder / "model.json"
    if out is None and module.is_file() and meta_file.is_file():
        if log:
            log(f"exported module (cached): {module}")
        return Exported(module, module.read_text(), json.loads(meta_file.read_text()))
    missing = missing_export_packages()
    if missing:
        raise ToolError(f"exporting {checkpoint.path} needs {', '.join(missing)} "
                        f"(pip install -e 'python[frontend]')")
    from .frontend import hf_export

    text, meta = hf_export.export_text(
        checkpoint, hf_export.ExportOptions(options.attention, options.logits, options.extend,
                                            options.dtype, options.batch),
        log=log)
    hf_export.write(folder, text, meta)
    if log:
        log(f"exported module: {module}")
    return Exported(module, text, meta)


def layer_functions(text: str) -> Optional[Tuple[str, str]]:
    """``("prefill_layer", "decode_layer")`` when the module has one function per layer (as
    :func:`export` writes it), else None: the names ``snapkv-compress-kv-cache`` needs."""
    functions = interface.describe(text).functions
    return (PREFILL_LAYER, DECODE_LAYER) \
        if PREFILL_LAYER in functions and DECODE_LAYER in functions else None


def extend_function(text: str) -> Optional[str]:
    """``"extend_layer"`` when the module has a per-layer chunk function (:func:`export` with
    ``ExportOptions(extend=True)``), ``"extend"`` when it has a whole-model one, else None:
    what ``snapkv-compress-kv-cache chunk=N`` needs as ``extend-func``."""
    functions = interface.describe(text).functions
    return next((name for name in (EXTEND_LAYER, "extend") if name in functions), None)


def rewrite(text: str, compaction: Compaction = Compaction(), *, strict: bool = True,
            extra: Sequence[str] = ()) -> str:
    """`text` rewritten by ``snapkv-compress-kv-cache`` with `compaction` (on the layer
    functions when the module has them). With `strict`, a refusal is a
    :class:`tools.RewriteRefused`; any failure is a :class:`tools.ToolFailed` with
    snapkv-opt's diagnostics."""
    options = compaction.pass_options()
    layers = layer_functions(text)
    if layers:
        options += f" prefill-func={layers[0]} decode-func={layers[1]}"
    if compaction.extends:
        options += f" extend-func={extend_function(text) or 'extend'}"
    if strict:
        options += " strict=true"
    return tools.opt([f"--snapkv-compress-kv-cache={options}", *extra], text=text).stdout


def quantize_weights(text: str, activations: str = "float", formats=None) -> str:
    """`text` with its projection weights taken as Q8_0 (``snapkv-quantize-weights``), or
    each in its format of `formats` ({name: "q8_0" or "q4_1"}, ``QuantizedWeights.formats``);
    `activations` ``"i8"``: the products' activations quantized per block of 32 too (every
    row of a Q8_0 product, a decode step's row of a Q4_1 one)."""
    return tools.opt([quantized.pass_arg(activations, formats)], text=text).stdout


def load(checkpoint: Union[Checkpoint, os.PathLike, str],
         compaction: Optional[Compaction] = None, *,
         options: ExportOptions = ExportOptions(), cflags: Sequence[str] = DEFAULT_CFLAGS,
         cache_dir: Optional[os.PathLike] = None, verbose: bool = False,
         log=None, in_place: bool = True, weights: str = "f32",
         activations: str = "float") -> CompiledModel:
    """The compiled model of `checkpoint`: the original (full cache) without `compaction`,
    else rewritten with it. `weights`: ``"f32"`` (the checkpoint's tensors, in the export's
    dtype) or ``"as-stored"``: a checkpoint converted from a GGUF file whose projections
    are Q8_0 or Q4_1 (the shipped SmolLM2) keeps them as stored (int8 values and block
    scales; nibbles, block scales and mins), dequantized inside the matmuls
    (:mod:`snapkv.frontend.quantized`; any other checkpoint falls back to its f32 weights,
    said through `log`), with ``dtype`` f32 or bf16 (bf16 activations and caches; a
    prompt's products dequantize each weight to bf16). Its weights are bound from the
    checkpoint; its ``max_positions`` is the export's (``max_position_embeddings``, or a
    sliding window that is narrower). `cache_dir` is the runner's (compiled libraries);
    exports are cached next to it. `in_place`: decode writes its caches in place
    (``CompiledModel``). `activations` (with ``"as-stored"``): ``"float"``, or ``"i8"``:
    the activations quantized per block of 32 to int8 (scale max|x|/127) and multiplied as
    integers with the Q8_0 values (every row, a decode step's and a prompt's) or the Q4_1
    values (a decode step's row) (llama.cpp's form, ``vpdpbusd`` on AVX512_VNNI; different
    numerics, so never the default)."""
    if weights not in quantized.WEIGHT_CHOICES:
        raise ValueError(f"weights must be one of {', '.join(quantized.WEIGHT_CHOICES)}, "
                         f"got {weights!r}")
    if activations not in quantized.ACTIVATION_CHOICES:
        raise ValueError(f"activations must be one of "
                         f"{', '.join(quantized.ACTIVATION_CHOICES)}, got {activations!r}")
    if activations != "float" and weights != "as-stored":
        raise ValueError(f"activations={activations!r} quantizes the activations of Q8_0 "
                         f"and Q4_1 products: it goes with weights='as-stored'")
    if weights == "as-stored" and options.dtype not in quantized.STORED_DTYPES:
        raise ValueError(f"weights='as-stored' keeps Q8_0 or Q4_1 weights, whose products "
                         f"accumulate in f32: it goes with dtype "
                         f"{' or '.join(quantized.STORED_DTYPES)}, not {options.dtype}")
    if not isinstance(checkpoint, Checkpoint):
        checkpoint = Checkpoint(checkpoint)
    if compaction is not None and compaction.extends and not options.extend:
        options = dataclasses.replace(options, extend=True)
    exports = Path(cache_dir).parent / "exports" if cache_dir is not None else None
    exported = export(checkpoint, options, cache_dir=exports, log=log)
    text = exported.text if compaction is None else rewrite(exported.text, compaction)
    source = checkpoint
    if weights == "as-stored":
        stored = quantized.as_stored(checkpoint, log=log)
        if stored is not None:
            text, source = quantize_weights(text, activations, stored.formats), stored
    return CompiledModel(text, weights=source, cflags=cflags, cache_dir=cache_dir,
                         verbose=verbose, in_place=in_place,
                         max_positions=exported.meta.get("max_position_embeddings"))
