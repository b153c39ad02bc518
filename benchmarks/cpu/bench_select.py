#!/usr/bin/env python3
"""CPU benchmark of SnapKV selection: compiled ``snapkv.select`` vs numpy reference vs
PyTorch eager (a port of the official ``SnapKVCluster.update_kv``) vs ``torch.compile``.

Shape: Hq=32, Hkv=8, D=128, W=32, C=1024, kernel 5, avg pooling, gqa expand, order position,
f32; B=1 at L in {4096, 16384, 65536} and B=4 at L=16384 (``--lengths``, ``--batch4``). Every
implementation sees bit-identical inputs: an integer hash of each element's linear index
(exact in f32), computed once in numpy and, for the ``mlir-runner`` column, inside the
generated MLIR module.

Columns (medians of ``--runs`` after one warm-up; ratios from the same run; the compiled
select and score, PyTorch eager and ``torch.compile`` are timed interleaved, one call of each
per round, so that other load on the machine falls on all of them alike, each call after
``SETTLE_S`` of quiet so that it does not share the cores with the previous call's spinning
OpenMP threads):

* compiled ``snapkv.select``: ``snapkv-opt --snapkv-cpu-pipeline`` -> ``snapkv-translate`` ->
  ``clang -O3 -march=native -shared`` (LLVM optimisation runs), linked with libomp; the
  ``.so`` is called in process through ctypes (``snapkv.runtime``), each call timed
  alone (the fresh result buffers it returns are freed outside the timed span);
* compiled, runner ``--O3``: the same lowering JIT-compiled by ``mlir-runner --O3`` in a
  generated module that times each call with ``rtclock`` (``--skip-runner`` drops it);
* numpy reference: ``snapkv.reference.select`` (float64 internally);
* PyTorch eager ``update_kv`` on K/V already repeated to Hq heads (and once including the
  ``repeat_kv``), ``torch.set_num_threads(--threads)``;
* ``torch.compile`` of the same ``update_kv`` (inductor, CPU): the first call's time is the
  compile time (reported separately, inductor's FX graph cache off), then warm calls.

Also measured: the FMA peak of this machine (``fma_peak.c``, 1 and 2 threads) and the logits
phase: a module holding only ``snapkv.score`` (both scoring passes over the keys, pooling; no
top-k, no gather), compiled like the select, whose time gives a lower bound on the logits'
GFLOP/s (the pipeline computes the logits once, ``2*B*Hq*W*L*D`` FLOPs; everything else in
the score counts as logits time); and the same score compiled with ``keep-logits=false``,
which computes them twice: the difference is what keeping them saves.

Indices: compiled == numpy reference exactly; PyTorch (eager and compiled) vs the
reference as kept sets per head (``topk`` order is unspecified), with near-ties flagged.

Prints markdown tables; ``--write docs/benchmarks.md`` replaces (or appends) the section
between this script's markers in that file, ``--json FILE`` writes every number. Timings are
measurements, never pass/fail. The load average before and after is reported: a busy machine
distorts every column.
"""

import argparse
import ctypes
import datetime
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))
from snapkv import tools  # noqa: E402

HQ, HKV, D, W, C, KERNEL = 32, 8, 128, 32, 1024, 5
Q_AMP = 2.0  # power of two (exact); sharpens the softmax a little so votes have structure
SEEDS = {"q": 1, "k": 2, "v": 3}
RUNNER_LIBS = tools.runner_libs()   # with libomp: --snapkv-cpu-pipeline's parallel loops
AOT_CFLAGS = ("-O3", "-march=native")
BEGIN, END = "<!-- bench_select:cpu:begin -->", "<!-- bench_select:cpu:end -->"

# ---------------------------------------------------------------------------------------
# Deterministic inputs. hash(n) on the linear index n; the MLIR generator below emits the
# same integer ops, so numpy and the compiled module build bit-identical tensors.
_M1, _M2, _GOLD, _MASK = 2654435761, 2246822519, 0x9E3779B9, 0xFFFFFFFF


def fill(shape, seed, amp=1.0):
    n = np.arange(int(np.prod(shape)), dtype=np.uint64)
    h = (n * np.uint64(_M1) + np.uint64((seed * _GOLD) & _MASK)) & np.uint64(_MASK)
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(_M2)) & np.uint64(_MASK)
    h ^= h >> np.uint64(13)
    m = (h >> np.uint64(8)).astype(np.float32)  # 24 bits: exact in f32
    x = (m * np.float32(2.0 ** -23) - np.float32(1.0)) * np.float32(amp)  # exact, [-amp, amp)
    return x.reshape(shape)


def inputs(length, batch=1):
    q = fill((batch, HQ, W, D), SEEDS["q"], Q_AMP)
    k = fill((batch, HKV, length, D), SEEDS["k"])
    v = fill((batch, HKV, length, D), SEEDS["v"])
    return q, k, v


# ---------------------------------------------------------------------------------------
# MLIR module generation.
def _tt(shape, elem="f32"):
    return "tensor<" + "x".join(str(s) for s in shape) + "x" + elem + ">"


def select_types(batch, length):
    tq, tk = _tt((batch, HQ, W, D)), _tt((batch, HKV, length, D))
    tkv_out, tidx = _tt((batch, HQ, C, D)), _tt((batch, HQ, C), "i64")
    return tq, tk, tkv_out, tidx


# Not @select / @score: in a shared object a call to an exported `select` binds to libc's
# select(2) (loaded first), which crashes.
SELECT_FN, SCORE_FN = "snapkv_select", "snapkv_score"


def select_function(batch, length):
    """``@snapkv_select(q, k, v)``: one ``snapkv.select`` of the benchmark configuration."""
    tq, tk, tkv_out, tidx = select_types(batch, length)
    return f"""\
  func.func @{SELECT_FN}(%q: {tq}, %k: {tk}, %v: {tk}) -> ({tkv_out}, {tkv_out}, {tidx}) {{
    %ko, %vo, %idx = snapkv.select %q, %k, %v window {W} capacity {C} kernel {KERNEL}
        : ({tq}, {tk}, {tk}) -> ({tkv_out}, {tkv_out}, {tidx})
    return %ko, %vo, %idx : {tkv_out}, {tkv_out}, {tidx}
  }}"""


def score_function(batch, length):
    """``@snapkv_score(q, k)``: the scoring half alone (votes and pooled scores, no top-k)."""
    tq, tk = _tt((batch, HQ, W, D)), _tt((batch, HKV, length, D))
    tp = _tt((batch, HQ, length - W))
    return f"""\
  func.func @{SCORE_FN}(%q: {tq}, %k: {tk}) -> ({tp}, {tp}) {{
    %votes_init = tensor.empty() : {tp}
    %pooled_init = tensor.empty() : {tp}
    %votes, %pooled = snapkv.score %q, %k window {W} kernel {KERNEL}
        outs(%votes_init, %pooled_init : {tp}, {tp}) : ({tq}, {tk}) -> ({tp}, {tp})
    return %votes, %pooled : {tp}, {tp}
  }}"""


KEY_TILE = 64  # --snapkv-cpu-pipeline's default key-tile
LOGITS_FN = "snapkv_logits"


def logits_function(batch, length):
    """``@snapkv_logits(qT, k)``: the logits phase alone, as ``--snapkv-cpu-pipeline`` runs
    it inside the select: for each (batch, query head) in turn, every key tile in parallel
    computes a [T x W] tile of logits over D into the head's buffer (one buffer, reused by
    every head). The contraction and its tiling are the ones the formulation emits
    (``Formulation::logits``, tiled by its tile group), so the pipeline picks the same
    register tile; the queries come already transposed per kv head ([B, Hkv, G, D, W]), the
    keys as [B, Hkv, L/T, T, D]. Returns the last head's logits."""
    g, n = HQ // HKV, length // KEY_TILE
    tq = _tt((batch, HKV, g, D, W))
    tk = _tt((batch, HKV, n, KEY_TILE, D))
    tl = _tt((1, 1, n, KEY_TILE, 1, W))
    q_slice, k_slice = _tt((1, 1, 1, D, W)), _tt((1, 1, 1, KEY_TILE, D))
    o_slice = _tt((1, 1, 1, KEY_TILE, 1, W))
    return f"""\
  func.func @{LOGITS_FN}(%q: {tq}, %k: {tk}) -> {tl} {{
    %zero = arith.constant 0.0 : f32
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = arith.constant {batch * HQ} : index
    %heads = arith.constant {HQ} : index
    %group = arith.constant {g} : index
    %init = tensor.empty() : {tl}
    %last = scf.for %p = %c0 to %rows step %c1 iter_args(%buf = %init) -> ({tl}) {{
      %b = arith.divui %p, %heads : index
      %h = arith.remui %p, %heads : index
      %kv = arith.divui %h, %group : index
      %g = arith.remui %h, %group : index
      %row = scf.forall (%t) in ({n}) shared_outs(%o = %buf) -> ({tl}) {{
        %qs = tensor.extract_slice %q[%b, %kv, %g, 0, 0] [1, 1, 1, {D}, {W}] [1, 1, 1, 1, 1]
            : {tq} to {q_slice}
        %ks = tensor.extract_slice %k[%b, %kv, %t, 0, 0] [1, 1, 1, {KEY_TILE}, {D}] [1, 1, 1, 1, 1]
            : {tk} to {k_slice}
        %os = tensor.extract_slice %o[0, 0, %t, 0, 0, 0] [1, 1, 1, {KEY_TILE}, 1, {W}]
            [1, 1, 1, 1, 1, 1] : {tl} to {o_slice}
        %f = linalg.fill ins(%zero : f32) outs(%os : {o_slice}) -> {o_slice}
        %c = linalg.generic {{
            indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d4, d6, d5)>,
                             affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3, d6)>,
                             affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3, d4, d5)>],
            iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel",
                              "parallel", "reduction"]}}
            ins(%qs, %ks : {q_slice}, {k_slice}) outs(%f : {o_slice}) {{
        ^bb0(%a: f32, %x: f32, %acc: f32):
          %m = arith.mulf %a, %x fastmath<contract> : f32
          %s = arith.addf %acc, %m fastmath<contract> : f32
          linalg.yield %s : f32
        }} -> {o_slice}
        scf.forall.in_parallel {{
          tensor.parallel_insert_slice %c into %o[0, 0, %t, 0, 0, 0] [1, 1, 1, {KEY_TILE}, 1, {W}]
              [1, 1, 1, 1, 1, 1] : {o_slice} into {tl}
        }}
      }}
      scf.yield %row : {tl}
    }}
    return %last : {tl}
  }}"""


def _mlir_fill(name, shape, seed, amp):
    """linalg.generic that evaluates fill() for every element (same integer ops)."""
    dims = ", ".join(f"d{i}" for i in range(4))
    t = _tt(shape)
    lines = [
        f"    %{name}_e = tensor.empty() : {t}",
        f"    %{name} = linalg.generic {{indexing_maps = [affine_map<({dims}) -> ({dims})>],"
        f" iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\"]}}"
        f" outs(%{name}_e : {t}) {{",
        "    ^bb0(%out: f32):",
    ]
    for i in range(4):
        lines.append(f"      %i{i} = linalg.index {i} : index")
    lines += [
        f"      %s1 = arith.constant {shape[1]} : index",
        f"      %s2 = arith.constant {shape[2]} : index",
        f"      %s3 = arith.constant {shape[3]} : index",
        "      %a0 = arith.muli %i0, %s1 : index",
        "      %a1 = arith.addi %a0, %i1 : index",
        "      %a2 = arith.muli %a1, %s2 : index",
        "      %a3 = arith.addi %a2, %i2 : index",
        "      %a4 = arith.muli %a3, %s3 : index",
        "      %a5 = arith.addi %a4, %i3 : index",
        "      %n = arith.index_cast %a5 : index to i64",
        f"      %m1 = arith.constant {_M1} : i64",
        f"      %m2 = arith.constant {_M2} : i64",
        f"      %off = arith.constant {(seed * _GOLD) & _MASK} : i64",
        f"      %mask = arith.constant {_MASK} : i64",
        "      %c15 = arith.constant 15 : i64",
        "      %c13 = arith.constant 13 : i64",
        "      %c8 = arith.constant 8 : i64",
        "      %h0 = arith.muli %n, %m1 : i64",
        "      %h1 = arith.addi %h0, %off : i64",
        "      %h2 = arith.andi %h1, %mask : i64",
        "      %h3 = arith.shrui %h2, %c15 : i64",
        "      %h4 = arith.xori %h2, %h3 : i64",
        "      %h5 = arith.muli %h4, %m2 : i64",
        "      %h6 = arith.andi %h5, %mask : i64",
        "      %h7 = arith.shrui %h6, %c13 : i64",
        "      %h8 = arith.xori %h6, %h7 : i64",
        "      %h9 = arith.shrui %h8, %c8 : i64",
        "      %f0 = arith.sitofp %h9 : i64 to f32",
        f"      %ulp = arith.constant {2.0 ** -23:.17e} : f32",
        "      %one = arith.constant 1.0 : f32",
        f"      %amp = arith.constant {amp:.17e} : f32",
        "      %f1 = arith.mulf %f0, %ulp : f32",
        "      %f2 = arith.subf %f1, %one : f32",
        "      %f3 = arith.mulf %f2, %amp : f32",
        "      linalg.yield %f3 : f32",
        f"    }} -> {t}",
    ]
    return "\n".join(lines)


def runner_module(batch, length, iters):
    """@main for mlir-runner: build inputs, call the select once for warm-up plus `iters` timed
    times (each bracketed by rtclock, printed in ns), print a checksum of every result, then
    the indices of batch 0 from one more call, a line per head."""
    tq, tk, tkv_out, tidx = select_types(batch, length)
    sig = f"({tq}, {tk}, {tk}) -> ({tkv_out}, {tkv_out}, {tidx})"
    id4 = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
    red4 = "affine_map<(d0, d1, d2, d3) -> ()>"
    id3 = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"
    red3 = "affine_map<(d0, d1, d2) -> ()>"
    return f"""\
module {{
  func.func private @rtclock() -> f64
  func.func private @printI64(i64)
  func.func private @printF64(f64)
  func.func private @printComma()
  func.func private @printNewline()

{select_function(batch, length)}

  // Sum of every element of every result: makes all three results live.
  func.func @checksum(%ko: {tkv_out}, %vo: {tkv_out}, %idx: {tidx}) -> f64 {{
    %zero = arith.constant 0.0 : f64
    %e = tensor.empty() : tensor<f64>
    %init = linalg.fill ins(%zero : f64) outs(%e : tensor<f64>) -> tensor<f64>
    %s0 = linalg.generic {{indexing_maps = [{id4}, {id4}, {red4}],
        iterator_types = ["reduction", "reduction", "reduction", "reduction"]}}
        ins(%ko, %vo : {tkv_out}, {tkv_out}) outs(%init : tensor<f64>) {{
    ^bb0(%a: f32, %b: f32, %acc: f64):
      %ae = arith.extf %a : f32 to f64
      %be = arith.extf %b : f32 to f64
      %t0 = arith.addf %acc, %ae : f64
      %t1 = arith.addf %t0, %be : f64
      linalg.yield %t1 : f64
    }} -> tensor<f64>
    %s1 = linalg.generic {{indexing_maps = [{id3}, {red3}],
        iterator_types = ["reduction", "reduction", "reduction"]}}
        ins(%idx : {tidx}) outs(%s0 : tensor<f64>) {{
    ^bb0(%i: i64, %acc: f64):
      %f = arith.sitofp %i : i64 to f64
      %t = arith.addf %acc, %f : f64
      linalg.yield %t : f64
    }} -> tensor<f64>
    %r = tensor.extract %s1[] : tensor<f64>
    return %r : f64
  }}

  func.func @main() {{
{_mlir_fill("q", (batch, HQ, W, D), SEEDS["q"], Q_AMP)}
{_mlir_fill("k", (batch, HKV, length, D), SEEDS["k"], 1.0)}
{_mlir_fill("v", (batch, HKV, length, D), SEEDS["v"], 1.0)}
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = arith.constant {iters + 1} : index
    %fzero = arith.constant 0.0 : f64
    %ns_per_s = arith.constant 1.0e9 : f64
    %qe = tensor.empty() : {tq}
    %sum = scf.for %it = %c0 to %n step %c1 iter_args(%acc = %fzero) -> (f64) {{
      // q + (rtclock() * 0): a zero the compiler cannot prove, so the call can be neither
      // hoisted out of the loop nor merged with another one. Built outside the timed span.
      %now = func.call @rtclock() : () -> f64
      %z64 = arith.mulf %now, %fzero : f64
      %z = arith.truncf %z64 : f64 to f32
      %qi = linalg.generic {{indexing_maps = [{id4}, {id4}],
          iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
          ins(%q : {tq}) outs(%qe : {tq}) {{
      ^bb0(%a: f32, %o: f32):
        %r = arith.addf %a, %z : f32
        linalg.yield %r : f32
      }} -> {tq}
      %t0 = func.call @rtclock() : () -> f64
      %ko, %vo, %idx = func.call @{SELECT_FN}(%qi, %k, %v) {{no_inline}} : {sig}
      %t1 = func.call @rtclock() : () -> f64
      %dt = arith.subf %t1, %t0 : f64
      %dns = arith.mulf %dt, %ns_per_s : f64
      %ns = arith.fptosi %dns : f64 to i64
      func.call @printI64(%ns) : (i64) -> ()
      func.call @printNewline() : () -> ()
      %cs = func.call @checksum(%ko, %vo, %idx) : ({tkv_out}, {tkv_out}, {tidx}) -> f64
      %acc2 = arith.addf %acc, %cs : f64
      scf.yield %acc2 : f64
    }}
    func.call @printF64(%sum) : (f64) -> ()
    func.call @printNewline() : () -> ()
    // Untimed call on the plain inputs: one line of comma-separated indices per head.
    %ko, %vo, %idx = func.call @{SELECT_FN}(%q, %k, %v) {{no_inline}} : {sig}
    %nh = arith.constant {HQ} : index
    %ns_ = arith.constant {C} : index
    scf.for %h = %c0 to %nh step %c1 {{
      scf.for %s = %c0 to %ns_ step %c1 {{
        %x = tensor.extract %idx[%c0, %h, %s] : {tidx}
        func.call @printI64(%x) : (i64) -> ()
        func.call @printComma() : () -> ()
      }}
      func.call @printNewline() : () -> ()
    }}
    return
  }}
}}
"""


# ---------------------------------------------------------------------------------------
# Ours, ahead of time: a shared object called through ctypes.
class AotFunction:
    """``@name`` of `body` (one function) compiled to a shared object and loaded."""

    def __init__(self, body, name, cache_dir=None, options=""):
        from snapkv import runtime
        text = "module {\n" + body + "\n}\n"
        pipeline = runtime.PIPELINE.replace("asserts=report", f"asserts=report {options}")
        self.library = runtime.compile_library(text, cache_dir=cache_dir, cflags=AOT_CFLAGS,
                                               label=name, pipeline=pipeline)
        self.text = text
        self.function = runtime.CompiledFunction(ctypes.CDLL(str(self.library.path)), name,
                                                 runtime.signature(text, name))

    def times(self, arrays, runs):
        """Seconds of `runs` calls after one warm-up call."""
        return self.function.time_call(*arrays, repeat=runs + 1)[1:]

    def __call__(self, *arrays):
        return self.function(*arrays)


def lowered_facts(text, opt_tool):
    """Whether the lowered select uses a parallel runtime and how many vector types it has."""
    done = subprocess.run([str(opt_tool), "--snapkv-cpu-pipeline", "-"], input=text,
                          capture_output=True, text=True, check=True)
    return {"parallel": bool(re.search(r"__kmpc|omp\.|mlirAsync", done.stdout)),
            "vector_types": len(re.findall(r"vector<", done.stdout))}


def omp_threads():
    """The thread count libomp gives a parallel region in this process."""
    try:
        lib = ctypes.CDLL(str(tools.llvm_lib_dir() / "libomp.so"))
        return int(lib.omp_get_max_threads())
    except OSError:
        return None


# ---------------------------------------------------------------------------------------
# Ours, JIT: mlir-runner --O3 on the generated module.
def run_jit(batch, length, iters, opt_tool, runner, workdir):
    """Lower and run the runner module. Returns (per-call seconds after the warm-up call,
    indices [HQ, C] of batch 0, checksum, process wall seconds, whether it needed a larger
    stack)."""
    src = Path(workdir) / f"select_B{batch}_L{length}.mlir"
    low = Path(workdir) / f"select_B{batch}_L{length}.llvm.mlir"
    src.write_text(runner_module(batch, length, iters))
    subprocess.run([str(opt_tool), "--snapkv-cpu-pipeline", str(src), "-o", str(low)],
                   check=True)
    cmd = [str(runner), "--O3", str(low), "-e", "main", "-entry-point-result=void",
           "-shared-libs=" + ",".join(str(p) for p in RUNNER_LIBS)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    big_stack = False
    if proc.returncode == -signal.SIGSEGV:
        print("  mlir-runner: SIGSEGV with the default stack; retrying with an unlimited stack",
              flush=True)
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_raise_stack)
        big_stack = True
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"mlir-runner failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = [ln.strip() for ln in proc.stdout.strip().splitlines()]
    if len(lines) != iters + 1 + 1 + HQ:
        raise RuntimeError(f"unexpected mlir-runner output ({len(lines)} lines):\n"
                           f"{proc.stdout[:2000]}")
    times = [int(x) * 1e-9 for x in lines[:iters + 1]][1:]  # drop the warm-up call
    checksum = float(lines[iters + 1])
    # printComma writes ", " after every element, including the last one of a row.
    idx = np.array([[int(x) for x in ln.rstrip(",").split(",")] for ln in lines[iters + 2:]],
                   dtype=np.int64)
    return times, idx, checksum, wall, big_stack


def _raise_stack():
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))


# ---------------------------------------------------------------------------------------
# FMA peak.
def fma_peak(workdir, threads=(1, 2)):
    """{threads: GFLOP/s} from fma_peak.c compiled here with -march=native."""
    exe = Path(workdir) / "fma_peak"
    subprocess.run([str(tools.require(tools.clang(), "clang")), "-O2", "-march=native",
                    "-pthread", str(HERE / "fma_peak.c"), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe), *map(str, threads)], capture_output=True, text=True,
                         check=True).stdout
    peak = {}
    for m in re.finditer(r"threads=(\d+) gflops=([\d.]+) lanes=(\d+)", out):
        peak[int(m.group(1))] = float(m.group(2))
        lanes = int(m.group(3))
    return peak, lanes


def logits_flops(batch, length):
    """FLOPs of one pass of the logits: B*Hq*W*L dot products of length D (2 FLOPs per
    multiply-add). The default pipeline computes them once per select (``keep-logits``)."""
    return 2 * batch * HQ * W * length * D


# ---------------------------------------------------------------------------------------
# Helpers.
def median_time(fn, runs, warmup=1):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), ts


def compare_sets(a, b, pooled, rtol=1e-5):
    """Per-head kept-set comparison of [H, C] index arrays. Returns (#heads identical,
    #heads differing, whether every differing position is a near-tie of the k-th largest
    reference pooled score)."""
    same, diff, all_near_ties = 0, 0, True
    for h in range(a.shape[0]):
        sa, sb = set(a[h].tolist()), set(b[h].tolist())
        if sa == sb:
            same += 1
            continue
        diff += 1
        p = pooled[h]
        kth = np.sort(p)[::-1][C - W - 1]
        delta = [j for j in sa ^ sb if j < len(p)]
        if len(delta) != len(sa ^ sb) or any(abs(p[j] - kth) > rtol * abs(kth) for j in delta):
            all_near_ties = False
    return same, diff, all_near_ties


def same_rows(a, b):
    """Heads (of [H, S, D] gathered rows) whose SETS of rows are identical, bytewise:
    PyTorch's compiled update_kv returns rows, not indices."""
    return sum({r.tobytes() for r in a[h]} == {r.tobytes() for r in b[h]}
               for h in range(a.shape[0]))


def near_tie_note(result):
    same, diff, near = result
    text = f"{same}/{HQ} heads equal"
    if diff:
        text += f", {diff} differ ({'only at near-ties' if near else 'NOT only at near-ties'})"
    return text


def machine_info():
    info = {"cpu": platform.processor() or "unknown", "cores": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for ln in out.splitlines():
            key, _, val = ln.partition(":")
            if key.strip() == "Model name":
                info["cpu"] = val.strip()
            if key.strip() == "Flags":
                flags = set(val.split())
                info["simd"] = "AVX-512" if "avx512f" in flags else (
                    "AVX2+FMA" if {"avx2", "fma"} <= flags else "other")
    except OSError:
        pass
    return info


def versions(runner):
    import torch
    v = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__}
    try:  # numpy's BLAS matters for the reference's einsum
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        v["numpy BLAS"] = f"{blas['name']} {blas['version']}"
    except Exception:  # older numpy: no dict mode
        pass
    try:
        out = subprocess.run([str(runner), "--version"], capture_output=True, text=True).stdout
        m = re.search(r"LLVM version ([\w.\-]+)", out)
        v["llvm/mlir"] = m.group(1) if m else out.strip().splitlines()[0]
    except (OSError, IndexError):
        v["llvm/mlir"] = "unknown"
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
    v["snapkv-mlir"] = ((rev.stdout.strip() + (" + local changes" if dirty else ""))
                        if rev.returncode == 0 else "uncommitted tree")
    return v


def load_average():
    return os.getloadavg()


def env_notes():
    return {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_CORETYPE",
                                        "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                        "KMP_AFFINITY", "OMP_PROC_BIND")
            if k in os.environ}


def write_section(path, text, begin=BEGIN, end=END):
    path = Path(path)
    if not path.is_absolute():
        path = REPO / path
    section = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in old and end in old:
        new = old[:old.index(begin)] + section + old[old.index(end) + len(end):].lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
    print(f"wrote {path}")


def ms(s):
    return f"{s * 1e3:.2f}" if s is not None else "n/a"


def speedup(s, base):
    return f"{base / s:.2f}x" if s is not None and base is not None else "n/a"


# ---------------------------------------------------------------------------------------
# After a parallel region, OpenMP worker threads keep spinning for a while before they sleep
# (libomp, ours: KMP_BLOCKTIME, 200 ms by default; PyTorch's pool likewise): called right
# after another implementation, a function would share the cores with its idle threads.
SETTLE_S = 0.3


def interleaved(fns, runs):
    """{name: median seconds}: one warm-up call of each, then `runs` rounds calling every
    function once per round, so that load from other processes falls on all of them alike;
    each call starts after SETTLE_S of quiet, so that none pays for the previous one's
    spinning threads. A function that returns a float has timed itself (e.g. without
    freeing its results)."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            time.sleep(SETTLE_S)
            start = time.perf_counter()
            out = fn()
            times[name].append(out if isinstance(out, float) else time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def measure_shape(batch, length, args, workdir):
    import torch
    from torch_update_kv import SnapKVCluster, repeat_kv, update_kv

    from snapkv import reference

    q, k, v = inputs(length, batch)
    row = {"B": batch, "L": length}
    note = {"B": batch, "L": length}
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    n_rep = HQ // HKV
    tk_rep, tv_rep = repeat_kv(tk, n_rep).contiguous(), repeat_kv(tv, n_rep).contiguous()
    cluster = SnapKVCluster(W, C, KERNEL, "avgpool")

    ref = reference.select(q, k, v, W, C, KERNEL, "avg")
    ref_idx, pooled = ref.indices, ref.pooled

    fns = {
        # Baseline: the official function on K/V already repeated to Hq heads.
        "torch": lambda: cluster.update_kv(tk_rep, tq, tv_rep, None, n_rep),
        # Same inputs as snapkv.select (Hkv heads), so the GQA repeat is included.
        "torch_rep": lambda: update_kv(tq, tk, tv, W, C, KERNEL, "avg"),
    }
    with torch.inference_mode():
        _, _, torch_idx = cluster.update_kv(tk_rep, tq, tv_rep, None, n_rep,
                                            return_indices=True)
        torch_idx = torch_idx.numpy()
        note["torch_vs_ref"] = [compare_sets(torch_idx[b], ref_idx[b], pooled[b])
                                for b in range(batch)]
        if not args.skip_torch_compile:
            torch._dynamo.reset()
            compiled = torch.compile(cluster.update_kv, backend="inductor", dynamic=False)
            start = time.perf_counter()
            keys_c, _ = compiled(tk_rep, tq, tv_rep, None, n_rep)
            row["torch_compile_s"] = time.perf_counter() - start
            fns["torch_compiled"] = lambda: compiled(tk_rep, tq, tv_rep, None, n_rep)
            keys_e, _ = cluster.update_kv(tk_rep, tq, tv_rep, None, n_rep)
            note["torch_compiled_same_rows"] = sum(
                same_rows(keys_c[b].numpy(), keys_e[b].numpy()) for b in range(batch))

    if not args.skip_compiled:
        select = AotFunction(select_function(batch, length), SELECT_FN, args.cache_dir)
        keys_o, values_o, idx = select(q, k, v)
        note["compile_s"] = select.library.seconds
        note["compiled_eq_ref"] = int((idx == ref_idx).all(axis=-1).sum())
        note["compiled_kv_exact"] = bool(keys_o.tobytes() == ref.keys.tobytes()
                                         and values_o.tobytes() == ref.values.tobytes())
        note["compiled_vs_torch"] = [compare_sets(idx[b], torch_idx[b], pooled[b])
                                     for b in range(batch)]
        note.update(lowered_facts(select.text, args.snapkv_opt))
        score = AotFunction(score_function(batch, length), SCORE_FN, args.cache_dir)
        recompute = AotFunction(score_function(batch, length), SCORE_FN, args.cache_dir,
                                options="keep-logits=false")
        # The logits phase alone, checked against numpy on the last head it returns.
        group = HQ // HKV
        q_t = np.ascontiguousarray(
            q.reshape(batch, HKV, group, W, D).transpose(0, 1, 2, 4, 3))
        k_t = k.reshape(batch, HKV, length // KEY_TILE, KEY_TILE, D)
        logits = AotFunction(logits_function(batch, length), LOGITS_FN, args.cache_dir)
        (last,) = logits(q_t, k_t)
        want = np.einsum("wd,ntd->ntw", q[-1, HQ - 1].astype(np.float64),
                         k_t[-1, -1].astype(np.float64))
        note["logits_err"] = float(np.abs(last[0, 0, :, :, 0] - want).max()
                                   / np.abs(want).max())
        if note["logits_err"] > 1e-5:
            raise SystemExit(f"logits module wrong at B={batch} L={length}: relative error "
                             f"{note['logits_err']:.2e}")
        # Bare calls (the returned buffers are freed outside the timed span).
        fns["logits"] = lambda: logits.function.time_call(q_t, k_t)[0]
        fns["compiled"] = lambda: select.function.time_call(q, k, v)[0]
        fns["score"] = lambda: score.function.time_call(q, k)[0]
        fns["score_recompute"] = lambda: recompute.function.time_call(q, k)[0]

    with torch.inference_mode():
        row.update(interleaved(fns, args.runs))
    print(f"  B={batch} L={length}: torch and compiled done", flush=True)

    if not args.skip_numpy:
        row["numpy"], _ = median_time(lambda: reference.select(q, k, v, W, C, KERNEL, "avg"),
                                      args.numpy_runs)
    if not args.skip_compiled and not args.skip_runner:
        times, jit_idx, checksum, wall, stack = run_jit(batch, length, args.runs,
                                                        args.snapkv_opt, args.mlir_runner,
                                                        workdir)
        row["compiled_o3"], row["stack_o3"] = statistics.median(times), stack
        note.update(checksum=checksum, runner_wall=wall,
                    o3_same=bool((jit_idx == idx[0]).all()))
    return row, note


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,16384,65536",
                    help="comma-separated prompt lengths at B=1")
    ap.add_argument("--batch4", type=int, default=16384,
                    help="prompt length of the B=4 row (0: no such row)")
    ap.add_argument("--runs", type=int, default=7, help="timed runs per implementation (>=5)")
    ap.add_argument("--numpy-runs", type=int, default=5, help="timed runs of the reference")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch.set_num_threads (ours: libomp's default or OMP_NUM_THREADS)")
    ap.add_argument("--snapkv-opt", default=str(tools.snapkv_opt()))
    ap.add_argument("--mlir-runner", default=str(tools.mlir_runner()))
    ap.add_argument("--cache-dir", help="where the compiled .so files are kept "
                    "(default: snapkv.runtime's cache)")
    ap.add_argument("--skip-compiled", action="store_true",
                    help="no compiled columns (e.g. before snapkv-opt is built)")
    ap.add_argument("--skip-runner", action="store_true", help="no mlir-runner --O3 column")
    ap.add_argument("--skip-numpy", action="store_true", help="no numpy reference column")
    ap.add_argument("--skip-torch-compile", action="store_true", help="no torch.compile column")
    ap.add_argument("--keep", metavar="DIR", help="keep the generated/lowered MLIR in DIR")
    ap.add_argument("--write", metavar="MD", help="replace/append the section in this file")
    ap.add_argument("--json", metavar="FILE", help="write every measurement as JSON")
    args = ap.parse_args()
    if args.runs < 5:
        ap.error("--runs must be >= 5")
    if args.numpy_runs < 1:
        ap.error("--numpy-runs must be >= 1")
    os.environ["SNAPKV_OPT"] = args.snapkv_opt   # what snapkv.runtime compiles with

    import torch
    import torch._inductor.config as inductor_config
    inductor_config.fx_graph_cache = False   # time a cold compile

    torch.set_num_threads(args.threads)
    shapes = [(1, int(x)) for x in args.lengths.split(",") if x]
    if args.batch4:
        shapes.append((4, args.batch4))
    mach, vers = machine_info(), versions(args.mlir_runner)
    load_before = load_average()
    omp = omp_threads()
    print(f"machine: {mach['cpu']}, {mach['cores']} cores ({mach.get('simd')}); torch threads: "
          f"{torch.get_num_threads()}; OpenMP threads (omp_get_max_threads): {omp}; "
          f"env: {env_notes() or 'none'}; load average {load_before[0]:.2f}", flush=True)

    workdir = args.keep or tempfile.mkdtemp(prefix="snapkv_bench_")
    os.makedirs(workdir, exist_ok=True)
    peak, lanes = fma_peak(workdir)
    print("FMA peak: " + ", ".join(f"{t} thread(s) {g:.1f} GFLOP/s" for t, g in peak.items()),
          flush=True)

    rows, notes = [], []
    for batch, length in shapes:
        row, note = measure_shape(batch, length, args, workdir)
        rows.append(row)
        notes.append(note)
    # Again at the end; the better of the two is the peak (other load only lowers it).
    peak_end, _ = fma_peak(workdir)
    print("FMA peak at the end: " + ", ".join(f"{t} thread(s) {g:.1f} GFLOP/s"
                                                for t, g in peak_end.items()), flush=True)
    peak_runs = {t: (peak[t], peak_end[t]) for t in peak}
    peak = {t: max(peak[t], peak_end[t]) for t in peak}
    load_after = load_average()
    threads = torch.get_num_threads()
    report = render(rows, notes, peak, lanes, threads, omp, mach, vers, load_before,
                    load_after, args)
    print()
    print(report["text"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": datetime.datetime.now().isoformat(timespec="minutes"),
                       "machine": mach, "versions": vers, "env": env_notes(),
                       "torch_threads": threads, "omp_threads": omp,
                       "load_before": load_before, "load_after": load_after,
                       "fma_peak_gflops": peak, "fma_peak_runs": peak_runs,
                       "simd_lanes": lanes,
                       "rows": rows, "notes": notes}, f, indent=1, default=str)
        print(f"wrote {args.json}")
    if args.write:
        write_section(args.write, report["markdown"])


def render(rows, notes, peak, lanes, threads, omp, mach, vers, load_before, load_after, args):
    head = ["B", "L", "compiled `snapkv.select` (ms)", "compiled, runner `--O3` (ms)",
            "numpy reference (ms)", f"PyTorch eager `update_kv` (ms, {threads} threads)",
            "PyTorch incl. `repeat_kv` (ms)", "`torch.compile` `update_kv` (ms)",
            "compiled vs PyTorch", "compiled `--O3` vs PyTorch", "numpy vs PyTorch",
            "`torch.compile` vs PyTorch"]
    table = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in rows:
        table.append("| " + " | ".join([
            str(r["B"]), str(r["L"]), ms(r.get("compiled")),
            ms(r.get("compiled_o3")) + ("\\*" if r.get("stack_o3") else ""),
            ms(r.get("numpy")), ms(r["torch"]), ms(r["torch_rep"]), ms(r.get("torch_compiled")),
            speedup(r.get("compiled"), r["torch"]), speedup(r.get("compiled_o3"), r["torch"]),
            speedup(r.get("numpy"), r["torch"]), speedup(r.get("torch_compiled"), r["torch"]),
        ]) + " |")
    if any(r.get("stack_o3") for r in rows):
        table += ["", "\\* crashed (SIGSEGV) under mlir-runner with the default stack; measured "
                      "with the stack limit raised to the hard limit."]
    two = peak.get(2) or max(peak.values())
    logits = ["| B | L | logits alone (ms) | logits GFLOP/s | % of the 2-thread FMA peak "
              f"({two:.1f} GFLOP/s) | `snapkv.score` (ms) | share of the select | score as "
              "logits GFLOP/s (lower bound) | % of peak | score, `keep-logits=false` (ms) | "
              "saved by keeping the logits (ms) |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("score") is None or r.get("compiled") is None:
            continue
        flops = logits_flops(r["B"], r["L"])
        alone = flops / r["logits"] * 1e-9
        g = flops / r["score"] * 1e-9
        again = r.get("score_recompute")
        line = (f"| {r['B']} | {r['L']} | {ms(r['logits'])} | {alone:.1f} | "
                f"{alone / two * 100:.0f}% | {ms(r['score'])} | "
                f"{r['score'] / r['compiled'] * 100:.0f}% | {g:.1f} | {g / two * 100:.0f}% | "
                f"{ms(again)} | {ms(again - r['score']) if again is not None else 'n/a'} |")
        logits.append(line)
    compile_lines = []
    for r, n in zip(rows, notes):
        parts = []
        if "torch_compile_s" in r:
            parts.append(f"torch.compile first call (cold compile) {r['torch_compile_s']:.1f} s")
        if "compile_s" in n:
            parts.append(f"ours: snapkv-opt + snapkv-translate + clang {n['compile_s']:.1f} s "
                         "(0 if the .so was cached)")
        if parts:
            compile_lines.append(f"B={r['B']} L={r['L']}: " + "; ".join(parts))
    checks = []
    for n in notes:
        parts = ["PyTorch eager vs reference: "
                 + "; ".join(near_tie_note(x) for x in n["torch_vs_ref"])]
        if "torch_compiled_same_rows" in n:
            parts.append(f"`torch.compile` keeps the same K rows as eager: "
                         f"{n['torch_compiled_same_rows']}/{n['B'] * HQ} heads")
        if "compiled_eq_ref" in n:
            parts.append(f"compiled == numpy reference (exact, in order): "
                         f"{n['compiled_eq_ref']}/{n['B'] * HQ} heads, gathered K/V bit-identical: "
                         f"{'yes' if n['compiled_kv_exact'] else 'NO'}")
        if "logits_err" in n:
            parts.append(f"logits alone vs numpy (float64), last head: max error "
                         f"{n['logits_err']:.1e} of the largest logit")
        if "o3_same" in n:
            parts.append(f"`mlir-runner --O3` same indices: {'yes' if n['o3_same'] else 'NO'}")
        checks.append(f"B={n['B']} L={n['L']}: " + "; ".join(parts))
    facts = [n for n in notes if "parallel" in n]
    load = (f"1-min load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
            f"(5-min {load_before[1]:.2f} / {load_after[1]:.2f})")
    text = "\n".join([
        "\n".join(table), "",
        "Speed-up = PyTorch eager update_kv time / implementation time (>1: faster).", "",
        "\n".join(logits), "",
        f"FMA peak (fma_peak.c, {lanes}-lane f32 FMAs, 12 accumulators): "
        + ", ".join(f"{t} thread(s) {g:.1f} GFLOP/s" for t, g in peak.items()),
        f"threads: torch {threads}, OpenMP {omp} (OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')})",
        load, *compile_lines, *checks,
        *[f"B={n['B']} L={n['L']}: lowered select uses a parallel runtime: "
          f"{'yes' if n['parallel'] else 'NO'}; vector types in the lowered IR: "
          f"{n['vector_types']}" for n in facts],
    ])
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    md = [
        "## CPU: `snapkv.select` vs numpy reference vs PyTorch eager",
        "",
        f"Measured {date} with `python3 benchmarks/cpu/bench_select.py --write "
        "docs/benchmarks.md`.",
        "",
        f"* Machine: {mach['cpu']}, {mach['cores']} cores ({mach.get('simd', '?')}); {load}.",
        "* Software: " + ", ".join(f"{k} {v}" for k, v in vers.items()) + ".",
        f"* Shape: Hq={HQ}, Hkv={HKV}, D={D}, W={W}, C={C}, kernel {KERNEL}, avg pooling, gqa "
        "expand, order position, f32. All implementations get the same hashed inputs.",
        f"* Median of {args.runs} runs after one warm-up (numpy: {args.numpy_runs}). The "
        "compiled select and score, PyTorch eager (both columns) and `torch.compile` are timed "
        "interleaved (one call of each per round), so other load falls on all of them alike, "
        f"each call after {SETTLE_S} s of quiet (OpenMP threads spin for a while after a "
        "parallel region; without the pause the next call shares the cores with them); "
        "numpy and `mlir-runner` run after them.",
        "* compiled: `snapkv-opt --snapkv-cpu-pipeline`, `snapkv-translate` (LLVM bitcode), "
        f"`clang {' '.join(AOT_CFLAGS)} -shared` (LLVM optimisation runs), linked with libomp; "
        f"called in process through ctypes, {omp} OpenMP threads. runner `--O3`: the same "
        "lowering JIT-compiled by `mlir-runner --O3`, each call timed with `rtclock`.",
        f"* PyTorch: eager port of the official `SnapKVCluster.update_kv` on K/V already "
        f"repeated to Hq heads, `torch.set_num_threads({threads})`; the `repeat_kv` column "
        "starts from Hkv heads like `snapkv.select`. `torch.compile`: the same call, inductor "
        "on CPU, `dynamic=False`, warm calls (compile time below).",
        "* numpy: `snapkv.reference.select` (float64 internally).",
        f"* Environment: {env_notes() or 'no OMP/BLAS variables set'}.",
        "",
        "\n".join(table),
        "",
        "Logits phase. FLOPs counted: the logits, `2*B*Hq*W*L*D` (the pipeline computes "
        "them once and keeps them for the votes, `keep-logits`). *Logits alone*: a module "
        "holding only the select's logits contraction, tiled as the select tiles it (each "
        "(batch, query head) in turn; its key tiles in parallel, each a [64 keys x W] tile "
        "over D into the head's buffer), compiled by the same pipeline "
        "(the same register tile) and checked against numpy; its rate is the phase's own. "
        "*`snapkv.score`*: a module holding only the scoring (both passes over the keys, "
        "softmax statistics, votes, pooling; no top-k, no gather); its time also pays for "
        "everything else in the score, so the logits rate computed from it is a lower "
        "bound. The same score compiled with `keep-logits=false` computes the logits a "
        "second time instead of writing and reading them back: the difference is what "
        "keeping them saves.",
        "",
        "\n".join(logits),
        "",
        f"FMA peak: `benchmarks/cpu/fma_peak.c` (`clang -O2 -march=native`), each thread a "
        f"loop of 12 independent {lanes}-lane f32 FMAs (2 FLOPs per lane), median of 5, run "
        "before and after the measurements; the better run: "
        + ", ".join(f"{t} thread(s) {g:.1f} GFLOP/s" for t, g in peak.items()) + ".",
        "",
        *[f"* {ln}" for ln in compile_lines + checks],
    ]
    return {"text": text, "markdown": "\n".join(md)}


if __name__ == "__main__":
    main()
