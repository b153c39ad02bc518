#!/usr/bin/env python3
"""Writes test/Transforms/Inputs/compress-kv-cache-mini.mlir (a one-layer prefill/decode
pair in the importer's form), test/Transforms/compress-kv-cache-refusals.mlir (near
misses built from it) and test/Transforms/compress-kv-cache-scales.mlir (the forms a
constant scale takes). Edit this script, not them, and rerun it:

    python3 scripts/gen-compress-kv-cache-tests.py [--check] [--root DIR]

`--check` writes nothing: it compares the files under the root (default: this repository)
with what the script writes today and exits 1, printing the first differences, if one is
stale (scripts/generated_files.py; python/tests/test_generated_tests.py runs it).

The same forms cut from real exports are in scripts/gen-model-attention-tests.py."""

import argparse
import sys

import generated_files
import numpy as np

MAPS = """#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
"""

def arange(name, n):
    return f"""  %{name}_e = tensor.empty() : tensor<{n}xi64>
  %{name} = linalg.generic {{indexing_maps = [#id1], iterator_types = ["parallel"]}} outs(%{name}_e : tensor<{n}xi64>) {{
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  }} -> tensor<{n}xi64>
"""

# How the scale reaches the scores: the value multiplying them after Q.K^T ("scalar": an f32
# constant; "f64": an f64 constant truncated to f32 in the body; "splat": a 0-d splat tensor
# operand; "arg": a function argument, not a constant), or "split": %qroot on Q and %kroot on
# K^T as SDPA's decomposition does, or "none".
def scale_body(p, form, lq, lk, heads):
    if form in ("split", "none"):
        return ""
    if form == "splat":
        return f"""  %{p}scaled = linalg.generic {{indexing_maps = [#id4, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%{p}s4, %scale_t : tensor<1x{heads}x{lq}x{lk}xf32>, tensor<f32>) outs(%{p}ae : tensor<1x{heads}x{lq}x{lk}xf32>) {{
  ^bb0(%in: f32, %c: f32, %o: f32):
    %r = arith.mulf %in, %c : f32
    linalg.yield %r : f32
  }} -> tensor<1x{heads}x{lq}x{lk}xf32>
"""
    factor = {"scalar": "", "f64": "    %c = arith.truncf %scale64 : f64 to f32\n",
              "arg": ""}[form]
    operand = {"scalar": "%scale", "f64": "%c", "arg": "%scale_arg"}[form]
    return f"""  %{p}scaled = linalg.generic {{indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%{p}s4 : tensor<1x{heads}x{lq}x{lk}xf32>) outs(%{p}ae : tensor<1x{heads}x{lq}x{lk}xf32>) {{
  ^bb0(%in: f32, %o: f32):
{factor}    %r = arith.mulf %in, {operand} : f32
    linalg.yield %r : f32
  }} -> tensor<1x{heads}x{lq}x{lk}xf32>
"""


def root_scaled(name, source, shape, root):
    """`name = source * truncf(root)` elementwise (one half of SDPA's scale split)."""
    return f"""  %{name}e = tensor.empty() : tensor<{shape}xf32>
  %{name} = linalg.generic {{indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins({source} : tensor<{shape}xf32>) outs(%{name}e : tensor<{shape}xf32>) {{
  ^bb0(%in: f32, %o: f32):
    %c = arith.truncf {root} : f64 to f32
    %r = arith.mulf %in, %c : f32
    linalg.yield %r : f32
  }} -> tensor<{shape}xf32>
"""


def attention(p, lq, lk, kv_k, kv_v, mask_pred="sle", qpos_map="#row", kpos_map="#col",
              softmax=True, q="%q", heads=4, kvh=2, key_pos="kpos", q_pos="qpos",
              scale="scalar"):
    g = heads // kvh
    s = f"""  %{p}be = tensor.empty() : tensor<1x1x{lq}x{lk}xi1>
  %{p}cond = linalg.generic {{indexing_maps = [{kpos_map}, {qpos_map}, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%{key_pos}, %{q_pos} : tensor<1x1x1x{lk}xi64>, tensor<1x1x{lq if lq > 1 else 1}x1xi64>) outs(%{p}be : tensor<1x1x{lq}x{lk}xi1>) {{
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi {mask_pred}, %a, %b : i64
    linalg.yield %c : i1
  }} -> tensor<1x1x{lq}x{lk}xi1>
  %{p}me = tensor.empty() : tensor<1x1x{lq}x{lk}xf32>
  %{p}mask = linalg.generic {{indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%{p}cond, %vis, %hid : tensor<1x1x{lq}x{lk}xi1>, tensor<f32>, tensor<f32>) outs(%{p}me : tensor<1x1x{lq}x{lk}xf32>) {{
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  }} -> tensor<1x1x{lq}x{lk}xf32>
  %{p}re = tensor.empty() : tensor<1x{kvh}x{g}x{lk}x4xf32>
  %{p}kr = linalg.generic {{indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}} ins({kv_k} : tensor<1x{kvh}x{lk}x4xf32>) outs(%{p}re : tensor<1x{kvh}x{g}x{lk}x4xf32>) {{
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  }} -> tensor<1x{kvh}x{g}x{lk}x4xf32>
  %{p}krc = tensor.collapse_shape %{p}kr [[0], [1, 2], [3], [4]] : tensor<1x{kvh}x{g}x{lk}x4xf32> into tensor<1x{heads}x{lk}x4xf32>
  %{p}vr = linalg.generic {{indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}} ins({kv_v} : tensor<1x{kvh}x{lk}x4xf32>) outs(%{p}re : tensor<1x{kvh}x{g}x{lk}x4xf32>) {{
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  }} -> tensor<1x{kvh}x{g}x{lk}x4xf32>
  %{p}te = tensor.empty() : tensor<1x{heads}x4x{lk}xf32>
  %{p}kt = linalg.transpose ins(%{p}krc : tensor<1x{heads}x{lk}x4xf32>) outs(%{p}te : tensor<1x{heads}x4x{lk}xf32>) permutation = [0, 1, 3, 2]
"""
    qin, kt = q, f"%{p}kt"
    if scale == "split":
        s += root_scaled(f"{p}qs", q, f"1x{heads}x{lq}x4", "%qroot")
        s += root_scaled(f"{p}kts", kt, f"1x{heads}x4x{lk}", "%kroot")
        qin, kt = f"%{p}qs", f"%{p}kts"
    s += f"""  %{p}qc = tensor.collapse_shape {qin} [[0, 1], [2], [3]] : tensor<1x{heads}x{lq}x4xf32> into tensor<{heads}x{lq}x4xf32>
  %{p}ktc = tensor.collapse_shape {kt} [[0, 1], [2], [3]] : tensor<1x{heads}x4x{lk}xf32> into tensor<{heads}x4x{lk}xf32>
  %{p}se = tensor.empty() : tensor<{heads}x{lq}x{lk}xf32>
  %{p}sf = linalg.fill ins(%zero : f32) outs(%{p}se : tensor<{heads}x{lq}x{lk}xf32>) -> tensor<{heads}x{lq}x{lk}xf32>
  %{p}s = linalg.batch_matmul ins(%{p}qc, %{p}ktc : tensor<{heads}x{lq}x4xf32>, tensor<{heads}x4x{lk}xf32>) outs(%{p}sf : tensor<{heads}x{lq}x{lk}xf32>) -> tensor<{heads}x{lq}x{lk}xf32>
  %{p}s4 = tensor.expand_shape %{p}s [[0, 1], [2], [3]] output_shape [1, {heads}, {lq}, {lk}] : tensor<{heads}x{lq}x{lk}xf32> into tensor<1x{heads}x{lq}x{lk}xf32>
  %{p}ae = tensor.empty() : tensor<1x{heads}x{lq}x{lk}xf32>
"""
    s += scale_body(p, scale, lq, lk, heads)
    scaled = f"%{p}s4" if scale in ("split", "none") else f"%{p}scaled"
    s += f"""  %{p}masked = linalg.generic {{indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins({scaled}, %{p}mask : tensor<1x{heads}x{lq}x{lk}xf32>, tensor<1x1x{lq}x{lk}xf32>) outs(%{p}ae : tensor<1x{heads}x{lq}x{lk}xf32>) {{
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  }} -> tensor<1x{heads}x{lq}x{lk}xf32>
"""
    if softmax:
        s += f"""  %{p}xe = tensor.empty() : tensor<1x{heads}x{lq}xf32>
  %{p}xf = linalg.fill ins(%ninf : f32) outs(%{p}xe : tensor<1x{heads}x{lq}xf32>) -> tensor<1x{heads}x{lq}xf32>
  %{p}max = linalg.generic {{indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}} ins(%{p}masked : tensor<1x{heads}x{lq}x{lk}xf32>) outs(%{p}xf : tensor<1x{heads}x{lq}xf32>) {{
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  }} -> tensor<1x{heads}x{lq}xf32>
  %{p}maxe = tensor.expand_shape %{p}max [[0], [1], [2, 3]] output_shape [1, {heads}, {lq}, 1] : tensor<1x{heads}x{lq}xf32> into tensor<1x{heads}x{lq}x1xf32>
  %{p}sub = linalg.generic {{indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%{p}masked, %{p}maxe : tensor<1x{heads}x{lq}x{lk}xf32>, tensor<1x{heads}x{lq}x1xf32>) outs(%{p}ae : tensor<1x{heads}x{lq}x{lk}xf32>) {{
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  }} -> tensor<1x{heads}x{lq}x{lk}xf32>
  %{p}exp = linalg.generic {{indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%{p}sub : tensor<1x{heads}x{lq}x{lk}xf32>) outs(%{p}ae : tensor<1x{heads}x{lq}x{lk}xf32>) {{
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  }} -> tensor<1x{heads}x{lq}x{lk}xf32>
  %{p}ze = tensor.empty() : tensor<1x{heads}x{lq}x1xf32>
  %{p}zf = linalg.fill ins(%zero : f32) outs(%{p}ze : tensor<1x{heads}x{lq}x1xf32>) -> tensor<1x{heads}x{lq}x1xf32>
  %{p}sum = linalg.generic {{indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}} ins(%{p}exp : tensor<1x{heads}x{lq}x{lk}xf32>) outs(%{p}zf : tensor<1x{heads}x{lq}x1xf32>) {{
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  }} -> tensor<1x{heads}x{lq}x1xf32>
  %{p}p = linalg.generic {{indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%{p}exp, %{p}sum : tensor<1x{heads}x{lq}x{lk}xf32>, tensor<1x{heads}x{lq}x1xf32>) outs(%{p}ae : tensor<1x{heads}x{lq}x{lk}xf32>) {{
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  }} -> tensor<1x{heads}x{lq}x{lk}xf32>
"""
        probs = f"%{p}p"
    else:
        probs = f"%{p}masked"
    s += f"""  %{p}pc = tensor.collapse_shape {probs} [[0, 1], [2], [3]] : tensor<1x{heads}x{lq}x{lk}xf32> into tensor<{heads}x{lq}x{lk}xf32>
  %{p}vc = tensor.collapse_shape %{p}vr [[0, 1, 2], [3], [4]] : tensor<1x{kvh}x{g}x{lk}x4xf32> into tensor<{heads}x{lk}x4xf32>
  %{p}oe = tensor.empty() : tensor<{heads}x{lq}x4xf32>
  %{p}of = linalg.fill ins(%zero : f32) outs(%{p}oe : tensor<{heads}x{lq}x4xf32>) -> tensor<{heads}x{lq}x4xf32>
  %{p}pv = linalg.batch_matmul ins(%{p}pc, %{p}vc : tensor<{heads}x{lq}x{lk}xf32>, tensor<{heads}x{lk}x4xf32>) outs(%{p}of : tensor<{heads}x{lq}x4xf32>) -> tensor<{heads}x{lq}x4xf32>
  %{p}out = tensor.expand_shape %{p}pv [[0, 1], [2], [3]] output_shape [1, {heads}, {lq}, 4] : tensor<{heads}x{lq}x4xf32> into tensor<1x{heads}x{lq}x4xf32>
"""
    return s

CONSTS = """  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
"""

def prefill(name="prefill", returns="%out, %k, %v", ret_types="tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>", consts="", args="", **kw):
    body = CONSTS + consts + arange("pos", 8)
    body += "  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>\n"
    body += "  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>\n"
    body += attention("", 8, 8, "%k", "%v", **kw)
    return f"""func.func @{name}(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>{args}) -> ({ret_types}) {{
{body}  return {returns} : {ret_types}
}}
"""

def decode(name="decode", qpos_const="8", rope_from="%pos_arg", extra="", **kw):
    body = CONSTS + extra + "  %c0_i64 = arith.constant 0 : i64\n  %cq_i64 = arith.constant " + qpos_const + " : i64\n"
    body += f"""  %pfe = tensor.empty() : tensor<1xf32>
  %cosp = linalg.generic {{indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}} ins({rope_from} : tensor<1xi64>) outs(%pfe : tensor<1xf32>) {{
  ^bb0(%in: i64, %o: f32):
    %f = arith.sitofp %in : i64 to f32
    %c = math.cos %f : f32
    linalg.yield %c : f32
  }} -> tensor<1xf32>
  %cos4 = tensor.expand_shape %cosp [[0, 1, 2, 3]] output_shape [1, 1, 1, 1] : tensor<1xf32> into tensor<1x1x1x1xf32>
  %qe = tensor.empty() : tensor<1x4x1x4xf32>
  %q = linalg.generic {{indexing_maps = [#id4, #all, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%qin, %cos4 : tensor<1x4x1x4xf32>, tensor<1x1x1x1xf32>) outs(%qe : tensor<1x4x1x4xf32>) {{
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.mulf %a, %b : f32
    linalg.yield %r : f32
  }} -> tensor<1x4x1x4xf32>
  %qp0e = tensor.empty() : tensor<1xi64>
  %qp0 = linalg.generic {{indexing_maps = [#id1], iterator_types = ["parallel"]}} outs(%qp0e : tensor<1xi64>) {{
  ^bb0(%o: i64):
    linalg.yield %c0_i64 : i64
  }} -> tensor<1xi64>
  %qp = linalg.generic {{indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}} ins(%qp0 : tensor<1xi64>) outs(%qp0e : tensor<1xi64>) {{
  ^bb0(%in: i64, %o: i64):
    %r = arith.addi %in, %cq_i64 : i64
    linalg.yield %r : i64
  }} -> tensor<1xi64>
"""
    body += arange("kp", 9)
    body += "  %kpos = tensor.expand_shape %kp [[0, 1, 2, 3]] output_shape [1, 1, 1, 9] : tensor<9xi64> into tensor<1x1x1x9xi64>\n"
    body += "  %qpos = tensor.expand_shape %qp [[0, 1, 2, 3]] output_shape [1, 1, 1, 1] : tensor<1xi64> into tensor<1x1x1x1xi64>\n"
    body += "  %kall = tensor.concat dim(2) %kcache, %knew : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32>\n"
    body += "  %vall = tensor.concat dim(2) %vcache, %vnew : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32>\n"
    body += attention("", 1, 9, "%kall", "%vall", kpos_map="#id4", qpos_map="#row", **kw)
    types = "tensor<1x4x1x4xf32>, tensor<1x2x9x4xf32>, tensor<1x2x9x4xf32>"
    return f"""func.func @{name}(%pos_arg: tensor<1xi64>, %qin: tensor<1x4x1x4xf32>, %knew: tensor<1x2x1x4xf32>, %vnew: tensor<1x2x1x4xf32>, %kcache: tensor<1x2x8x4xf32>, %vcache: tensor<1x2x8x4xf32>) -> ({types}) {{
{body}  return %out, %kall, %vall : {types}
}}
"""
M = MAPS
def warn_before(text, func, msg, kind="warning"):
    return text.replace(f"func.func @{func}(", f"// expected-{kind}@+1 {{{{{msg}}}}}\nfunc.func @{func}(", 1)


SCALE_CONSTS = """  %scale64 = arith.constant 0.35355339059327379 : f64
  %scale_t = arith.constant dense<5.000000e-01> : tensor<f32>
  %qroot = arith.constant 0.70710678118654757 : f64
  %kroot = arith.constant 0.70710678118654757 : f64
"""

BUFFERS = """// Attention on buffers (after bufferization): the rewrite works on tensors.
// expected-warning@+1 {{is not part of a recognised attention: batch_matmul on buffers}}
func.func @prefill(%a: memref<4x8x4xf32>, %b: memref<4x4x8xf32>, %c: memref<4x8x8xf32>) {
  linalg.batch_matmul ins(%a, %b : memref<4x8x4xf32>, memref<4x4x8xf32>) outs(%c : memref<4x8x8xf32>)
  return
}
"""

REFUSALS_HEADER = """// Near misses: inputs the model rewrite must leave unchanged, each with a
// warning naming the function and the reason. FileCheck confirms that no
// split was rewritten.
// RUN: snapkv-opt %s -split-input-file -verify-diagnostics \\
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 kernel=3" | FileCheck %s

// CHECK-NOT: snapkv.select
// CHECK-NOT: tensor<1x4x6x4xf32>

"""

SCALES_HEADER = """// Generated by scripts/gen-compress-kv-cache-tests.py; do not edit.
// The forms a constant scale takes in front of the mask: each is accepted and
// the select carries the model's effective f32 scale.
// RUN: snapkv-opt %s -split-input-file \\
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 kernel=5 gqa=expand decode-func= strict=true" | FileCheck %s

"""


def refusals_test():
    splits = []
    t = M + prefill(softmax=False)
    splits.append("// Attention without a softmax: the second batch_matmul reads the masked scores.\n" + warn_before(t, "prefill", "is not part of a recognised attention: attention probabilities are not a softmax (no row-sum division)"))
    t = M + prefill(returns="%out", ret_types="tensor<1x4x8x4xf32>")
    splits.append("// K/V do not reach a result: nothing to cache.\n" + warn_before(t, "prefill", "@prefill: layer 0: the keys this attention reads are not returned exactly once"))
    t = M + prefill(mask_pred="sgt")
    splits.append("// A mask that is not causal (key > query).\n" + warn_before(t, "prefill", "@prefill: layer 0: the mask condition is not `key position <= query position`"))
    p = prefill()
    second = attention("b", 8, 8, "%k", "%v")
    p = p.replace("  return %out, %k, %v", second + "  return %bout, %k, %v")
    splits.append("// Two attentions read the same K/V: one cache cannot serve both.\n" + warn_before(M + p, "prefill", "@prefill: layer 1: its keys or values are also read by another attention"))
    extra = ("  %c2 = arith.constant 2 : index\n"
             "  %plen_d = tensor.dim %kcache, %c2 : tensor<1x2x8x4xf32>\n"
             "  %plen_i = arith.index_cast %plen_d : index to i64\n"
             "  %plen = tensor.from_elements %plen_i : tensor<1xi64>\n")
    t = M + prefill() + decode(rope_from="%plen", extra=extra)
    splits.append("// Decode computes its RoPE position from the physical cache length.\n" + warn_before(t, "decode", "@decode: the RoPE position is computed from cache argument %arg4 (its physical length), not from the logical position argument"))
    t = M + prefill() + decode(qpos_const="3")
    splits.append("// Decode's mask hides the keys after position 3 of a 9-key cache: it cannot be\n// rebuilt for logical positions.\n" + warn_before(t, "decode", "@decode: layer 0: the mask's query position is not the cache length or the position argument"))
    t = M + prefill() + decode()
    t = t.replace("  return %out, %kall, %vall", "  %kneg = arith.negf %kcache : tensor<1x2x8x4xf32>\n  return %out, %kall, %vall")
    splits.append("// A cache argument is read by something other than the append.\n" + warn_before(t, "decode", "@decode: layer 0: cache argument %arg4 has a use other than the append and tensor.dim (arith.negf)"))

    t = M + prefill()
    t = t.replace("  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>",
                  "  %qd = tensor.cast %q : tensor<1x4x8x4xf32> to tensor<1x?x8x4xf32>\n  %qc = tensor.collapse_shape %qd [[0, 1], [2], [3]] : tensor<1x?x8x4xf32> into tensor<?x8x4xf32>")
    t = t.replace("linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>,", "linalg.batch_matmul ins(%qc, %ktc : tensor<?x8x4xf32>,")
    splits.append("// A dynamic head count: the cache shape cannot be derived.\n" + warn_before(t, "prefill", "is not part of a recognised attention: the batch, head count or head dim of the queries is dynamic"))
    t = M + prefill()
    t = t.replace("  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>",
                  "  %kr2 = tensor.collapse_shape %kr [[0, 1], [2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<2x2x8x4xf32>\n  %shape = arith.constant dense<[1, 4, 8, 4]> : tensor<4xi64>\n  %krc = tensor.reshape %kr2(%shape) : (tensor<2x2x8x4xf32>, tensor<4xi64>) -> tensor<1x4x8x4xf32>")
    splits.append("// An unusual reshape between the GQA repeat and the attention.\n" + warn_before(t, "prefill", "is not part of a recognised attention: keys and values before the repeat are not 4-D tensors of one type"))
    t = M + prefill(scale="arg", args=", %scale_arg: f32")
    splits.append("// The scores are scaled by a function argument, not a constant.\n" + warn_before(t, "prefill", "is not part of a recognised attention: the scores are scaled by a factor that is not a constant"))
    t = M + prefill(scale="split", consts=SCALE_CONSTS.replace("%qroot = arith.constant 0.", "%qroot = arith.constant -0."))
    splits.append("// SDPA's split with the Q factor negated: the scale is negative.\n" + warn_before(t, "prefill", "is not part of a recognised attention: the scores are not scaled by a positive finite constant (the factors multiply to -0.5"))
    t = M + prefill(scale="split", consts=SCALE_CONSTS).replace("%c = arith.truncf %kroot : f64 to f32", "%c = arith.negf %o : f32")
    splits.append("// The factor on K^T is not a constant.\n" + warn_before(t, "prefill", "is not part of a recognised attention: the scores are scaled by a factor that is not a constant"))

    splits.append(BUFFERS)
    return REFUSALS_HEADER + "\n// -----\n\n".join(splits)


def mini_input():
    return ("// A one-layer prefill/decode pair in the importer's form (docs/model-ir.md),\n"
            "// small enough to read: Hq=4, Hkv=2, D=4, prompt 8, decode cache 8.\n" + M + prefill()
            + decode())


def printed(value):
    """How MLIR prints an f32 attribute: `%.6e` when that reads back exactly, else 9
    significant digits."""
    value = np.float32(value)
    short = f"{float(value):.6e}"
    return short if np.float32(float(short)) == value else f"{float(value):.9g}"


def scales_test():
    # Each form of a constant scale, with the scale the select must carry, computed here from
    # the constants as the model applies them (f32 arithmetic), not by the pass.
    root = np.float32(0.70710678118654757)
    scale_forms = [
        ("scalar", "an f32 constant", printed(0.5)),
        ("f64", "an f64 constant truncated to f32 inside the generic (the importer's form for\n"
                "// head dims whose 1/sqrt(D) is inexact in f32)", printed(np.float32(0.35355339059327379))),
        ("splat", "a 0-d splat tensor operand", printed(0.5)),
        ("split", "split over Q and K^T as SDPA's decomposition does: the product of the two\n"
                  "// f32 factors, rounded to f32", printed(np.float64(root) * np.float64(root))),
        ("none", "absent: the logits are Q.K^T itself", printed(1.0)),
    ]
    scale_splits = []
    for form, what, expected in scale_forms:
        text = M + prefill(scale=form, consts=SCALE_CONSTS if form != "scalar" else "")
        scale_splits.append(f"// The scale is {what}.\n// CHECK-LABEL: func.func @prefill\n"
                            f"// CHECK: snapkv.select %{{{{.*}}}} window 2 capacity 6 scale {expected} :\n"
                            + text)
    return SCALES_HEADER + "\n// -----\n\n".join(scale_splits)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    generated_files.add_arguments(parser)
    args = parser.parse_args(argv)
    outputs = {
        "test/Transforms/compress-kv-cache-refusals.mlir": refusals_test(),
        "test/Transforms/Inputs/compress-kv-cache-mini.mlir": mini_input(),
        "test/Transforms/compress-kv-cache-scales.mlir": scales_test(),
    }
    return generated_files.emit(outputs, args, "scripts/gen-compress-kv-cache-tests.py",
                                "python3 scripts/gen-compress-kv-cache-tests.py")


if __name__ == "__main__":
    sys.exit(main())
