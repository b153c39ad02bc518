#!/usr/bin/env python3
"""CPU benchmark of SnapKV selection: compiled ``snapkv.select`` vs numpy reference vs
PyTorch eager (a port of the official ``SnapKVCluster.update_kv``).

Shape: B=1, Hq=32, Hkv=8, D=128, W=32, C=1024, kernel 5, avg pooling, gqa expand, f32,
L in {4096, 16384}. Every implementation sees bit-identical inputs: they come from an
integer hash of the element's linear index, evaluated once in numpy and once inside the
generated MLIR module (exact in f32, so no transcendental-function rounding differences).

Prints a markdown table; ``--write docs/benchmarks.md`` replaces (or appends) the section
between this script's markers in that file. Timings are measurements, never pass/fail.
"""

import argparse
import datetime
import functools
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
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from snapkv import tools  # noqa: E402

B, HQ, HKV, D, W, C, KERNEL = 1, 32, 8, 128, 32, 1024, 5
Q_AMP = 2.0  # power of two (exact); sharpens the softmax a little so votes have structure
SEEDS = {"q": 1, "k": 2, "v": 3}
RUNNER_LIBS = tools.runner_libs()
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


def inputs(length):
    q = fill((B, HQ, W, D), SEEDS["q"], Q_AMP)
    k = fill((B, HKV, length, D), SEEDS["k"])
    v = fill((B, HKV, length, D), SEEDS["v"])
    return q, k, v


# ---------------------------------------------------------------------------------------
# MLIR module generation.
def _tt(shape, elem="f32"):
    return "tensor<" + "x".join(str(s) for s in shape) + "x" + elem + ">"


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


def mlir_module(length, iters):
    """@main: build inputs, call @select once for warm-up plus `iters` timed times (each
    bracketed by rtclock, printed in ns), print a checksum of every result, then print the
    indices of one more call for the cross-check."""
    tq, tk = _tt((B, HQ, W, D)), _tt((B, HKV, length, D))
    tkv_out, tidx = _tt((B, HQ, C, D)), _tt((B, HQ, C), "i64")
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

  func.func @select(%q: {tq}, %k: {tk}, %v: {tk}) -> ({tkv_out}, {tkv_out}, {tidx}) {{
    %ko, %vo, %idx = snapkv.select %q, %k, %v window {W} capacity {C} kernel {KERNEL}
        : {sig}
    return %ko, %vo, %idx : {tkv_out}, {tkv_out}, {tidx}
  }}

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
{_mlir_fill("q", (B, HQ, W, D), SEEDS["q"], Q_AMP)}
{_mlir_fill("k", (B, HKV, length, D), SEEDS["k"], 1.0)}
{_mlir_fill("v", (B, HKV, length, D), SEEDS["v"], 1.0)}
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
      %ko, %vo, %idx = func.call @select(%qi, %k, %v) {{no_inline}} : {sig}
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
    %ko, %vo, %idx = func.call @select(%q, %k, %v) {{no_inline}} : {sig}
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


def lower(length, iters, opt_tool, workdir):
    """Generate the module and lower it with --snapkv-cpu-pipeline. Returns (path, info)."""
    src = Path(workdir) / f"select_L{length}.mlir"
    low = Path(workdir) / f"select_L{length}.llvm.mlir"
    src.write_text(mlir_module(length, iters))
    t = time.perf_counter()
    subprocess.run([str(opt_tool), "--snapkv-cpu-pipeline", str(src), "-o", str(low)], check=True)
    lowered = low.read_text()
    return low, {
        "lower_s": time.perf_counter() - t,
        # The compiled module is single-threaded unless the pipeline emitted a parallel
        # runtime (OpenMP / async); say which.
        "parallel": bool(re.search(r"\b(omp\.|async\.|__kmpc|mlirAsync)", lowered)),
        "vector_types": len(re.findall(r"vector<", lowered)),
    }


def run_compiled(low, iters, runner, extra=()):
    """Run the lowered module under mlir-runner. Returns (per-call seconds after the
    warm-up call, indices [HQ, C], checksum, wall seconds of the whole runner process,
    whether it needed a raised stack limit)."""
    cmd = [str(runner), *extra, str(low), "-e", "main", "-entry-point-result=void",
           "-shared-libs=" + ",".join(str(p) for p in RUNNER_LIBS)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    big_stack = False
    if proc.returncode == -signal.SIGSEGV:
        # Generated code that allocas inside loops overflows the default stack; measure
        # anyway with the largest stack allowed, and say so in the results.
        print(f"  {' '.join(extra) or 'default'}: mlir-runner SIGSEGV with the default stack; "
              "retrying with an unlimited stack", flush=True)
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_raise_stack)
        big_stack = True
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"mlir-runner failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = proc.stdout
    lines = [ln.strip() for ln in out.strip().splitlines()]
    if len(lines) != iters + 1 + 1 + HQ:
        raise RuntimeError(f"unexpected mlir-runner output ({len(lines)} lines):\n{out[:2000]}")
    times = [int(x) * 1e-9 for x in lines[:iters + 1]][1:]  # drop the warm-up call
    checksum = float(lines[iters + 1])
    # printComma writes ", " after every element, including the last one of a row.
    idx = np.array([[int(x) for x in ln.rstrip(",").split(",")] for ln in lines[iters + 2:]],
                   dtype=np.int64)
    return times, idx, checksum, wall, big_stack


def _raise_stack():
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))


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
    """Per-head kept-set comparison. Returns (#heads identical, #heads differing, whether
    every differing position is a near-tie of the k-th largest reference pooled score)."""
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


def machine_info():
    info = {"cpu": platform.processor() or "unknown", "cores": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for ln in out.splitlines():
            key, _, val = ln.partition(":")
            if key.strip() == "Model name":
                info["cpu"] = val.strip()
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
    v["snapkv-mlir"] = rev.stdout.strip() if rev.returncode == 0 else "uncommitted tree"
    return v


def write_section(path, text):
    path = Path(path)
    if not path.is_absolute():
        path = REPO / path
    section = f"{BEGIN}\n{text.rstrip()}\n{END}\n"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + section + old[old.index(END) + len(END):].lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
    print(f"wrote {path}")


def near_tie_note(result):
    same, diff, near = result
    text = f"{same}/{HQ} heads equal"
    if diff:
        text += f", {diff} differ ({'only at near-ties' if near else 'NOT only at near-ties'})"
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,16384", help="comma-separated prompt lengths")
    ap.add_argument("--runs", type=int, default=7, help="timed runs per implementation (>=5)")
    ap.add_argument("--snapkv-opt", default=str(tools.snapkv_opt()))
    ap.add_argument("--mlir-runner", default=str(tools.mlir_runner()))
    ap.add_argument("--skip-compiled", action="store_true",
                    help="only numpy and torch (e.g. before snapkv-opt is built)")
    ap.add_argument("--keep", metavar="DIR", help="keep the generated/lowered MLIR in DIR")
    ap.add_argument("--write", metavar="MD", help="replace/append the section in this file")
    args = ap.parse_args()
    if args.runs < 5:
        ap.error("--runs must be >= 5")

    import torch
    from torch_update_kv import SnapKVCluster, repeat_kv, update_kv

    from snapkv import reference

    threads = os.cpu_count()
    torch.set_num_threads(threads)
    lengths = [int(x) for x in args.lengths.split(",")]
    mach, vers = machine_info(), versions(args.mlir_runner)
    env_notes = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                                            "OMP_NUM_THREADS", "MKL_NUM_THREADS")
                 if k in os.environ}
    load_before = os.getloadavg()[0]
    print(f"machine: {mach['cpu']}, {mach['cores']} cores; torch threads: "
          f"{torch.get_num_threads()}; env: {env_notes or 'none'}", flush=True)

    workdir = args.keep or tempfile.mkdtemp(prefix="snapkv_bench_")
    os.makedirs(workdir, exist_ok=True)
    rows, notes = [], []
    for length in lengths:
        q, k, v = inputs(length)
        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        n_rep = HQ // HKV
        tk_rep, tv_rep = repeat_kv(tk, n_rep).contiguous(), repeat_kv(tv, n_rep).contiguous()
        cluster = SnapKVCluster(W, C, KERNEL, "avgpool")
        row = {"L": length}

        with torch.inference_mode():
            # Baseline: the official function on K/V already repeated to Hq heads.
            row["torch"], _ = median_time(
                functools.partial(cluster.update_kv, tk_rep, tq, tv_rep, None, n_rep), args.runs)
            # Same inputs as snapkv.select (Hkv heads), so the GQA repeat is included.
            row["torch_rep"], _ = median_time(
                functools.partial(update_kv, tq, tk, tv, W, C, KERNEL, "avg"), args.runs)
            _, _, torch_idx = cluster.update_kv(tk_rep, tq, tv_rep, None, n_rep,
                                                return_indices=True)
        torch_idx = torch_idx[0].numpy()

        row["numpy"], _ = median_time(
            functools.partial(reference.select, q, k, v, W, C, KERNEL, "avg"), args.runs)
        ref = reference.select(q, k, v, W, C, KERNEL, "avg")
        ref_idx, pooled = ref.indices[0], ref.pooled[0]
        note = {"L": length, "torch_vs_ref": compare_sets(torch_idx, ref_idx, pooled)}

        if not args.skip_compiled:
            low, info = lower(length, args.runs, args.snapkv_opt, workdir)
            # As documented (no LLVM IR optimisation in mlir-runner by default) and with --O3.
            times, comp_idx, checksum, wall, stack = run_compiled(low, args.runs,
                                                                  args.mlir_runner)
            times3, comp_idx3, _, _, stack3 = run_compiled(low, args.runs, args.mlir_runner,
                                                           ["--O3"])
            row["stack"], row["stack_o3"] = stack, stack3
            row["compiled"] = statistics.median(times)
            row["compiled_o3"] = statistics.median(times3)
            note.update(info, checksum=checksum, runner_wall=wall,
                        compiled_vs_torch=compare_sets(comp_idx, torch_idx, pooled),
                        compiled_eq_ref=int((comp_idx == ref_idx).all(axis=-1).sum()),
                        o3_same=bool((comp_idx3 == comp_idx).all()))
        rows.append(row)
        notes.append(note)
        print(f"L={length} done", flush=True)

    def ms(s):
        return f"{s * 1e3:.2f}" if s is not None else "n/a"

    def speedup(s, base):
        return f"{base / s:.2f}x" if s is not None else "n/a"

    head = ["L", "compiled `snapkv.select` (ms)", "compiled, runner `--O3` (ms)",
            "numpy reference (ms)", f"PyTorch eager `update_kv` (ms, {threads} threads)",
            "PyTorch incl. `repeat_kv` (ms)", "compiled vs PyTorch", "compiled `--O3` vs PyTorch",
            "numpy vs PyTorch"]
    table = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in rows:
        c, c3 = r.get("compiled"), r.get("compiled_o3")
        table.append("| " + " | ".join([
            str(r["L"]), ms(c) + ("\\*" if r.get("stack") else ""),
            ms(c3) + ("\\*" if r.get("stack_o3") else ""),
            ms(r["numpy"]), ms(r["torch"]), ms(r["torch_rep"]),
            speedup(c, r["torch"]), speedup(c3, r["torch"]), speedup(r["numpy"], r["torch"]),
        ]) + " |")
    if any(r.get("stack") or r.get("stack_o3") for r in rows):
        table.append("")
        soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
        limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft >> 20} MiB"
        table.append(f"\\* crashed (SIGSEGV) under mlir-runner with the default {limit} stack; "
                     "measured with `ulimit -s unlimited` (the lowered code allocas inside "
                     "loops, so the stack grows with the trip count).")
    table = "\n".join(table)

    check_lines = []
    for n in notes:
        parts = [f"L={n['L']}: PyTorch vs numpy reference kept sets: "
                 + near_tie_note(n["torch_vs_ref"])]
        if "compiled_vs_torch" in n:
            parts.append("compiled vs PyTorch kept sets: " + near_tie_note(n["compiled_vs_torch"]))
            parts.append(f"compiled == numpy reference (exact, ascending): "
                         f"{n['compiled_eq_ref']}/{HQ} heads")
            parts.append(f"`--O3` run same indices: {'yes' if n['o3_same'] else 'NO'}")
        check_lines.append("; ".join(parts))

    # Other processes on the machine distort every column; record how busy it was.
    load = f"1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    print()
    print(table)
    print()
    print("Speed-up = PyTorch eager update_kv time / implementation time (>1: faster).")
    print(load)
    for ln in check_lines:
        print(ln)
    compiled_notes = [n for n in notes if "compiled_vs_torch" in n]
    if compiled_notes:
        agree = all(n["compiled_vs_torch"][1] == 0 for n in compiled_notes)
        print(f"sanity check: compiled and PyTorch indices agree as sets per head: "
              f"{'YES' if agree else 'NO'}")
    for n in compiled_notes:
        print(f"L={n['L']}: lowering {n['lower_s']:.2f}s, mlir-runner process "
              f"{n['runner_wall']:.2f}s, checksum {n['checksum']:.9g}, "
              f"vector types in lowered IR: {n['vector_types']}, parallel runtime: "
              f"{'yes' if n['parallel'] else 'no (single-threaded)'}")

    if args.write:
        date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        parallel = any(n.get("parallel") for n in notes)
        env_text = ", ".join(f"{k}={v}" for k, v in env_notes.items()) or "none set"
        md = [
            "## CPU: `snapkv.select` vs numpy reference vs PyTorch eager",
            "",
            f"Measured {date} with "
            "`python3 benchmarks/cpu/bench_select.py --write docs/benchmarks.md`.",
            "",
            f"* Machine: {mach['cpu']}, {mach['cores']} cores; {load}.",
            "* Software: " + ", ".join(f"{k} {v}" for k, v in vers.items()) + ".",
            f"* Shape: B={B}, Hq={HQ}, Hkv={HKV}, D={D}, W={W}, C={C}, kernel {KERNEL}, "
            "avg pooling, gqa expand, order position, f32. All implementations get the same "
            "hashed inputs.",
            f"* Median of {args.runs} runs after one warm-up.",
            "* Compiled: `snapkv-opt --snapkv-cpu-pipeline`, then `mlir-runner -e main "
            "-entry-point-result=void` (JIT; by default it runs no LLVM IR optimisation, the "
            "`--O3` column adds it); each call timed in-process with `rtclock`; "
            + ("a parallel runtime is used." if parallel else "single-threaded."),
            f"* PyTorch: eager port of the official `SnapKVCluster.update_kv` on K/V already "
            f"repeated to Hq heads, `torch.set_num_threads({threads})`; the `repeat_kv` column "
            "starts from Hkv heads like `snapkv.select`.",
            "* numpy: `snapkv.reference.select` (float64 internally); "
            f"BLAS environment: {env_text}.",
            "* `X vs PyTorch` = PyTorch eager `update_kv` time / X time (>1: X is faster).",
            "",
            table,
            "",
            "Index checks on the benchmark inputs:",
            "",
        ] + [f"* {ln}" for ln in check_lines]
        write_section(args.write, "\n".join(md))


if __name__ == "__main__":
    main()
