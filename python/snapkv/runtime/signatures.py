"""What the runtime knows of a module, all from the compiler's description of it
(:func:`snapkv.interface.describe`: ``snapkv-opt --snapkv-describe-module``): argument and
result types (:class:`TensorType`, :class:`Signature`, :func:`signature`), which functions a
function calls (:func:`callees`), the tensor types in a function and its callees
(:func:`tensor_types`, what :func:`~snapkv.runtime.limits.growth` estimates memory from) and
entry points that only call other functions (:class:`GlueFunction`, :func:`glue_function`,
:func:`without_glue`, which ``snapkv-drop-glue`` erases). No MLIR text is parsed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import interface, tools
from ..frontend.checkpoint import WeightRef

# The element types a compiled function can take or return, as numpy stores them.
_ELEMENTS = {
    "f32": np.float32, "f64": np.float64, "f16": np.float16,
    "bf16": np.uint16,  # bf16 bits
    "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
    "i1": np.bool_,  # memref<i1> elements are one byte each
}


@dataclass(frozen=True)
class TensorType:
    """A ranked tensor type; ``None`` for a dynamic dimension. ``buffer``: a memref
    argument, which the function writes in place (the caller's array is passed as it is,
    never a copy)."""
    shape: Tuple[Optional[int], ...]
    elem: str
    buffer: bool = False

    @classmethod
    def of(cls, info: interface.TypeInfo) -> "TensorType":
        """The type the compiler described (a ValueError unless it is a ranked tensor or an
        identity-layout memref of an element type the runtime can pass)."""
        if not info.is_tensor:
            raise ValueError(f"unsupported type {info.text!r} (ranked tensors and memrefs "
                             f"only)")
        if info.element not in _ELEMENTS:
            raise ValueError(f"unsupported element type {info.element!r} in {info.text!r}")
        return cls(info.shape, info.element, info.memref)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(_ELEMENTS[self.elem])

    def __str__(self):
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"{'memref' if self.buffer else 'tensor'}<{dims}{self.elem}>"


@dataclass(frozen=True)
class Signature:
    args: Tuple[TensorType, ...]
    results: Tuple[TensorType, ...]
    # Per argument, the checkpoint tensor it takes (its `snapkv.weight` attribute, and
    # `snapkv.transposed`), or None.
    weights: Tuple[Optional[WeightRef], ...] = ()

    @property
    def inputs(self) -> Tuple[TensorType, ...]:
        """The arguments that are not weights (weights come after them)."""
        return tuple(t for t, w in zip(self.args, self.weights or (None,) * len(self.args))
                     if w is None)

    @property
    def weight_args(self) -> List[Tuple[WeightRef, TensorType]]:
        """(the checkpoint tensor it takes, type) of each weight argument, in order."""
        return [(w, t) for t, w in zip(self.args, self.weights) if w is not None]


def signature(text: str, name: str) -> Signature:
    """Argument and result types of ``func.func @name`` in `text`, and which arguments are
    weights (``{snapkv.weight = "<tensor name>"}``, as ``snapkv export --hf`` writes them)."""
    function = interface.describe(text).function(name)
    if function.external:
        raise ValueError(f"@{name} has no body (a declaration?)")
    return Signature(
        tuple(TensorType.of(a.type) for a in function.arguments),
        tuple(TensorType.of(r) for r in function.results),
        tuple(WeightRef(a.weight, a.transposed, a.quantized) if a.weight is not None else None
              for a in function.arguments))


def callees(text: str, name: str) -> List[str]:
    """The functions ``@name`` calls, directly or not (each once, in order of discovery)."""
    return interface.describe(text).reachable(name)


def tensor_types(text: str, name: str) -> List[Tuple[Tuple[Optional[int], ...], str, str]]:
    """(shape, element type, type text) of each distinct ranked tensor type of a value in
    ``@name`` and the functions it calls (what the memory estimate scans)."""
    described = interface.describe(text)
    found = {}
    for function in [name, *described.reachable(name)]:
        for info in described.function(function).tensor_types:
            if info.is_tensor and info.shape:
                found.setdefault(info.text, (info.shape, info.element, info.text))
    return list(found.values())


# ---------------------------------------------------------------------------------------------
# Entry points that only call: run by the runner, not compiled

@dataclass(frozen=True)
class GlueFunction:
    """An entry point whose body is only ``func.call``, ``tensor.cast``, static
    ``tensor.extract_slice`` and ``return`` (what ``snapkv export --hf`` writes, before and
    after the model rewrite and ``snapkv-append-in-place``), as the compiler
    described it: its number of arguments and its steps over numbered values (the
    arguments are 0..n-1, then each result as it is defined)."""
    name: str
    arguments: int
    steps: Tuple[dict, ...]  # {"op": "call", "callee", "operands", "results"} |
    #                          {"op": "cast", "operands", "results", "type"} |
    #                          {"op": "slice", "operands", "results", "offsets", "sizes",
    #                           "strides", "type"} |
    #                          {"op": "return", "operands"}

    @property
    def callees(self) -> List[str]:
        return list(dict.fromkeys(s["callee"] for s in self.steps if s["op"] == "call"))


def glue_function(text: str, name: str) -> Optional[GlueFunction]:
    """@name as a :class:`GlueFunction`, or None if it is missing or its body holds anything
    else."""
    function = interface.describe(text).functions.get(name)
    if function is None or not function.glue or function.glue[-1]["op"] != "return":
        return None
    return GlueFunction(name, len(function.arguments), function.glue)


def without_glue(text: str, glue: Sequence[GlueFunction]) -> str:
    """`text` without the glue functions, and the functions they call made public (their C
    interfaces are what the runner calls): ``snapkv-drop-glue``."""
    names = ",".join(g.name for g in glue)
    return tools.opt([f"--snapkv-drop-glue=functions={names}"], text=text).stdout
