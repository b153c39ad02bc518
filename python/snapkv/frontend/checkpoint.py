"""A local HuggingFace checkpoint: ``config.json`` and safetensors as ``save_pretrained``
writes them (one ``model.safetensors``, or shards listed in ``model.safetensors.index.json``).

Needs numpy only. :class:`Checkpoint` reads the config and the safetensors headers, says
clearly what it cannot use, and hands out each tensor as a numpy array mapped from its file
(``mmap``, no copy; the compiled model reads the weights in place).

    from snapkv.frontend.checkpoint import Checkpoint
    ckpt = Checkpoint("my-model/")          # CheckpointError if it is not usable
    ckpt.family, ckpt.num_layers, ckpt.tensors["model.embed_tokens.weight"].shape
    ckpt.array("model.norm.weight")          # read-only numpy view of the file

Nothing here touches the network: a directory is read, or refused.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

# model_type of config.json -> the family's name in messages.
FAMILIES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
            "phi3": "Phi-3", "gemma": "Gemma"}
# Families that are close but refused, and why.
REFUSED_FAMILIES = {
    "gemma2": "Gemma-2 soft-caps its attention logits (attn_logit_softcapping), which "
              "snapkv.select does not compute, and alternates sliding-window layers",
    "gemma3": "Gemma-3 alternates sliding-window and global layers with different RoPE "
              "bases, and uses q/k norms and softcapping this exporter does not handle",
    "gemma3_text": "Gemma-3 alternates sliding-window and global layers with different RoPE "
                   "bases, which this exporter does not handle",
}
# safetensors dtype -> numpy dtype of the stored bits (bf16 has no numpy type: its bits).
DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
          "BOOL": np.bool_}
# The element type of a module's tensor<...> -> the safetensors dtype that is the same bits.
MLIR_DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "f64": "F64", "i64": "I64",
               "i32": "I32", "i16": "I16", "i8": "I8", "i1": "BOOL"}
# config.json keys that do not change what the exported module computes (its element type is
# the export's dtype option whatever the stored dtype; token ids and generation defaults are
# not part of it).
NOT_ARCHITECTURE = {"_name_or_path", "transformers_version", "dtype", "torch_dtype", "use_cache",
                    "bos_token_id", "eos_token_id", "pad_token_id", "architectures",
                    "initializer_range", "attention_dropout", "output_attentions",
                    "output_hidden_states", "return_dict", "tokenizer_class",
                    "generation_config", "task_specific_params"}
# Checkpoint tensors that are not parameters (old checkpoints store the RoPE frequencies).
NOT_PARAMETERS = ("rotary_emb.inv_freq",)
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
MAX_HEADER = 100 * 1024 * 1024  # what the safetensors library itself accepts


class CheckpointError(ValueError):
    """A directory that is not a checkpoint this project can use; the message says why."""


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: its file, dtype (safetensors spelling), shape and the byte
    range of its data in the file."""
    name: str
    file: Path
    dtype: str
    shape: Tuple[int, ...]
    offset: int
    nbytes: int


def read_header(path: Path) -> Tuple[Dict[str, dict], int]:
    """(the JSON header of a safetensors file, the offset where its data starts)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise CheckpointError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_HEADER or 8 + length > size:
                raise CheckpointError(f"{path}: not a safetensors file (header length "
                                      f"{length:,} does not fit the file of {size:,} bytes)")
            header = json.loads(handle.read(length))
    except OSError as error:
        raise CheckpointError(f"{path}: {error.strerror or error}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not JSON)") \
            from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not an object)")
    return header, 8 + length


def _tensors_of(path: Path) -> Dict[str, TensorInfo]:
    header, start = read_header(path)
    size = path.stat().st_size
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape = entry["dtype"], tuple(int(d) for d in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: tensor {name!r} has a malformed header entry "
                                  f"{entry!r}") from None
        if dtype not in DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {dtype}, which is not "
                                  f"read here (one of {', '.join(DTYPES)})")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * np.dtype(DTYPES[dtype]).itemsize or begin < 0 or \
                start + end > size:
            raise CheckpointError(f"{path}: tensor {name!r} ({dtype} {list(shape)}) does not "
                                  f"fit its byte range [{begin}, {end}) of the file")
        out[name] = TensorInfo(name, path, dtype, shape, start + begin, end - begin)
    return out


class Checkpoint:
    """A local HuggingFace checkpoint of a Llama-family causal LM (see the module docstring).

    Attributes: ``path``, ``config`` (config.json as a dict), ``model_type``, ``family`` (its
    name), ``num_layers``, ``tensors`` ({name: :class:`TensorInfo`}). Raises
    :class:`CheckpointError` with the reason for a directory it cannot use.
    """

    def __init__(self, path: os.PathLike):
        self.path = Path(path).expanduser()
        if not self.path.exists():
            raise CheckpointError(f"{self.path}: no such directory (a checkpoint is a local "
                                  f"directory written by save_pretrained; nothing is "
                                  f"downloaded)")
        if not self.path.is_dir():
            raise CheckpointError(f"{self.path}: not a directory (a checkpoint is a directory "
                                  f"with config.json and model.safetensors)")
        self.path = self.path.resolve()
        self.config = self._read_config()
        self.model_type = self.config.get("model_type")
        self._check_family()
        self.family = FAMILIES[self.model_type]
        self.num_layers = self._int("num_hidden_layers")
        self.tensors = self._read_tensors()
        self._maps: Dict[Path, mmap.mmap] = {}

    # -- config ---------------------------------------------------------------------------

    def _read_config(self) -> dict:
        config = self.path / "config.json"
        if not config.is_file():
            raise CheckpointError(f"{self.path}: no config.json (not a HuggingFace checkpoint "
                                  f"written by save_pretrained)")
        try:
            data = json.loads(config.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointError(f"{config}: not valid JSON ({error})") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{config}: not a JSON object")
        return data

    def _check_family(self):
        kind = self.model_type
        names = ", ".join(FAMILIES)
        if not isinstance(kind, str):
            raise CheckpointError(f"{self.path / 'config.json'} has no model_type (expected "
                                  f"one of {names})")
        if kind in REFUSED_FAMILIES:
            raise CheckpointError(f"model_type {kind!r} is not supported: "
                                  f"{REFUSED_FAMILIES[kind]}")
        if kind not in FAMILIES:
            raise CheckpointError(f"model_type {kind!r} is not a Llama-family model this "
                                  f"exporter supports ({names})")
        if self.config.get("auto_map"):
            raise CheckpointError("config.json has auto_map (custom modelling code); only "
                                  "transformers' own implementation of the family is used, "
                                  "and no code from a checkpoint is run")
        if self.config.get("quantization_config"):
            raise CheckpointError("the checkpoint is quantized (quantization_config); only "
                                  "f32, f16 and bf16 weights are supported")
        architectures = self.config.get("architectures") or []
        if architectures and not any(str(a).endswith("ForCausalLM") for a in architectures):
            raise CheckpointError(f"architectures {architectures} has no *ForCausalLM (a "
                                  f"language-model head is needed)")

    def _int(self, key: str) -> int:
        value = self.config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CheckpointError(f"config.json: {key} must be a positive integer, got "
                                  f"{value!r}")
        return value

    @property
    def max_position_embeddings(self) -> Optional[int]:
        value = self.config.get("max_position_embeddings")
        return value if isinstance(value, int) and value > 0 else None

    # -- tensors --------------------------------------------------------------------------

    def _read_tensors(self) -> Dict[str, TensorInfo]:
        single, index = self.path / SINGLE, self.path / INDEX
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
                files = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                raise CheckpointError(f"{index}: not a safetensors index ({error})") from None
        elif single.is_file():
            weight_map, files = None, [SINGLE]
        else:
            other = sorted(p.name for p in self.path.glob("*.bin")) + \
                sorted(p.name for p in self.path.glob("*.pt"))
            hint = (f"; {', '.join(other)} (pickled PyTorch) is not read: save with "
                    f"save_pretrained(..., safe_serialization=True), the default"
                    if other else "")
            raise CheckpointError(f"{self.path}: no {SINGLE} or {INDEX}{hint}")
        tensors: Dict[str, TensorInfo] = {}
        for name in files:
            shard = self.path / name
            if Path(name).name != name or not shard.is_file():
                raise CheckpointError(f"{self.path}: the safetensors shard {name!r} is missing")
            for tensor, info in _tensors_of(shard).items():
                if tensor in tensors:
                    raise CheckpointError(f"{self.path}: tensor {tensor!r} is stored twice")
                tensors[tensor] = info
        if weight_map is not None:
            missing = sorted(set(weight_map) - set(tensors))
            if missing:
                raise CheckpointError(f"{index} lists {missing[:3]} but the shards do not "
                                      f"hold them")
        return tensors

    def _map(self, file: Path) -> mmap.mmap:
        if file not in self._maps:
            with open(file, "rb") as handle:
                self._maps[file] = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        return self._maps[file]

    def array(self, name: str) -> np.ndarray:
        """Tensor `name` as a read-only numpy array over the mapped file (no copy). bf16 comes
        as its uint16 bits (see :func:`to_dtype`)."""
        info = self.tensors.get(name)
        if info is None:
            raise CheckpointError(f"{self.path}: no tensor {name!r} in the checkpoint")
        dtype = np.dtype(DTYPES[info.dtype])
        count = info.nbytes // dtype.itemsize
        array = np.frombuffer(self._map(info.file), dtype=dtype, count=count,
                              offset=info.offset).reshape(info.shape)
        if not array.flags.aligned:  # the compiled code may assume aligned elements
            array = array.copy()
        return array

    def release(self, name: str):
        """Drop this process's resident pages of tensor `name`'s bytes (the whole pages inside
        them). The mapping is read-only and file-backed, so a later read faults them in again
        from the page cache: call it once a copy of the tensor was made, so that the tensor
        does not count twice in the process's memory (a transposed weight: the transposed copy
        is what the compiled code reads)."""
        info = self.tensors.get(name)
        mapped = self._maps.get(info.file) if info is not None else None
        if mapped is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = -(-info.offset // page) * page
        end = (info.offset + info.nbytes) // page * page
        if end > start:
            mapped.madvise(mmap.MADV_DONTNEED, start, end - start)

    def describe(self) -> str:
        c = self.config
        return (f"{self.family} ({self.model_type}), {self.num_layers} layers, hidden "
                f"{c.get('hidden_size')}, {c.get('num_attention_heads')} query / "
                f"{c.get('num_key_value_heads', c.get('num_attention_heads'))} kv heads, "
                f"vocabulary {c.get('vocab_size')}, {len(self.tensors)} tensors")

    def architecture(self) -> dict:
        """config.json without the keys that do not change the exported module (see
        ``NOT_ARCHITECTURE``): two checkpoints with the same architecture can share one."""
        return {k: v for k, v in self.config.items() if k not in NOT_ARCHITECTURE}

    def check_architecture(self, expected: dict, module: str = "the module"):
        """CheckpointError unless :meth:`architecture` is `expected` (what an export recorded);
        the message names the keys that differ."""
        mine = self.architecture()
        keys = sorted(set(mine) | set(expected))
        differ = [k for k in keys if mine.get(k) != expected.get(k)]
        if differ:
            shown = "; ".join(f"{k}: {expected.get(k)!r} there, {mine.get(k)!r} here"
                              for k in differ[:4])
            raise CheckpointError(f"{self.path} is not the architecture {module} was exported "
                                  f"from ({shown}" + (" ..." if len(differ) > 4 else "") + ")")

    def fingerprint(self) -> str:
        """What an export depends on: config.json and every tensor's name, dtype and shape
        (not the values: they are not part of the module)."""
        import hashlib

        digest = hashlib.sha256(json.dumps(self.config, sort_keys=True).encode())
        for name in sorted(self.tensors):
            info = self.tensors[name]
            digest.update(f"{name} {info.dtype} {info.shape}\n".encode())
        return digest.hexdigest()


def to_dtype(array: np.ndarray, stored: str, wanted: str) -> np.ndarray:
    """`array` (safetensors dtype `stored`, bf16 as uint16 bits) as the module's element type
    `wanted` (``f32``...). The same bits are returned as they are (no copy); a widening from
    f16/bf16 to f32 is exact and copies; a module exported in bf16 or f16 (``--dtype``) takes
    f32, f16 and bf16 tensors rounded to nearest even (a copy, what torch's ``.to(dtype)``
    does); anything else is a ValueError."""
    from .. import dtypes

    if MLIR_DTYPES.get(wanted) == stored:
        return array
    if wanted == "f32" and stored == "F16":
        return array.astype(np.float32)
    if wanted == "f32" and stored == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    if wanted in ("bf16", "f16") and stored in ("F32", "F16", "BF16"):
        # Through f32, which holds every f16 and bf16 value exactly: one rounding.
        return dtypes.from_float32(to_dtype(array, stored, "f32"), wanted)
    raise ValueError(f"a {stored} tensor cannot be given to a {wanted} argument (only the "
                     f"exact widenings f16 -> f32 and bf16 -> f32, and roundings of f32, f16 "
                     f"and bf16 to a bf16 or f16 module, are made)")


class WeightRef(NamedTuple):
    """A weight argument: the checkpoint tensor it takes and whether it takes it transposed
    (``snapkv.transposed``: a 2-D tensor, ``[out, in]`` in the checkpoint, ``[in, out]`` in the
    module; the runner makes the transposed copy once). ``quantized``: which part of a Q8_0
    or Q4_1 weight the argument takes (``snapkv-quantize-weights``: ``"q8_0"``, the int8
    values, ``"q8_0_packed"``, the same packed by 4 rows, or ``"q8_0_scales"``; ``"q4_1"``,
    the nibble bytes, ``"q4_1_scales"`` or ``"q4_1_mins"``), else None."""

    name: str
    transposed: bool = False
    quantized: Optional[str] = None

    def __str__(self):
        text = f"{self.name} (transposed)" if self.transposed else self.name
        return f"{text} ({self.quantized})" if self.quantized else text


def as_ref(key) -> WeightRef:
    return key if isinstance(key, WeightRef) else WeightRef(key)


def bind_layout(ref: WeightRef, array: np.ndarray) -> np.ndarray:
    """`array` (the checkpoint's layout) as the argument `ref` takes it."""
    return np.ascontiguousarray(array.T) if ref.transposed else array


def weight_arrays(checkpoint: Checkpoint, wanted: Dict[object, Tuple[Tuple[int, ...], str]],
                  elsewhere=()) -> Tuple[Dict[object, np.ndarray], List[str]]:
    """({key: array} for `wanted` ({key: (shape, element type)}, each key a tensor name or a
    :class:`WeightRef`), notes). Checks each tensor's shape against the module's and converts
    f16/bf16 to f32 where the module wants f32, or rounds to the bf16/f16 a module exported
    with that dtype wants (a copy; noted); a transposed weight is a
    transposed copy; everything else is mapped, not copied. The mapped pages a copy was made
    from are released (:meth:`Checkpoint.release`). A missing tensor or a shape or dtype that
    does not fit is a CheckpointError that names it. `elsewhere`: tensor names the module
    takes from another source (Q8_0 weights), not unused."""
    arrays, problems, converted = {}, [], []
    names = {as_ref(key).name for key in wanted} | set(elsewhere)
    missing = sorted(name for name in names if name not in checkpoint.tensors)
    if missing:
        raise CheckpointError(f"{checkpoint.path}: {len(missing)} tensor(s) the module needs are "
                              f"not in the checkpoint: {', '.join(missing[:4])}"
                              + (" ..." if len(missing) > 4 else ""))
    unused = [name for name in checkpoint.tensors
              if name not in names and not name.endswith(NOT_PARAMETERS)]
    if unused:
        raise CheckpointError(f"{checkpoint.path} holds {len(unused)} tensor(s) the module does "
                              f"not take ({', '.join(sorted(unused)[:3])}"
                              + (" ..." if len(unused) > 3 else "")
                              + "): it is not the architecture the module was exported from")
    for key, (shape, elem) in wanted.items():
        ref = as_ref(key)
        info = checkpoint.tensors[ref.name]
        stored = tuple(info.shape)[::-1] if ref.transposed else tuple(info.shape)
        if ref.transposed and len(info.shape) != 2:
            problems.append(f"{ref.name}: the module takes it transposed, but the checkpoint "
                            f"holds {list(info.shape)} (not 2-D)")
            continue
        if stored != tuple(shape):
            problems.append(f"{ref}: the checkpoint holds {list(info.shape)}, the module "
                            f"takes {list(shape)}")
            continue
        try:
            mapped = checkpoint.array(ref.name)
            arrays[key] = bind_layout(ref, to_dtype(mapped, info.dtype, elem))
        except ValueError as error:
            problems.append(f"{ref.name}: {error}")
            continue
        # A copy (transposed, widened): the mapped pages it was read from are not needed, and
        # would otherwise stay resident next to it (the weights twice in a process's peak).
        if not np.may_share_memory(arrays[key], mapped):
            checkpoint.release(ref.name)
        if MLIR_DTYPES.get(elem) != info.dtype:
            converted.append(ref.name)
    if problems:
        raise CheckpointError(f"{checkpoint.path} does not fit the module: "
                              + "; ".join(problems[:4])
                              + (f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""))
    notes = []
    if converted:
        kinds = sorted({checkpoint.tensors[n].dtype for n in converted})
        into = sorted({wanted[key][1] for key in wanted if as_ref(key).name in converted})
        notes.append(f"{len(converted)} {'/'.join(kinds)} tensors converted to "
                     f"{'/'.join(into)} (copies; the others are mapped from the files)")
    return arrays, notes
