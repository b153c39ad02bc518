"""Everything the runtime reads from a module's MLIR text, in one place: argument and result
types (:class:`TensorType`, :class:`Signature`, :func:`signature`), which functions a function
calls (:func:`callees`), a function's text (:func:`function_text`), the tensor types in a
function and its callees (:func:`tensor_types`, what :func:`~snapkv.runtime.limits.growth`
estimates memory from) and entry points that only call other functions
(:class:`GlueFunction`, :func:`glue_function`, :func:`without_glue`).

The rest of the runtime sees a module only through these functions; they scan the text (no
MLIR parser), with the bracket matching of :func:`_close` and :func:`_split_top`.
"""

from __future__ import annotations

import ctypes
import json
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..frontend.checkpoint import WeightRef

_ELEMENTS = {
    "f32": (np.float32, ctypes.c_float), "f64": (np.float64, ctypes.c_double),
    "f16": (np.float16, ctypes.c_uint16), "bf16": (np.uint16, ctypes.c_uint16),  # bf16 bits
    "i64": (np.int64, ctypes.c_int64), "i32": (np.int32, ctypes.c_int32),
    "i16": (np.int16, ctypes.c_int16), "i8": (np.int8, ctypes.c_int8),
    "i1": (np.bool_, ctypes.c_bool),  # memref<i1> elements are one byte each
}


@dataclass(frozen=True)
class TensorType:
    """A ranked tensor type; ``None`` for a dynamic dimension."""
    shape: Tuple[Optional[int], ...]
    elem: str

    @classmethod
    def parse(cls, text: str) -> "TensorType":
        match = re.fullmatch(r"\s*tensor<([^<>]*)>\s*", text)
        if not match:
            raise ValueError(f"unsupported type {text.strip()!r} (ranked tensors only)")
        parts = match.group(1).split("x")
        elem = parts[-1].strip()
        if elem not in _ELEMENTS:
            raise ValueError(f"unsupported element type {elem!r} in {text.strip()!r}")
        shape = tuple(None if p.strip() == "?" else int(p) for p in parts[:-1])
        return cls(shape, elem)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(_ELEMENTS[self.elem][0])

    def __str__(self):
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"tensor<{dims}{self.elem}>"


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


@dataclass(frozen=True)
class _Header:
    start: int          # offset of "func.func"
    body: int           # offset of the "{" that opens the body
    attributes: Optional[Tuple[int, int]]  # offsets of the attribute dict's "{" and "}"
    args: List[str]
    results: List[str]
    weights: List[Optional[WeightRef]]  # each argument's `snapkv.weight` attribute


_BRACKETS = {"(": ")", "<": ">", "[": "]", "{": "}"}
# What _close looks at: a string literal (skipped whole), an arrow (inside a type, not a
# closing ">") or a bracket; everything between is jumped over.
_BRACKET_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|->|[(<\[{)>\]}]')


def _close(text: str, start: int) -> int:
    """Offset of the bracket closing the one at `start` (any of (<[{ nested)."""
    stack = []
    for match in _BRACKET_TOKEN.finditer(text, start):
        c = match.group()
        if c in _BRACKETS:
            stack.append(_BRACKETS[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return match.start()
    raise ValueError(f"unbalanced {text[start]!r} at offset {start}")


def _split_top(text: str) -> List[str]:
    """Split at commas that are not nested in brackets."""
    parts, depth, last = [], 0, 0
    for i, c in enumerate(text):
        if c in "(<[{":
            depth += 1
        elif c in ")>]}" and not (c == ">" and i > 0 and text[i - 1] == "-"):
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[last:i])
            last = i + 1
    if text[last:].strip():
        parts.append(text[last:])
    return [p.strip() for p in parts]


def _strip_attrs(piece: str) -> str:
    """`%arg0: tensor<..> {attrs}` or `tensor<..> {attrs}` -> the type text."""
    if ":" in piece.split("<", 1)[0]:
        piece = piece.split(":", 1)[1]
    brace = piece.find("{")
    return (piece if brace < 0 else piece[:brace]).strip()


_WEIGHT_ATTR = re.compile(r'snapkv\.weight\s*=\s*"((?:[^"\\]|\\.)*)"')
_TRANSPOSED_ATTR = re.compile(r'\bsnapkv\.transposed\b(?!\s*=\s*false)')


def _weight_attr(piece: str) -> Optional[WeightRef]:
    """The `snapkv.weight = "name"` (and `snapkv.transposed`) of an argument's attribute
    dictionary, if any."""
    brace = piece.find("{")
    match = _WEIGHT_ATTR.search(piece[brace:]) if brace >= 0 else None
    if not match:
        return None
    return WeightRef(json.loads(f'"{match.group(1)}"'),
                     bool(_TRANSPOSED_ATTR.search(piece[brace:])))


def _header(text: str, name: str) -> _Header:
    pattern = re.compile(r"func\.func\s+(?:(?:public|private|nested)\s+)?@" + re.escape(name)
                         + r"\s*\(")
    match = pattern.search(text)
    if not match:
        raise ValueError(f"no func.func @{name} in the module")
    open_args = match.end() - 1
    close_args = _close(text, open_args)
    pieces = _split_top(text[open_args + 1:close_args])
    args = [_strip_attrs(p) for p in pieces]
    weights = [_weight_attr(p) for p in pieces]
    i = close_args + 1
    results: List[str] = []
    rest = text[i:]
    arrow = re.match(r"\s*->\s*", rest)
    if arrow:
        i += arrow.end()
        if text[i] == "(":
            close = _close(text, i)
            results = [_strip_attrs(p) for p in _split_top(text[i + 1:close])]
            i = close + 1
        else:
            end = re.compile(r"\s+attributes\s*\{|\s*\{").search(text, i)
            stop = end.start() if end else len(text)
            close_type = _close(text, text.index("<", i)) if "<" in text[i:stop] else stop - 1
            results = [text[i:close_type + 1].strip()]
            i = close_type + 1
    attributes = None
    attr = re.match(r"\s*attributes\s*\{", text[i:])
    if attr:
        open_attr = i + attr.end() - 1
        close_attr = _close(text, open_attr)
        attributes = (open_attr, close_attr)
        i = close_attr + 1
    body = re.match(r"\s*\{", text[i:])
    if not body:
        raise ValueError(f"@{name} has no body (a declaration?)")
    return _Header(match.start(), i + body.end() - 1, attributes, args, results, weights)


def signature(text: str, name: str) -> Signature:
    """Argument and result types of ``func.func @name`` in `text`, and which arguments are
    weights (``{snapkv.weight = "<tensor name>"}``, as ``snapkv export --hf`` writes them)."""
    header = _header(text, name)
    return Signature(tuple(TensorType.parse(a) for a in header.args),
                     tuple(TensorType.parse(r) for r in header.results),
                     tuple(header.weights))


_CALL = re.compile(r"\bcall @([\w.$-]+)\(")


def callees(text: str, name: str) -> List[str]:
    """The functions ``@name`` calls, directly or not (each once, in order of discovery)."""
    found: List[str] = []
    work = [name]
    while work:
        body = function_text(text, work.pop())
        for match in _CALL.finditer(body):
            if match.group(1) not in found and match.group(1) != name:
                found.append(match.group(1))
                work.append(match.group(1))
    return found


def function_text(text: str, name: str) -> str:
    """The text of ``func.func @name`` from its header to its closing brace."""
    header = _header(text, name)
    return text[header.start:_close(text, header.body) + 1]



_TENSOR = re.compile(r"tensor<((?:(?:\d+|\?)x)+)(\w+)>")


def tensor_types(text: str, name: str) -> List[Tuple[Tuple[Optional[int], ...], str, str]]:
    """(shape, element type, type text) of each ranked tensor type of rank >= 1 in the text of
    ``@name`` and of the functions it calls, in order (``None`` for a dynamic dimension; any
    element type, ``index`` too)."""
    bodies = "\n".join(function_text(text, f) for f in [name, *callees(text, name)])
    return [(tuple(None if d == "?" else int(d) for d in match.group(1).split("x")[:-1]),
             match.group(2), match.group(0)) for match in _TENSOR.finditer(bodies)]


# ---------------------------------------------------------------------------------------------
# Entry points that only call: run by the runner (snapkv.runtime.glue), not compiled

_SSA = r"%[\w.$-]+(?:#\d+)?"
_GLUE_CALL = re.compile(rf"^(?:(%[\w.$-]+)(?::(\d+))?\s*=\s*)?(?:func\.)?call\s+@([\w.$-]+)"
                        rf"\(((?:{_SSA}(?:,\s*)?)*)\)\s*:")
_GLUE_CAST = re.compile(rf"^(%[\w.$-]+)\s*=\s*tensor\.cast\s+({_SSA})\s*:\s*(tensor<[^>]*>)"
                        rf"\s+to\s+(tensor<[^>]*>)$")
_GLUE_RETURN = re.compile(rf"^(?:func\.)?return\s+((?:{_SSA}(?:,\s*)?)+)\s*:")


@dataclass(frozen=True)
class GlueFunction:
    """An entry point whose body is only ``func.call``, ``tensor.cast`` and ``return`` (what
    ``snapkv export --hf`` writes, before and after the model rewrite): its argument names and
    its operations, in order."""
    name: str
    args: Tuple[str, ...]
    ops: Tuple[tuple, ...]  # ("call", result, count, callee, operands) | ("cast", result,
    #                         operand, to) | ("return", operands)

    @property
    def callees(self) -> List[str]:
        return list(dict.fromkeys(op[3] for op in self.ops if op[0] == "call"))


def glue_function(text: str, name: str) -> Optional[GlueFunction]:
    """@name as a :class:`GlueFunction`, or None if its body holds anything else."""
    try:
        header = _header(text, name)
        body = text[header.body + 1:_close(text, header.body)]
    except ValueError:
        return None
    open_args = text.index("(", text.index("@" + name, header.start))
    pieces = _split_top(text[open_args + 1:_close(text, open_args)])
    args = tuple(piece.split(":", 1)[0].strip() for piece in pieces)
    ops = []
    for line in body.splitlines():
        line = line.strip()
        if not line:
            continue
        if (match := _GLUE_CALL.match(line)):
            result, count, callee, operands = match.groups()
            ops.append(("call", result, int(count or (1 if result else 0)), callee,
                        tuple(_split_top(operands)) if operands.strip() else ()))
        elif (match := _GLUE_CAST.match(line)):
            ops.append(("cast", match.group(1), match.group(2),
                        TensorType.parse(match.group(4))))
        elif (match := _GLUE_RETURN.match(line)):
            ops.append(("return", tuple(_split_top(match.group(1)))))
        else:
            return None
    if not ops or ops[-1][0] != "return":
        return None
    return GlueFunction(name, args, tuple(ops))


def without_glue(text: str, glue: Sequence[GlueFunction]) -> str:
    """`text` without the glue functions, and the functions they call made public (their C
    interfaces are what the runner calls)."""
    spans = sorted(((h := _header(text, g.name)).start, _close(text, h.body) + 1) for g in glue)
    for start, end in reversed(spans):
        text = text[:start] + text[end:]
    for callee in {c for g in glue for c in g.callees}:
        text = re.sub(rf"func\.func\s+private\s+@{re.escape(callee)}\s*\(",
                      f"func.func @{callee}(", text, count=1)
    return text

