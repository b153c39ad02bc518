"""Memory checks before a call (:class:`ResourceLimitError`).

Before a call, :class:`~snapkv.runtime.model.CompiledModel` refuses, with
:class:`ResourceLimitError`, an input whose largest intermediate tensor alone would exceed the
memory available (MemAvailable in ``/proc/meminfo``, or a smaller cgroup limit): tensor types
with dynamic dimensions are read from the function
(:func:`~snapkv.runtime.signatures.tensor_types`), every ``?`` counts as the prompt (or cache)
length, so ``tensor<1x4x?x?xf32>`` costs ``16 * L^2`` bytes. With ``max_positions`` (the
model's ``max_position_embeddings``, see :func:`~snapkv.runtime.metadata.max_positions_of`),
prompts and generations that would reach past it are refused too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Tuple

from .signatures import tensor_types

_BYTES = {"i1": 1, "i8": 1, "i16": 2, "f16": 2, "bf16": 2, "i32": 4, "f32": 4, "i64": 8,
          "f64": 8, "index": 8}


class ResourceLimitError(ValueError):
    """An input the compiled code would need more memory (or positions) for than there is."""



def growth(text: str, name: str) -> dict:
    """{k: (bytes per unit, type)}: for tensor types in ``@name`` and the functions it calls
    with k dynamic dimensions, the largest product of the static dimensions and the element
    size."""
    terms = {}
    for shape, elem_type, ttype in tensor_types(text, name):
        elem = _BYTES.get(elem_type)
        dynamic = shape.count(None)
        if not dynamic or elem is None:
            continue
        static = elem
        for d in shape:
            static *= 1 if d is None else d
        if static > terms.get(dynamic, (0, ""))[0]:
            terms[dynamic] = (static, ttype)
    return terms


def largest_tensor(terms: dict, length: int) -> Tuple[int, str]:
    """(bytes, type) of the largest tensor when every dynamic dimension is `length`."""
    best = (0, "")
    for dynamic, (static, ttype) in terms.items():
        best = max(best, (static * length ** dynamic, ttype))
    return best


def available_memory() -> Optional[int]:
    """Bytes this process may still allocate: MemAvailable, or a smaller cgroup v2 limit."""
    found = []
    try:
        meminfo = Path("/proc/meminfo").read_text()
        match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.M)
        if match:
            found.append(int(match.group(1)) * 1024)
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            found.append(max(0, int(limit) - int(used)))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def _gigabytes(count: int) -> str:
    return f"{count / 1e9:,.1f} GB" if count >= 1e8 else f"{count / 1e6:,.1f} MB"


# Tensors this small are not checked: reading the system's counters (about 0.1 ms) would be
# a visible part of every decode step, and no allocation of this size is what exhausts memory.
UNCHECKED_BYTES = 64 << 20


def check_memory(terms: dict, name: str, length: int, what: str):
    """Raise ResourceLimitError when the largest tensor of ``@name`` (`terms`, see
    :func:`growth`) at `length` alone needs more than the memory available (not checked
    below :data:`UNCHECKED_BYTES`). `what` names the length in the message."""
    need, ttype = largest_tensor(terms, length)
    if need <= UNCHECKED_BYTES:
        return
    have = available_memory()
    if have is not None and need > have:
        raise ResourceLimitError(
            f"@{name} on {what} needs at least {_gigabytes(need)} for one {ttype} alone "
            f"(each ? is {length:,}); {_gigabytes(have)} of memory is available")
