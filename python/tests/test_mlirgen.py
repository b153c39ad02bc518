"""Tests of the MLIR generator: the generated IR is checked with upstream mlir-opt, and the
compile-and-call chain (results through the C interface, K/V compared as bits) is run end to
end with the op replaced by an upstream stand-in, so no snapkv lowering is involved."""

import re
import subprocess

import numpy as np
import pytest

from snapkv import f32_to_bf16, tools
from snapkv.dtypes import bits
from snapkv.mlirgen import Case, build_module, case_signature, compile_functions, select_op

MLIR_OPT = str(tools.mlir_opt())
needs_mlir = pytest.mark.skipif(not tools.mlir_opt().is_file(), reason="mlir-opt not installed")
OP = re.compile(r"%ko, %vo, %idx = snapkv\.select %q, %k, %v [^\n]*\n\s*: "
                r"\((\S+), (\S+), \S+\) -> \((\S+), \S+, (\S+)\)")


def short_cases():
    """Cases with L < C and Hq == Hkv: the result is the input, so a stand-in can compute it."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 4, 3)).astype(np.float32)
    q = rng.standard_normal((2, 2, 2, 3)).astype(np.float32)
    return [Case(q, x, -x, 2, 6),
            Case(q.astype(np.float16), x.astype(np.float16), x[::-1].astype(np.float16), 2, 6,
                 gqa="mean", dynamic=True),
            Case(f32_to_bf16(q), f32_to_bf16(x), f32_to_bf16(x * 3), 2, 5, kernel=3,
                 pooling="max", gqa="max", order="score", scale=0.5, dtype="bf16",
                 dynamic=True)]


def stand_in(text):
    """Replace each snapkv.select with upstream ops that keep every position (L < C only)."""
    ident = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"

    def replace(m):
        _, k_t, kv_t, idx_t = m.groups()
        dims = "%l" if "?" in idx_t else ""
        return "\n".join([
            f"%ko = tensor.cast %k : {k_t} to {kv_t}",
            f"%vo = tensor.cast %v : {k_t} to {kv_t}",
            "%two = arith.constant 2 : index",
            f"%l = tensor.dim %k, %two : {k_t}",
            f"%e = tensor.empty({dims}) : {idx_t}",
            f"%idx = linalg.generic {{indexing_maps = [{ident}], iterator_types = "
            f'["parallel", "parallel", "parallel"]}} outs(%e : {idx_t}) {{',
            "^bb0(%o: i64):",
            "  %i = linalg.index 2 : index",
            "  %c = arith.index_cast %i : index to i64",
            "  linalg.yield %c : i64",
            f"}} -> {idx_t}"])
    return OP.sub(replace, text)


def test_select_op_text():
    q = np.zeros((1, 4, 2, 8), np.float32)
    k = np.zeros((1, 2, 8, 8), np.float32)
    text = select_op(Case(q, k, k, 2, 5, kernel=3, pooling="avg", gqa="expand",
                          order="position", scale=0.5),
                     "tensor<1x4x2x8xf32>", "tensor<1x2x8x8xf32>", ((1, 4, 5, 8), (1, 4, 5)))
    assert "window 2 capacity 5 kernel 3 pooling avg gqa expand order position scale 5.0" in text
    assert text.endswith("-> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)")
    # Omitted clauses stay omitted; gqa mean keeps Hkv heads; dynamic L gives `?`.
    module = build_module([Case(q, k, k, 2, 5, gqa="mean", dynamic=True)])
    assert "snapkv.select %q, %k, %v window 2 capacity 5 gqa mean\n" in module
    assert "-> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>)" in module


def test_constants_are_raw_little_endian_bytes():
    q = np.array([1.0, -2.0], np.float32).reshape(1, 1, 1, 2)
    k = np.array([1.0, 2.0], np.float16).reshape(1, 1, 1, 2)
    text = build_module([Case(q, q, q, 1, 2), Case(k, k, k, 1, 2)])
    assert 'dense<"0x0000803F000000C0"> : tensor<1x1x1x2xf32>' in text
    assert 'dense<"0x003C0040"> : tensor<1x1x1x2xf16>' in text


@needs_mlir
def test_generated_module_parses():
    text = build_module(short_cases())

    def generic(m):  # the op in generic form, which parses without the dialect
        q_t, k_t, kv_t, idx_t = m.groups()
        return (f'%ko, %vo, %idx = "snapkv.select"(%q, %k, %v) : ({q_t}, {k_t}, {k_t}) '
                f'-> ({kv_t}, {kv_t}, {idx_t})')
    subprocess.run([MLIR_OPT, "--allow-unregistered-dialect", "-o", "/dev/null"],
                   input=OP.sub(generic, text), text=True, check=True)


def test_results_come_back_bit_exact():
    from conftest import require_aot_tools

    require_aot_tools()
    cases = short_cases()
    functions = compile_functions(
        stand_in(build_module(cases)),
        {f"case{n}": case_signature(case) for n, case in enumerate(cases)})
    for number, case in enumerate(cases):
        indices, keys, values = functions[f"case{number}"]()
        ref = case.reference()
        assert np.array_equal(indices, ref.indices)
        assert keys.dtype == values.dtype == case_signature(case).results[1].dtype
        assert np.array_equal(bits(keys, case.elem), bits(ref.keys, case.elem))
        assert np.array_equal(bits(values, case.elem), bits(ref.values, case.elem))
