"""A module's interface as the compiler reports it: ``snapkv-opt --snapkv-describe-module``
prints functions (argument and result types, weights, callees, selects, the body of an
entry point that only calls) and the ``snapkv.*`` module attributes (the rewrite's
``snapkv.refusal``) as JSON. Python reads this, never MLIR text."""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from . import tools

DESCRIBE_VERSION = 1


@dataclass(frozen=True)
class TypeInfo:
    """A type: its MLIR text; for a ranked tensor or an identity-layout memref also its shape
    (None: dynamic) and element type; ``memref`` for a buffer the caller passes and the
    function may write (``snapkv-append-in-place``'s caches)."""
    text: str
    shape: Optional[Tuple[Optional[int], ...]] = None
    element: Optional[str] = None
    memref: bool = False

    @classmethod
    def from_json(cls, data: dict) -> "TypeInfo":
        shape = data.get("shape")
        return cls(data["text"], None if shape is None else tuple(shape), data.get("element"),
                   bool(data.get("memref", False)))

    @property
    def is_tensor(self) -> bool:
        """A ranked tensor or memref: what the memref descriptor ABI passes."""
        return self.shape is not None


@dataclass(frozen=True)
class Argument:
    type: TypeInfo
    weight: Optional[str]  # the checkpoint tensor it takes (`snapkv.weight`), if any
    transposed: bool       # `snapkv.transposed`
    quantized: Optional[str] = None  # `snapkv.quantized`: "q8_0", "q8_0_packed", "q4_1" or a part


@dataclass(frozen=True)
class Function:
    name: str
    visibility: str
    external: bool
    arguments: Tuple[Argument, ...]
    results: Tuple[TypeInfo, ...]
    attributes: dict
    callees: Tuple[str, ...]        # called anywhere in the body, in order of first call
    selects: Tuple[dict, ...]       # each snapkv.select: its clauses, properties and types
    tensor_types: Tuple[TypeInfo, ...]
    glue: Optional[Tuple[dict, ...]]  # the steps of a body of calls, casts and a return
    # {"kept": attentions as one op (snapkv.sdpa, snapkv.attention), "decomposed": the
    # importer's Q.K^T / softmax / P.V chains the matcher recognises}
    attentions: dict

    @classmethod
    def from_json(cls, data: dict) -> "Function":
        return cls(
            data["name"], data["visibility"], data["external"],
            tuple(Argument(TypeInfo.from_json(a["type"]), a["weight"], a["transposed"],
                           a.get("quantized"))
                  for a in data["arguments"]),
            tuple(TypeInfo.from_json(r) for r in data["results"]),
            data["attributes"], tuple(data["callees"]), tuple(data["selects"]),
            tuple(TypeInfo.from_json(t) for t in data["tensor_types"]),
            None if data["glue"] is None else tuple(data["glue"]), data["attentions"])


@dataclass(frozen=True)
class ModuleInterface:
    attributes: dict
    functions: Dict[str, Function]

    @property
    def refusal(self) -> Optional[dict]:
        """``{reason, function, message[, layer]}`` when the model rewrite refused."""
        return self.attributes.get("snapkv.refusal")

    def function(self, name: str) -> Function:
        if name not in self.functions:
            raise ValueError(f"no func.func @{name} in the module")
        return self.functions[name]

    def reachable(self, name: str) -> List[str]:
        """The functions ``@name`` calls, directly or not (each once, in order of
        discovery)."""
        found: List[str] = []
        work = [name]
        while work:
            for callee in self.function(work.pop()).callees:
                if callee not in found and callee != name:
                    found.append(callee)
                    work.append(callee)
        return found

    def select_count(self) -> int:
        return sum(len(f.selects) for f in self.functions.values())


def parse(report: str) -> ModuleInterface:
    """The interface from ``--snapkv-describe-module``'s output."""
    try:
        data = json.loads(report)
        if data.get("version") != DESCRIBE_VERSION:
            raise ValueError(f"version {data.get('version')}, expected {DESCRIBE_VERSION}")
        functions = [Function.from_json(f) for f in data["functions"]]
        return ModuleInterface(data["attributes"], {f.name: f for f in functions})
    except (ValueError, KeyError, TypeError) as error:
        raise tools.ToolError(f"unexpected output of snapkv-opt --snapkv-describe-module "
                              f"({error})") from None


_CACHE: "OrderedDict[str, ModuleInterface]" = OrderedDict()
_CACHE_SIZE = 16


def describe(text: str, path: Optional[os.PathLike] = None) -> ModuleInterface:
    """The interface of the module `text` (parsed and verified by snapkv-opt; a module it
    rejects is a :class:`tools.ToolFailed` with its diagnostics, which name `path` when the
    text was read from that file). Remembered for the last modules asked about."""
    key = hashlib.sha256(text.encode()).hexdigest()
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    arguments = ["--snapkv-describe-module", "-o", os.devnull]
    done = tools.opt(arguments, path=path) if path is not None else \
        tools.opt(arguments, text=text)
    _CACHE[key] = described = parse(done.stdout)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return described
