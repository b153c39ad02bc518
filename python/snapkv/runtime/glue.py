"""Running an entry point that only calls compiled functions (:class:`GlueRunner`): the
calls of a :class:`~snapkv.runtime.signatures.GlueFunction` made from Python, each to a
:class:`~snapkv.runtime.memref.CompiledFunction`.
"""

from __future__ import annotations

import time
from typing import List, Sequence

import numpy as np

from .memref import _check_shape
from .signatures import GlueFunction, Signature


class GlueRunner:
    """Runs a :class:`GlueFunction` on numpy arrays: each call goes to the compiled callee
    (:class:`CompiledFunction`), casts are checked against the shapes, weights (the trailing
    arguments) are bound once. Same interface as :class:`CompiledFunction`."""

    def __init__(self, glue: GlueFunction, sig: Signature, functions: dict,
                 bound: Sequence[np.ndarray] = ()):
        self.name, self.glue, self.signature = glue.name, glue, sig
        self._functions = functions
        free = len(sig.args) - len(bound)
        self._bound = dict(zip(glue.args[free:], bound))
        self._free = glue.args[:free]

    def _run(self, arrays, timed=None):
        if len(arrays) != len(self._free):
            raise ValueError(f"@{self.name} takes {len(self._free)} arguments (and "
                             f"{len(self._bound)} bound weights), got {len(arrays)}")
        env = dict(self._bound)
        for i, (name, array, ttype) in enumerate(zip(self._free, arrays, self.signature.args)):
            array = np.ascontiguousarray(array, dtype=ttype.dtype)
            _check_shape(array, ttype, f"@{self.name} argument {i}")
            env[name] = array
        for op in self.glue.ops:
            if op[0] == "call":
                _, result, count, callee, operands = op
                outs = self._functions[callee](*(env[o] for o in operands))
                if count == 1:
                    env[result] = outs[0]
                for k in range(count if count > 1 else 0):
                    env[f"{result}#{k}"] = outs[k]
            elif op[0] == "cast":
                _, result, operand, to = op
                _check_shape(env[operand], to, f"@{self.name}: tensor.cast to {to}")
                env[result] = env[operand]
            else:
                return [env[o] for o in op[1]]
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
