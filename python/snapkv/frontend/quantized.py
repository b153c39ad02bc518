"""Projection weights kept as a GGUF file stores them, Q8_0 or Q4_1 (``weights="as-stored"``).

Q8_0 is blocks of 32 values along a row (the reduction of ``x @ W.T``): one f16 scale ``d``
and 32 int8 ``q``, the value ``d * q``. A module rewritten by ``snapkv-quantize-weights``
takes each such weight as two arguments, the int8 values ``[K, N]`` (``snapkv.quantized =
"q8_0"``) and the scales ``[K/32, N]`` in f32 (``"q8_0_scales"``), both transposed from the
checkpoint's ``[N, K]`` like the f32 weight they replace; with int8 activations
(``activations=i8``) the values come packed by 4 rows instead, ``[K/4, N, 4]``
(``"q8_0_packed"``, :func:`pack_rows`: what ``vpdpbusd`` reads, bound so once).

Q4_1 (the shipped SmolLM2 file's projections) is blocks of 32 with an f16 scale ``d``, an f16
min ``m`` and 16 bytes of 4-bit ``q`` (value j in the low nibble of byte j, value 16 + j in
its high nibble), the value ``q * d + m`` (in f32, as gguf-py and so our f32 checkpoint
dequantize it). The module takes three arguments: the bytes ``[K/2, N]`` (``"q4_1"``: per
block, its 16 bytes down the rows), and ``d`` and ``m`` ``[K/32, N]`` in f32
(``"q4_1_scales"``, ``"q4_1_mins"``).

:class:`QuantizedWeights` is the weight source that binds them: the tensors (read from the
GGUF file a checkpoint was converted from, :func:`from_gguf`, or made by :func:`quantize_q8_0`
and :func:`quantize_q4_1`) plus the checkpoint for every other weight.
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
Q4_1 = "q4_1"
# The GGML tensor types kept as stored, by the format snapkv-quantize-weights takes them in.
STORED_TYPES = {"Q8_0": Q8_0, "Q4_1": Q4_1}
WEIGHT_CHOICES = ("f32", "as-stored")
# The export dtypes Q8_0 weights go with (snapkv-quantize-weights takes f32 and bf16 matmuls).
STORED_DTYPES = ("f32", "bf16")
PASS = "--snapkv-quantize-weights"
# The activations of the Q8_0 products (every row) and the Q4_1 ones (a decode step's row):
# as computed (f32 or bf16), or quantized per block of 32 to int8 (llama.cpp's form; integer
# block sums, vpdpbusd on AVX512_VNNI).
ACTIVATION_CHOICES = ("float", "i8")


def pass_arg(activations: str = "float", formats: Optional[Mapping[str, str]] = None) -> str:
    """The snapkv-opt argument that takes a module's projection weights as Q8_0, or each in
    its format of `formats` ({weight name: "q8_0" or "q4_1"}: the most common one for every
    weight, the others named)."""
    if activations not in ACTIVATION_CHOICES:
        raise ValueError(f"activations must be one of {', '.join(ACTIVATION_CHOICES)}, "
                         f"got {activations!r}")
    formats = dict(formats or {})
    counts = {f: list(formats.values()).count(f) for f in sorted(set(formats.values()))}
    common = max(counts, key=lambda f: (counts[f], f == Q8_0)) if counts else Q8_0
    options = [f"format={common}"]
    others = sorted(f"{name}:{f}" for name, f in formats.items() if f != common)
    if others:
        options.append(f"weight-formats={','.join(others)}")
    if activations != "float":
        options.append(f"activations={activations}")
    return f"{PASS}={' '.join(options)}"

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
    format = Q8_0

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


@dataclasses.dataclass(frozen=True)
class Q41Tensor:
    """One Q4_1 weight in the checkpoint's layout: ``packed`` uint8 ``[N, K/2]`` (per block
    of 32, ggml's 16 bytes: value j in the low nibble of byte j, 16 + j in the high one),
    ``scales`` and ``mins`` f32 ``[N, K/32]`` (f16 values widened)."""
    packed: np.ndarray
    scales: np.ndarray
    mins: np.ndarray
    format = Q4_1

    def __post_init__(self):
        n, half = self.packed.shape
        blocks = (n, 2 * half // BLOCK)
        if self.packed.dtype != np.uint8 or half % (BLOCK // 2) or \
                self.scales.dtype != np.float32 or self.mins.dtype != np.float32 or \
                self.scales.shape != blocks or self.mins.shape != blocks:
            raise QuantizedError(f"a Q4_1 tensor is uint8 [N, K/2] with K a multiple of "
                                 f"{BLOCK} and f32 scales and mins [N, K/{BLOCK}]; got "
                                 f"{self.packed.dtype} {list(self.packed.shape)}, "
                                 f"{self.scales.dtype} {list(self.scales.shape)} and "
                                 f"{self.mins.dtype} {list(self.mins.shape)}")

    @classmethod
    def from_blocks(cls, raw: np.ndarray, rows: int) -> "Q41Tensor":
        """The tensor of GGUF Q4_1 bytes `raw` (20 per block: f16 d, f16 m, 16 of nibbles)
        of `rows` rows."""
        blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(rows, -1, 4 + BLOCK // 2)
        halves = blocks[:, :, :4].copy().view(np.float16).astype(np.float32)
        return cls(blocks[:, :, 4:].reshape(rows, -1).copy(), halves[:, :, 0].copy(),
                   halves[:, :, 1].copy())

    def nibbles(self) -> np.ndarray:
        """The 4-bit values ``q`` ``[N, K]`` (uint8)."""
        n = self.packed.shape[0]
        blocks = self.packed.reshape(n, -1, BLOCK // 2)
        return np.concatenate([blocks & 15, blocks >> 4], axis=2).reshape(n, -1)

    def dequantize(self) -> np.ndarray:
        """The f32 weight ``[N, K]``: ``q * d + m`` in f32, gguf-py's dequantization."""
        n = self.packed.shape[0]
        q = self.nibbles().reshape(n, -1, BLOCK).astype(np.float32)
        return (q * self.scales[:, :, None] + self.mins[:, :, None]).reshape(n, -1)

    def bound(self, part: str) -> np.ndarray:
        """The argument `part` as the module takes it: the bytes ``[K/2, N]`` (int8), or the
        scales or mins ``[K/32, N]``."""
        if part == Q4_1:
            return np.ascontiguousarray(self.packed.T).view(np.int8)
        return np.ascontiguousarray((self.scales if part == f"{Q4_1}_scales" else self.mins).T)


def quantize_q4_1(weight: np.ndarray) -> Q41Tensor:
    """`weight` ``[N, K]`` f32 quantized by gguf-py's reference Q4_1."""
    import gguf

    weight = np.asarray(weight, dtype=np.float32)
    if weight.ndim != 2 or weight.shape[1] % BLOCK:
        raise QuantizedError(f"Q4_1 needs rows of a multiple of {BLOCK} values, got "
                             f"{list(weight.shape)}")
    raw = gguf.quants.quantize(weight, gguf.GGMLQuantizationType.Q4_1)
    return Q41Tensor.from_blocks(raw, weight.shape[0])


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


def from_gguf(file: Path, config: Mapping, architecture: str) -> Dict[str, object]:
    """{checkpoint name: Q8Tensor or Q41Tensor} of every Q8_0 or Q4_1 projection (and
    ``token_embd``, the tied output projection) in GGUF `file`, in the checkpoint's row
    order."""
    import gguf

    reader = gguf.GGUFReader(str(file))
    out: Dict[str, object] = {}
    kinds = (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_1)
    for tensor in reader.tensors:
        if tensor.tensor_type not in kinds:
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
        heads = 0  # the rows un-permuted per head, or left as they are
        if architecture == "llama" and parts[2:3] in (["attn_q"], ["attn_k"]):
            heads = config["num_attention_heads"] if parts[2] == "attn_q" else \
                config.get("num_key_value_heads", config["num_attention_heads"])
        if tensor.tensor_type == gguf.GGMLQuantizationType.Q4_1:
            q41 = Q41Tensor.from_blocks(np.asarray(tensor.data), n)
            out[name] = Q41Tensor(*(_reverse_permute(rows, heads) if heads else rows
                                    for rows in (q41.packed, q41.scales, q41.mins)))
            continue
        blocks = np.asarray(tensor.data).reshape(n, k // BLOCK, 2 + BLOCK)
        scales = blocks[:, :, :2].copy().view(np.float16)[:, :, 0].astype(np.float32)
        values = blocks[:, :, 2:].copy().view(np.int8).reshape(n, k)
        if heads:
            values, scales = _reverse_permute(values, heads), _reverse_permute(scales, heads)
        out[name] = Q8Tensor(values, scales)
    return out


class QuantizedWeights:
    """A weight source: `tensors` ({checkpoint name: Q8Tensor or Q41Tensor}) for the
    arguments ``snapkv-quantize-weights`` made, `checkpoint` for every other weight."""

    def __init__(self, checkpoint, tensors: Mapping[str, object], source: str = ""):
        self.checkpoint = checkpoint
        self.tensors = dict(tensors)
        self.source = source

    @property
    def path(self):
        return self.checkpoint.path

    @property
    def formats(self) -> Dict[str, str]:
        """{name: "q8_0" or "q4_1"}: what snapkv-quantize-weights takes each weight as."""
        return {name: tensor.format for name, tensor in self.tensors.items()}

    def bind(self, ref, shape) -> np.ndarray:
        """The array of argument `ref` (a quantized WeightRef) of type `shape`."""
        tensor = self.tensors.get(ref.name)
        wanted = ref.quantized
        for suffix in ("_scales", "_mins", "_packed"):
            wanted = wanted.removesuffix(suffix)
        wanted = wanted.upper()
        if tensor is None:
            raise QuantizedError(f"{ref.name}: the module takes it as {wanted}, but "
                                 f"{self.source or 'the weights given'} holds no Q8_0 or "
                                 f"Q4_1 tensor of that name")
        if tensor.format.upper() != wanted:
            raise QuantizedError(f"{ref.name}: the module takes it as {wanted}, but "
                                 f"{self.source or 'the weights given'} holds it as "
                                 f"{tensor.format.upper()}")
        array = tensor.bound(ref.quantized)
        if tuple(array.shape) != tuple(shape):
            raise QuantizedError(f"{ref}: the {wanted} tensor gives {list(array.shape)}, the "
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
                    raise QuantizedError(f"{name}: the {self.tensors[name].format.upper()} "
                                         f"tensor of {self.source} does not "
                                         f"dequantize to the checkpoint's (a layout this "
                                         f"reader does not know)")


def as_stored(checkpoint, log: Optional[Callable[[str], None]] = None) \
        -> Optional[QuantizedWeights]:
    """The Q8_0 and Q4_1 weights of `checkpoint` when it was converted from a GGUF file
    (``snapkv import-gguf``) whose projections are all Q8_0 or Q4_1; None (its own weights
    then, said through `log`) otherwise."""
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
    others = sorted({kind for kind in projections.values() if kind not in STORED_TYPES})
    if others or not projections:
        say(f"--weights as-stored: {file.name} holds {'/'.join(others) or 'no'} projection "
            f"weights; only {' and '.join(STORED_TYPES)} ones are kept quantized (the "
            f"checkpoint's, in the --dtype, instead)")
        return None
    weights = QuantizedWeights(checkpoint,
                               from_gguf(file, checkpoint.config, marker.get("architecture")),
                               source=file.name)
    weights.check(["model.layers.0.self_attn.q_proj.weight",
                   "model.layers.0.self_attn.k_proj.weight"])
    kept = sorted(set(weights.formats.values()),
                  key=lambda f: -list(weights.formats.values()).count(f))
    counts = " and ".join(f"{list(weights.formats.values()).count(f)} {f.upper()}"
                          for f in kept)
    forms = {Q8_0: f"Q8_0: int8 values and a scale per {BLOCK}",
             Q4_1: f"Q4_1: 4-bit values, a scale and a min per {BLOCK}"}
    say(f"--weights as-stored: {counts} tensors of {file.name} kept quantized "
        f"({'; '.join(forms[f] for f in kept)})")
    return weights
