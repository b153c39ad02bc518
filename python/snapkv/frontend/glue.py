"""The glue of an exported model, the one place snapkv writes MLIR text: the entry points
``@prefill``, ``@decode`` (and ``@extend``) that :mod:`snapkv.frontend.hf_export` adds to the
functions torch-mlir imported. They only call those functions (embed, one layer function per
layer, head) and pass the weights, each argument marked with the checkpoint tensor it binds
(``snapkv.weight``, ``snapkv.transposed``). Types come from the compiler
(:func:`snapkv.interface.describe`), never from parsing text; nothing reads this text back but
the compiler (``snapkv-describe-module``, ``snapkv-drop-glue``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Sequence, Set, Tuple

from .checkpoint import WeightRef

PREFILL_LAYER, DECODE_LAYER, EXTEND_LAYER = "prefill_layer", "decode_layer", "extend_layer"
# @decode_batch's layer (N sequences' new tokens) and head (logits of every row).
DECODE_BATCH_LAYER, HEAD_ROWS = "decode_batch_layer", "head_rows"
DECODE_BATCH = "decode_batch"
# The imported functions the entry points call: private once the entry points exist.
PRIVATE = ("embed", PREFILL_LAYER, DECODE_LAYER, EXTEND_LAYER, DECODE_BATCH_LAYER, "head",
           HEAD_ROWS)


def batch_functions(sizes: Sequence[int]) -> List[Tuple[int, str, str]]:
    """(N, entry point, layer function) of each batched decode step of `sizes`: the largest
    N is ``@decode_batch`` / ``@decode_batch_layer``, each smaller one ``@decode_batch_<N>``
    / ``@decode_batch_layer_<N>`` (a step of fewer sequences then pads less)."""
    largest = max(sizes, default=0)
    return [(n, DECODE_BATCH, DECODE_BATCH_LAYER) if n == largest else
            (n, f"{DECODE_BATCH}_{n}", f"{DECODE_BATCH_LAYER}_{n}") for n in sorted(sizes)]


@dataclasses.dataclass
class Plan:
    """What the entry points pass: per piece, (checkpoint tensor name, transposed)."""
    embed: WeightRef
    layers: List[List[WeightRef]]  # per layer, in the layer function's order
    norm: WeightRef
    lm_head: WeightRef
    layer_names: List[str]         # the layer function's parameter names (relative)
    layer_transposed: Set[str]     # those of them passed transposed




def _types(text: str, name: str):
    """(argument types, result types) of ``@name`` as MLIR text, from the compiler."""
    from .. import interface

    function = interface.describe(text).function(name)
    return [a.type.text for a in function.arguments], [r.text for r in function.results]


def _one_row(logits: str, text: str) -> str:
    """The `[1, L, V]` logits type `logits` with L = 1 (decode's), from the compiler."""
    from .. import interface

    head = interface.describe(text).function("head").results[0]
    if head.text != logits or head.shape is None or len(head.shape) != 3:
        raise ValueError(f"@head returns {head.text}, not [1, L, V] logits")
    dims = ["1", "1", "?" if head.shape[2] is None else str(head.shape[2])]
    return f"tensor<{'x'.join(dims)}x{head.element}>"


def _batch_types(text: str, layer: str) -> Tuple[str, str]:
    """A batched decode step's ids ``[1, N]`` and logits ``[1, N, V]`` types, N the batch of
    its layer function's positions ``[N]``, from the compiler."""
    from .. import interface

    described = interface.describe(text)
    rows = described.function(layer).arguments[1].type.shape[0]
    head = described.function(HEAD_ROWS).results[0]
    vocab = "?" if head.shape[2] is None else str(head.shape[2])
    return f"tensor<1x{rows}xi64>", f"tensor<1x{rows}x{vocab}x{head.element}>"


def _weight_attrs(ref: WeightRef) -> str:
    transposed = ", snapkv.transposed" if ref.transposed else ""
    return (f'{{bufferization.writable = false, snapkv.weight = {json.dumps(ref.name)}'
            f'{transposed}}}')


def entry_points(text: str, plan: Plan, logits: str, extend: bool = False,
                 batch: Sequence[int] = ()) -> Tuple[str, List[WeightRef]]:
    """The text of ``@prefill`` and ``@decode`` (and ``@extend``, a ``@decode_batch`` per
    size in `batch`: :func:`batch_functions`): calls only."""
    embed_args, embed_results = _types(text, "embed")
    p_args, p_results = _types(text, PREFILL_LAYER)
    d_args, d_results = _types(text, DECODE_LAYER)
    head_args, head_results = _types(text, "head")
    order: List[WeightRef] = []
    for name in [plan.embed, *[n for layer in plan.layers for n in layer], plan.norm,
                 plan.lm_head]:
        if name not in order:
            order.append(name)
    types: Dict[WeightRef, str] = {plan.embed: embed_args[1], plan.norm: head_args[1],
                             plan.lm_head: head_args[2]}
    for layer in plan.layers:
        types.update(zip(layer, p_args[1:]))
    value = {name: f"%w{i}" for i, name in enumerate(order)}
    # One argument per line: a diagnostic at the function quotes its first line only.
    weights = ",\n      ".join(f"{value[n]}: {types[n]} {_weight_attrs(n)}" for n in order)
    hidden_dyn, hidden_one = embed_results[0], d_args[0]
    ids_dyn = embed_args[0]
    n = len(plan.layers)

    def call(result, callee, operands, arg_types, result_types):
        results = ", ".join(result_types)
        shown = f"({results})" if len(result_types) > 1 else results
        return (f"    {result} = call @{callee}({', '.join(operands)}) : "
                f"({', '.join(arg_types)}) -> {shown}")

    def layer_calls(callee, args, results, caches, position="%position"):
        """`callee` once per layer, each on the last one's hidden state (with `caches`, also
        on the position and that layer's cache arguments); and the last hidden state."""
        calls, hidden = [], "%h"
        for i, layer in enumerate(plan.layers):
            extra = [position, f"%c{2 * i}", f"%c{2 * i + 1}"] if caches else []
            calls.append(call(f"%l{i}:3", callee, [hidden, *extra] + [value[w] for w in layer],
                              args, results))
            hidden = f"%l{i}#0"
        return calls, hidden

    def prompt_body(callee, args, results, caches):
        """A prompt's (or chunk's) body: embed, the layers, head; logits and caches out."""
        body = [call("%h", "embed", ["%ids", value[plan.embed]], embed_args, embed_results)]
        calls, hidden = layer_calls(callee, args, results, caches=caches)
        body += calls
        body.append(call("%logits", "head", [hidden, value[plan.norm], value[plan.lm_head]],
                         head_args, head_results))
        returned = ["%logits"] + [f"%l{i}#{j}" for i in range(n) for j in (1, 2)]
        types = [logits_type] + [t for _ in range(n) for t in results[1:]]
        return types, body + [f"    return {', '.join(returned)} : {', '.join(types)}", "  }"]

    logits_type = head_results[0]
    result_types, body = prompt_body(PREFILL_LAYER, p_args, p_results, caches=False)
    lines = [f"  func.func @prefill(\n      %ids: {ids_dyn},\n      {weights}) -> "
             f"({', '.join(result_types)}) {{", *body]

    caches = ",\n      ".join(f"%c{j}: {d_args[2 + j % 2]}" for j in range(2 * n))
    decode_logits = _one_row(logits_type, text)
    decode_types = [decode_logits] + [t for _ in range(n) for t in d_results[1:]]
    lines += [f"  func.func @decode(\n      %id: tensor<1x1xi64>,\n      %position: "
              f"{d_args[1]},\n      {caches},\n      {weights}) -> "
              f"({', '.join(decode_types)}) {{",
              f"    %ids = tensor.cast %id : tensor<1x1xi64> to {ids_dyn}",
              call("%e", "embed", ["%ids", value[plan.embed]], embed_args, embed_results),
              f"    %h = tensor.cast %e : {hidden_dyn} to {hidden_one}"]
    calls, hidden = layer_calls(DECODE_LAYER, d_args, d_results, caches=True)
    lines += calls
    lines += [f"    %hd = tensor.cast {hidden} : {hidden_one} to {head_args[0]}",
              call("%logits_d", "head", ["%hd", value[plan.norm], value[plan.lm_head]],
                   head_args, head_results)]
    last = "%logits_d"
    if decode_logits != logits_type:
        lines.append(f"    %logits = tensor.cast %logits_d : {logits_type} to {decode_logits}")
        last = "%logits"
    returned = [last] + [f"%l{i}#{j}" for i in range(n) for j in (1, 2)]
    lines += [f"    return {', '.join(returned)} : {', '.join(decode_types)}", "  }"]
    if extend:
        e_args, e_results = _types(text, EXTEND_LAYER)
        caches = ",\n      ".join(f"%c{j}: {e_args[2 + j % 2]}" for j in range(2 * n))
        extend_types, body = prompt_body(EXTEND_LAYER, e_args, e_results, caches=True)
        lines += [f"  func.func @extend(\n      %ids: {ids_dyn},\n      %position: "
                  f"{e_args[1]},\n      {caches},\n      {weights}) -> "
                  f"({', '.join(extend_types)}) {{", *body]
    for _, entry_name, layer_name in batch_functions(batch):
        # One new token of each of N sequences: ids [1, N] (row i is sequence i's token),
        # each sequence's logical position, its caches a batch row of every cache.
        b_args, b_results = _types(text, layer_name)
        rows_args, rows_results = _types(text, HEAD_ROWS)
        ids_n, logits_n = _batch_types(text, layer_name)
        caches = ",\n      ".join(f"%c{j}: {b_args[2 + j % 2]}" for j in range(2 * n))
        batch_types = [logits_n] + [t for _ in range(n) for t in b_results[1:]]
        lines += [f"  func.func @{entry_name}(\n      %id: {ids_n},\n      %positions: "
                  f"{b_args[1]},\n      {caches},\n      {weights}) -> "
                  f"({', '.join(batch_types)}) {{",
                  f"    %ids = tensor.cast %id : {ids_n} to {ids_dyn}",
                  call("%e", "embed", ["%ids", value[plan.embed]], embed_args, embed_results),
                  f"    %h = tensor.cast %e : {hidden_dyn} to {b_args[0]}"]
        calls, hidden = layer_calls(layer_name, b_args, b_results, caches=True,
                                    position="%positions")
        lines += calls
        lines += [f"    %hr = tensor.cast {hidden} : {b_args[0]} to {rows_args[0]}",
                  call("%logits_r", HEAD_ROWS, ["%hr", value[plan.norm], value[plan.lm_head]],
                       rows_args, rows_results),
                  f"    %logits = tensor.cast %logits_r : {rows_results[0]} to {logits_n}"]
        returned = ["%logits"] + [f"%l{i}#{j}" for i in range(n) for j in (1, 2)]
        lines += [f"    return {', '.join(returned)} : {', '.join(batch_types)}", "  }"]
    return "\n".join(lines) + "\n", order


def insert(text: str, functions: str, batch: Sequence[int] = ()) -> str:
    """`functions` inserted before the module's closing brace (the resource section, if any,
    stays after it); the pieces made private (the layer functions of the batch sizes
    `batch` too)."""
    for name in PRIVATE + tuple(layer for _, _, layer in batch_functions(batch)):
        text = text.replace(f"func.func @{name}(", f"func.func private @{name}(", 1)
    resources = text.find("\n{-#")
    head, tail = (text, "") if resources < 0 else (text[:resources], text[resources:])
    close = head.rstrip().rfind("}")
    return head[:close] + functions + "}\n" + tail
