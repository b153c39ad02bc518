"""Export the tiny Llama's prefill and decode functions to `linalg-on-tensors` MLIR.

    python -m snapkv.frontend.export --out test/Models [--check]

writes, into ``--out``:

* ``tiny_llama.mlir`` -- one module with ``@prefill`` (L = 64) and ``@decode`` (cache length
  64) on static shapes;
* ``tiny_llama_dynamic.mlir`` -- the same two functions with a dynamic prompt length
  (``@prefill``) and a dynamic cache length (``@decode``);
* ``tiny_llama.json`` -- config, seed, package versions, function signatures and example
  inputs with the PyTorch outputs for them.

Both functions of a module are imported by ONE ``FxImporter`` and lowered together, so the
weights (``dense_resource`` blobs) are shared instead of duplicated. The importer is
torch-mlir's FX importer (``torch_mlir.extras.fx_importer``), the same one
``torch_mlir.fx.export_and_import`` uses; ``export_and_import`` itself only handles one
function per module.

``--check`` also compiles each module (``snapkv-opt --snapkv-cpu-pipeline``, and upstream's
lowering), runs prefill followed by decode and compares with PyTorch (see ``harness.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path

import numpy as np
import torch

from .model import Decode, Prefill, TinyLlamaSpec, build_model, example_inputs, persist_buffers

STEM = "tiny_llama"
STATIC_FILE = f"{STEM}.mlir"
DYNAMIC_FILE = f"{STEM}_dynamic.mlir"
JSON_FILE = f"{STEM}.json"
PACKAGES = ("torch", "transformers", "torch-mlir", "numpy")
# Prompt length of the example run of the dynamic module (anything != prefill_len).
DYNAMIC_EXAMPLE_LEN = 37


def versions():
    return {name: importlib.metadata.version(name) for name in PACKAGES}


def _dynamic_shapes(spec: TinyLlamaSpec):
    from torch.export import Dim

    length = Dim("L", min=2, max=spec.max_position_embeddings - 1)
    cache = Dim("T", min=1, max=spec.max_position_embeddings - 2)
    prefill = {"ids": {1: length}}
    decode = {"ids": None, "position": None,
              "kv": tuple({2: cache} for _ in range(2 * spec.num_hidden_layers))}
    return prefill, decode


def import_functions(functions) -> str:
    """The ``linalg-on-tensors`` MLIR text of one module holding each function of
    ``functions``: ``(name, nn.Module, example args, dynamic_shapes or None)`` tuples, imported
    by one ``FxImporter`` so that shared weights are one ``dense_resource`` each."""
    from torch_mlir import fx, ir
    from torch_mlir.compiler_utils import OutputType
    from torch_mlir.dialects import torch as torch_d
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table
    from torch_mlir.extras.fx_importer import FxImporter

    torch.set_num_threads(1)  # deterministic, and gentle on a shared machine
    context = ir.Context()
    torch_d.register_dialect(context)
    importer = FxImporter(context=context)
    # SDPA stays one op: torch-mlir lowers it to tm_tensor.attention (kept_sdpa below).
    table = {op: fn for op, fn in get_decomposition_table().items() if op not in _SDPA_OPS}
    for name, module, args, shapes in functions:
        program = torch.export.export(module, args, dynamic_shapes=shapes, strict=False)
        program = program.run_decompositions(table)
        importer.import_frozen_program(program, func_name=name)
    # What export_and_import(..., output_type="linalg-on-tensors") runs after the import.
    lowered = fx._module_lowering(False, False, OutputType.LINALG_ON_TENSORS, importer.module)
    return str(kept_sdpa(lowered))


def _sdpa_ops():
    aten = torch.ops.aten
    return {aten.scaled_dot_product_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default,
            aten._scaled_dot_product_attention_math.default}


_SDPA_OPS = _sdpa_ops()


def kept_sdpa(module):
    """`module` (torch-mlir's) with each ``tm_tensor.attention`` (torch-mlir's lowering of
    SDPA) replaced by ``snapkv.sdpa`` with the same operands and scale, which our MLIR parses
    (text is the bridge between torch-mlir's MLIR and ours; the op is unregistered here, so it
    prints in the generic form). Returns `module`."""
    from torch_mlir import ir

    found = []

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for nested in block.operations:
                    if nested.operation.name == "tm_tensor.attention":
                        found.append(nested.operation)
                    else:
                        visit(nested.operation)

    visit(module.operation)
    if not found:
        return module
    module.context.allow_unregistered_dialects = True
    for op in found:
        operands = list(op.operands)
        if len(op.results) != 1 or len(operands) not in (4, 5):
            raise ValueError(f"tm_tensor.attention with {len(operands)} operands and "
                             f"{len(op.results)} results: not torch's SDPA as snapkv.sdpa "
                             f"takes it (queries, keys, values, optional mask, init)")
        attributes = {}
        if "scale" in op.attributes:
            attributes["scale"] = op.attributes["scale"]
        new = ir.Operation.create("snapkv.sdpa", results=[op.results[0].type],
                                  operands=operands, attributes=attributes, loc=op.location,
                                  ip=ir.InsertionPoint(op))
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()
    return module


def export_text(spec: TinyLlamaSpec = TinyLlamaSpec(), dynamic: bool = False) -> str:
    """The MLIR text of one module holding ``@prefill`` and ``@decode``."""
    model = persist_buffers(build_model(spec))
    prefill_args, decode_args = example_inputs(spec)
    prefill_dyn, decode_dyn = _dynamic_shapes(spec) if dynamic else (None, None)
    text = import_functions((("prefill", Prefill(model), prefill_args, prefill_dyn),
                             ("decode", Decode(model), decode_args, decode_dyn)))
    header = (f"// Generated by `python -m snapkv.frontend.export` (python/snapkv/frontend); do not"
              f" edit.\n// Tiny random-weight HuggingFace Llama with GQA, "
              f"{'dynamic' if dynamic else 'static'} shapes; see {JSON_FILE}.\n")
    return header + text


def _signature(text: str, name: str):
    """{"arguments": [...], "results": [...]}: ``@name``'s types as MLIR text."""
    from .. import interface

    function = interface.describe(text).function(name)
    return {"arguments": [a.type.text for a in function.arguments],
            "results": [r.text for r in function.results]}


def _example(spec: TinyLlamaSpec, length: int):
    """Example ids, the prefill outputs, then a decode step on them, all from PyTorch."""
    model = build_model(spec)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, spec.vocab_size, (spec.batch, length), generator=g)
    token = torch.randint(0, spec.vocab_size, (spec.batch, 1), generator=g)
    position = torch.tensor([length], dtype=torch.int64)
    with torch.no_grad():
        prefill = Prefill(model)(ids)
        decode = Decode(model)(token, position, *prefill[1:])
    return ids, token, position, prefill, decode


def example_record(spec: TinyLlamaSpec, length: int):
    ids, token, position, prefill, decode = _example(spec, length)

    def rounded(t):
        return [float(f"{x:.6g}") for x in t.reshape(-1).tolist()]

    return {
        "ids": ids.reshape(-1).tolist(),
        "token": int(token.item()),
        "position": int(position.item()),
        "prefill_last_logits": rounded(prefill[0][0, -1]),
        "decode_logits": rounded(decode[0][0, 0]),
        "decode_argmax": int(decode[0][0, 0].argmax().item()),
    }


def metadata(spec: TinyLlamaSpec, texts: dict):
    return {
        "generator": "python -m snapkv.frontend.export --out test/Models",
        "versions": versions(),
        "spec": dataclasses.asdict(spec),
        "seed": spec.seed,
        "attention": spec.attn_implementation,
        "importer": "torch_mlir.extras.fx_importer.FxImporter.import_frozen_program for each "
                    "function into one module, then the lowering that "
                    "torch_mlir.fx.export_and_import(output_type='linalg-on-tensors') runs; "
                    "RoPE inv_freq made a persistent buffer first (see model.persist_buffers)",
        "model": {
            "class": "transformers.LlamaForCausalLM",
            "weights": f"random: torch.manual_seed({spec.seed}) then LlamaForCausalLM(config), "
                       f"initializer_range={spec.initializer_range}",
            "gqa_group": spec.num_attention_heads // spec.num_key_value_heads,
            "scale": spec.head_dim ** -0.5,
        },
        "functions": {
            "prefill": "ids [B, L] i64 -> (logits [B, L, V], k0, v0, k1, v1): post-RoPE K/V "
                       "[B, Hkv, L, D] per layer, what HF's DynamicCache stores",
            "decode": "(id [B, 1] i64, position [1] i64 logical position, k0, v0, k1, v1 "
                      "[B, Hkv, T, D]) -> (logits [B, 1, V], k0', v0', ... [B, Hkv, T+1, D]); "
                      "new K/V concatenated at the end",
        },
        "files": {
            name: {
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
                "bytes": len(text.encode()),
                "prefill": _signature(text, "prefill"),
                "decode": _signature(text, "decode"),
            }
            for name, text in texts.items()
        },
        "examples": {
            STATIC_FILE: example_record(spec, spec.prefill_len),
            DYNAMIC_FILE: example_record(spec, DYNAMIC_EXAMPLE_LEN),
        },
    }


def generate(spec: TinyLlamaSpec = TinyLlamaSpec()):
    """{file name: contents} of every fixture."""
    texts = {STATIC_FILE: export_text(spec, dynamic=False),
             DYNAMIC_FILE: export_text(spec, dynamic=True)}
    meta = json.dumps(metadata(spec, texts), indent=1) + "\n"
    return {**texts, JSON_FILE: meta}


def check(out_dir: Path, spec: TinyLlamaSpec = TinyLlamaSpec(), pipelines=("snapkv", "upstream")):
    """Compile and run each module's example; {(file, pipeline): max |mlir - torch| or error}."""
    from ..mlirgen import ToolError
    from . import harness

    result = {}
    for name, length in ((STATIC_FILE, spec.prefill_len), (DYNAMIC_FILE, DYNAMIC_EXAMPLE_LEN)):
        ids, token, position, prefill, decode = _example(spec, length)
        want = [t.numpy() for t in prefill] + [t.numpy() for t in decode]
        for pipeline in pipelines:
            try:
                got = harness.run_prefill_decode((out_dir / name).read_text(), ids.numpy(),
                                                 int(token.item()), int(position.item()),
                                                 pipeline=pipeline)
                result[name, pipeline] = max(float(np.max(np.abs(g - w)))
                                             for g, w in zip(got, want))
            except ToolError as error:
                result[name, pipeline] = f"failed: {str(error).splitlines()[0]}"
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("test/Models"))
    parser.add_argument("--check", action="store_true",
                        help="compile (our lowering and upstream's), run, compare with torch")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (args.out / name).write_text(text)
        print(f"wrote {args.out / name} ({len(text.encode())} bytes)")
    if args.check:
        for (name, pipeline), diff in check(args.out).items():
            shown = f"{diff:.3g}" if isinstance(diff, float) else diff
            print(f"{name} via {pipeline}: max |mlir - torch| = {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
