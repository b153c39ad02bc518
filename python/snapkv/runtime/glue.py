"""Running an entry point that only calls compiled functions (:class:`GlueRunner`): the
calls of a :class:`~snapkv.runtime.signatures.GlueFunction` made from Python, each to a
:class:`~snapkv.runtime.memref.CompiledFunction`.
"""

from __future__ import annotations

import time
from typing import List, Sequence

import numpy as np

from .. import interface
from .memref import _check_shape, check_buffer
from .signatures import GlueFunction, Signature, TensorType


class GlueRunner:
    """Runs a :class:`GlueFunction` on numpy arrays: each call goes to the compiled callee
    (:class:`CompiledFunction`), casts are checked against the shapes, weights (the trailing
    arguments) are bound once. Same interface as :class:`CompiledFunction`."""

    def __init__(self, glue: GlueFunction, sig: Signature, functions: dict,
                 bound: Sequence[np.ndarray] = ()):
        self.name, self.glue, self.signature = glue.name, glue, sig
        self._functions = functions
        self._free = len(sig.args) - len(bound)
        # Values are numbered: the arguments first, the weights last of them.
        self._bound = dict(zip(range(self._free, glue.arguments), bound))

    def _run(self, arrays, timed=None):
        if len(arrays) != self._free:
            raise ValueError(f"@{self.name} takes {self._free} arguments (and "
                             f"{len(self._bound)} bound weights), got {len(arrays)}")
        env = dict(self._bound)
        for i, (array, ttype) in enumerate(zip(arrays, self.signature.args)):
            if ttype.buffer:
                check_buffer(array, ttype, f"@{self.name} argument {i}")
            array = np.ascontiguousarray(array, dtype=ttype.dtype)
            _check_shape(array, ttype, f"@{self.name} argument {i}")
            env[i] = array
        for step in self.glue.steps:
            if step["op"] == "call":
                outs = self._functions[step["callee"]](*(env[o] for o in step["operands"]))
                env.update(zip(step["results"], outs))
            elif step["op"] == "slice":
                # Static offsets, sizes and strides; a rank-reducing slice reshapes.
                (operand,), (result,) = step["operands"], step["results"]
                to = TensorType.of(interface.TypeInfo.from_json(step["type"]))
                index = tuple(slice(o, o + n * s, s) for o, n, s in
                              zip(step["offsets"], step["sizes"], step["strides"]))
                env[result] = np.ascontiguousarray(env[operand][index]).reshape(
                    [d for d in to.shape])
            elif step["op"] == "cast":
                to = TensorType.of(interface.TypeInfo.from_json(step["type"]))
                (operand,), (result,) = step["operands"], step["results"]
                _check_shape(env[operand], to, f"@{self.name}: tensor.cast to {to}")
                env[result] = env[operand]
            else:
                return [env[o] for o in step["operands"]]
        raise AssertionError("unreachable: a glue function ends in return")

    def __call__(self, *arrays) -> List[np.ndarray]:
        return self._run(arrays)

    def time_call(self, *arrays, repeat: int = 1) -> List[float]:
        """Seconds of each of `repeat` runs (results copied out, as every call is)."""
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            self._run(arrays)
            times.append(time.perf_counter() - start)
        return times
