"""Projection weights kept as GGUF Q8_0 stores them (``weights="as-stored"``).

Q8_0 is blocks of 32 values along a row (the reduction of ``x @ W.T``): one f16 scale ``d``
and 32 int8 ``q``, the value ``d * q``. A module rewritten by ``snapkv-quantize-weights``
takes each such weight as two arguments, the int8 values ``[K, N]`` (``snapkv.quantized =
"q8_0"``) and the scales ``[K/32, N]`` in f32 (``"q8_0_scales"``), both transposed from the
checkpoint's ``[N, K]`` like the f32 weight they replace; with int8 activations
(``activations=i8``) the values come packed by 4 rows instead, ``[K/4, N, 4]``
(``"q8_0_packed"``, :func:`pack_rows`: what ``vpdpbusd`` reads, bound so once).
:class:`QuantizedWeights` is the
weight source that binds them: the Q8_0 tensors (read from the GGUF file a checkpoint was
converted from, :func:`from_gguf`, or made by :func:`quantize_q8_0`) plus the checkpoint for
every other weight.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Dict, Mapping, Optional

import numpy as np

BLOCK = 32
Q8_0 = "q8_0"
Q8_0_SCALES = "q8_0_scales"
Q8_0_PACKED = "q8_0_packed"
# Rows per column of the packed values: vpdpbusd adds 4 adjacent byte products per i32 lane.
GROUP = 4
WEIGHT_CHOICES = ("f32", "as-stored")
# The export dtypes Q8_0 weights go with (snapkv-quantize-weights takes f32 and bf16 matmuls).
STORED_DTYPES = ("f32", "bf16")
PASS = "--snapkv-quantize-weights=format=q8_0"
# The activations of the Q8_0 products (every row): as computed (f32 or bf16), or quantized
# per block of 32 to int8 (llama.cpp's form; int8 x int8 block sums, vpdpbusd on AVX512_VNNI).
ACTIVATION_CHOICES = ("float", "i8")


def pass_arg(activations: str = "float") -> str:
    """The snapkv-opt argument that takes a module's projection weights as Q8_0."""
    if activations not in ACTIVATION_CHOICES:
        raise ValueError(f"activations must be one of {', '.join(ACTIVATION_CHOICES)}, "
                         f"got {activations!r}")
    return PASS if activations == "float" else f"{PASS} activations={activations}"

# GGUF tensor names (llama.cpp's) of the projections, and the checkpoint's names.
_PROJECTIONS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                "ffn_down": "mlp.down_proj"}


class QuantizedError(ValueError):
    """Q8_0 weights that cannot be used; the message says why."""


@dataclasses.dataclass(frozen=True)
class Q8Tensor:
    """One Q8_0 weight in the checkpoint's layout: ``values`` int8 ``[N, K]``, ``scales``
    f32 ``[N, K/32]`` (f16 values widened)."""
    values: np.ndarray
    scales: np.ndarray

    def __post_init__(self):
        n, k = self.values.shape
        if self.values.dtype != np.int8 or self.scales.dtype != np.float32 or \
                self.scales.shape != (n, k // BLOCK) or k % BLOCK:
            raise QuantizedError(f"a Q8_0 tensor is int8 [N, K] with K a multiple of {BLOCK} "
                                 f"and f32 scales [N, K/{BLOCK}]; got {self.values.dtype} "
                                 f"{list(self.values.shape)} and {self.scales.dtype} "
                                 f"{list(self.scales.shape)}")

    def dequantize(self) -> np.ndarray:
        """The f32 weight ``[N, K]`` (exact: an f16 scale times an int8 fits f32)."""
        n, k = self.values.shape
        blocks = self.values.reshape(n, k // BLOCK, BLOCK).astype(np.float32)
        return (blocks * self.scales[:, :, None]).reshape(n, k)

    def bound(self, part: str) -> np.ndarray:
        """The argument `part` (values, packed values or scales) as the module takes it:
        transposed, and packed by 4 rows for ``"q8_0_packed"``."""
        if part == Q8_0_PACKED:
            return pack_rows(self.values.T)
        return np.ascontiguousarray((self.values if part == Q8_0 else self.scales).T)


def pack_rows(values: np.ndarray) -> np.ndarray:
    """`values` ``[K, N]`` as ``[K/4, N, 4]``: ``out[i, n, r] = values[4 i + r, n]``
    (``linalg.pack`` with inner_dims_pos [0], inner_tiles [4])."""
    k, n = values.shape
    return np.ascontiguousarray(values.reshape(k // GROUP, GROUP, n).transpose(0, 2, 1))


def quantize_q8_0(weight: np.ndarray) -> Q8Tensor:
    """`weight` ``[N, K]`` f32 quantized as ggml's reference Q8_0 does: per block ``d =
    absmax / 127`` (stored as f16), ``q = round(x / d)``."""
    weight = np.asarray(weight, dtype=np.float32)
    n, k = weight.shape
    if k % BLOCK:
        raise QuantizedError(f"Q8_0 needs rows of a multiple of {BLOCK} values, got {k}")
    blocks = weight.reshape(n, k // BLOCK, BLOCK)
    d = np.abs(blocks).max(axis=2) / 127.0
    inverse = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    values = np.round(blocks * inverse[:, :, None]).astype(np.int8).reshape(n, k)
    return Q8Tensor(values, d.astype(np.float16).astype(np.float32))


def _reverse_permute(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp stores Llama's q/k projections with each head's rows interleaved for its
    rotary layout; this undoes it (what transformers' GGUF loader does)."""
    dim = rows.shape[0] // heads // 2
    return rows.reshape(heads, dim, 2, *rows.shape[1:]).swapaxes(2, 1).reshape(rows.shape)


def from_gguf(file: Path, config: Mapping, architecture: str) -> Dict[str, Q8Tensor]:
    """{checkpoint name: Q8Tensor} of every Q8_0 projection (and ``token_embd``, the tied
    output projection) in GGUF `file`, in the checkpoint's row order."""
    import gguf

    reader = gguf.GGUFReader(str(file))
    out: Dict[str, Q8Tensor] = {}
    for tensor in reader.tensors:
        if tensor.tensor_type != gguf.GGMLQuantizationType.Q8_0:
            continue
        parts = tensor.name.split(".")
        if tensor.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif tensor.name == "output.weight":
            name = "lm_head.weight"
        elif len(parts) == 4 and parts[0] == "blk" and parts[2] in _PROJECTIONS:
            name = f"model.layers.{parts[1]}.{_PROJECTIONS[parts[2]]}.weight"
        else:
            continue
        k, n = (int(d) for d in tensor.shape)
        blocks = np.asarray(tensor.data).reshape(n, k // BLOCK, 2 + BLOCK)
        scales = blocks[:, :, :2].copy().view(np.float16)[:, :, 0].astype(np.float32)
        values = blocks[:, :, 2:].copy().view(np.int8).reshape(n, k)
        if architecture == "llama" and parts[2:3] in (["attn_q"], ["attn_k"]):
            heads = config["num_attention_heads"] if parts[2] == "attn_q" else \
                config.get("num_key_value_heads", config["num_attention_heads"])
            values, scales = _reverse_permute(values, heads), _reverse_permute(scales, heads)
        out[name] = Q8Tensor(values, scales)
    return out


class QuantizedWeights:
    """A weight source: `tensors` ({checkpoint name: Q8Tensor}) for the arguments
    ``snapkv-quantize-weights`` made, `checkpoint` for every other weight."""

    def __init__(self, checkpoint, tensors: Mapping[str, Q8Tensor], source: str = ""):
        self.checkpoint = checkpoint
        self.tensors = dict(tensors)
        self.source = source

    @property
    def path(self):
        return self.checkpoint.path

    def bind(self, ref, shape) -> np.ndarray:
        """The array of argument `ref` (a quantized WeightRef) of type `shape`."""
        tensor = self.tensors.get(ref.name)
        if tensor is None:
            raise QuantizedError(f"{ref.name}: the module takes it as Q8_0, but "
                                 f"{self.source or 'the weights given'} holds no Q8_0 "
                                 f"tensor of that name")
        array = tensor.bound(ref.quantized)
        if tuple(array.shape) != tuple(shape):
            raise QuantizedError(f"{ref}: the Q8_0 tensor gives {list(array.shape)}, the "
                                 f"module takes {list(shape)}")
        return array

    def check(self, names):
        """A QuantizedError unless each of `names` dequantizes to the checkpoint's own f32
        tensor (the GGUF read back in the checkpoint's row order)."""
        for name in names:
            if name in self.tensors and name in self.checkpoint.tensors:
                mine = self.tensors[name].dequantize()
                theirs = np.asarray(self.checkpoint.array(name), dtype=np.float32)
                self.checkpoint.release(name)
                if mine.shape != theirs.shape or not np.array_equal(mine, theirs):
                    raise QuantizedError(f"{name}: the Q8_0 tensor of {self.source} does not "
                                         f"dequantize to the checkpoint's (a layout this "
                                         f"reader does not know)")


def as_stored(checkpoint, log: Optional[Callable[[str], None]] = None) \
        -> Optional[QuantizedWeights]:
    """The Q8_0 weights of `checkpoint` when it was converted from a GGUF file (``snapkv
    import-gguf``) whose projections are all Q8_0; None (its own weights then, said through
    `log`) otherwise."""
    from .. import models

    marker = models.import_marker(checkpoint.path)
    source = marker.get("source")
    say = log or (lambda message: None)
    if not source:
        say(f"--weights as-stored: {checkpoint.path} was not converted from a GGUF file: its "
            f"weights are used as they are")
        return None
    file = Path(source)
    if not file.is_file():
        raise QuantizedError(f"--weights as-stored: {file}, the GGUF file {checkpoint.path} "
                             f"was converted from, is missing")
    types = dict(models.gguf_metadata(file, tensor_types=True)[models.TENSOR_TYPES])
    projections = {name: kind for name, kind in types.items()
                   if name.split(".")[2:3] and name.split(".")[2] in _PROJECTIONS}
    others = sorted({kind for kind in projections.values() if kind != "Q8_0"})
    if others or not projections:
        say(f"--weights as-stored: {file.name} holds {'/'.join(others) or 'no'} projection "
            f"weights; only Q8_0 ones are kept quantized (the checkpoint's, in the --dtype, "
            f"instead)")
        return None
    weights = QuantizedWeights(checkpoint,
                               from_gguf(file, checkpoint.config, marker.get("architecture")),
                               source=file.name)
    weights.check(["model.layers.0.self_attn.q_proj.weight",
                   "model.layers.0.self_attn.k_proj.weight"])
    say(f"--weights as-stored: {len(weights.tensors)} Q8_0 tensors of {file.name} kept "
        f"quantized (int8 and a scale per {BLOCK})")
    return weights
