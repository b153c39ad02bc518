#!/usr/bin/env python3
"""The GPU device check: correctness of the compiled selects against the numpy reference,
then timing against PyTorch (eager and torch.compile) and the achieved bandwidth.

Run it on the GPU machine through ``benchmarks/gpu/run_device.sh`` (see README.md there);
run it here with ``--emulation`` to test everything but the GPU: the same harness linked with
the same kernel loops lowered for the CPU (``build/gpu-bench/snapkv-cpu-emul``).

(a) Correctness. Inputs from numpy (fixed seeds) go through ``snapkv-gpu-bench batch`` (one
    process for all cases); indices must equal ``snapkv.reference.select`` exactly and the
    gathered K/V must be bit-identical to the reference's gather. Small configs of
    ``configs.py`` at L in {W, C-1, C, C+1, 2C+3, 5C+1} with random inputs, plus exact-tie
    inputs (every key row of a kv head equal; all queries zero); the big configs at
    ``--big-lengths``. Every other case passes its inputs in device memory. A mismatch is
    classified: NEAR-TIE when every differing position has a reference pooled score within
    1e-5 (relative) of the k-th score (f32 kernels vs a float64 reference) and the K/V rows are
    the rows of the GPU's own indices; FAIL otherwise.
(b) Timing. ``snapkv-gpu-bench time`` for the big configs at ``--timing-lengths`` (wall clock
    per call; also per-kernel GPU event times and a run with the memory pool kept), against the
    PyTorch port of the official ``update_kv`` (``torch_baselines.py``), eager and
    ``torch.compile`` (mode default, dynamic=None: the first L compiles a static graph, the
    second L recompiles with dynamic shapes, the third reuses it; each first call's time, i.e.
    the compile, is reported separately), median of ``--repeats`` runs after 3 warm-ups, wall
    clock around the call + ``torch.cuda.synchronize()``, CUDA events too.
(c) Bandwidth: bytes = e*B*Hkv*L*D (K read once) + 2*e*B*Hc*S*D (compacted K and V written),
    e = element bytes, S = min(L, C); GB/s = bytes / time; % of a 4.3 TB/s roofline.

Everything is printed and, with ``--report`` (default ``$OUT/device_report.md`` when ``$OUT``
is set), written there after every section. A failing part is reported and the rest runs.
"""

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))

from configs import BIG, SMALL, Config  # noqa: E402

from snapkv import reference  # noqa: E402
from snapkv.dtypes import f32_to_bf16  # noqa: E402

ROOFLINE_GBS = 4300.0
NEAR_TIE_REL = 1e-5
START = time.monotonic()


def elapsed():
    return time.monotonic() - START


class Report:
    def __init__(self, path):
        self.path = Path(path) if path else None
        self.lines = []

    def __call__(self, text=""):
        print(text, flush=True)
        self.lines.append(str(text))
        self.save()  # after every line: a run killed by its time limit keeps what it printed

    def save(self):
        if self.path:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text("\n".join(self.lines) + "\n")
            except OSError as e:
                print(f"(could not write {self.path}: {e})", flush=True)


# ---------------------------------------------------------------------------------------
# Inputs.
def make_inputs(c: Config, length, seed, kind="rand"):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((c.batch, c.q_heads, c.window, c.dim), dtype=np.float32) * 2
    k = rng.standard_normal((c.batch, c.kv_heads, length, c.dim), dtype=np.float32)
    v = rng.standard_normal((c.batch, c.kv_heads, length, c.dim), dtype=np.float32)
    if kind == "ties":  # every key row of a kv head equal: every column gets the same votes
        k = np.ascontiguousarray(np.broadcast_to(k[:, :, :1, :], k.shape))
    elif kind == "zeroq":  # all logits 0: uniform rows, equal votes for every prefix column
        q = np.zeros_like(q)
    if c.elem == "bf16":
        return f32_to_bf16(q), f32_to_bf16(k), f32_to_bf16(v)
    if c.elem == "f16":
        return q.astype(np.float16), k.astype(np.float16), v.astype(np.float16)
    return q, k, v


@dataclass
class Case:
    config: Config
    length: int
    kind: str
    seed: int
    device_inputs: bool
    tag: str = ""
    status: str = "ERROR"
    detail: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ident(self):
        return f"{self.config.name}.L{self.length}.{self.kind}.s{self.seed}"


def small_cases():
    cases = []
    for ci, c in enumerate(SMALL):
        lengths = sorted({c.window, c.capacity - 1, c.capacity, c.capacity + 1,
                          2 * c.capacity + 3, 5 * c.capacity + 1})
        for li, length in enumerate(lengths):
            if length >= c.window:
                cases.append(Case(c, length, "rand", 100 * ci + li, (ci + li) % 2 == 1))
        cases.append(Case(c, 3 * c.capacity, "ties", 100 * ci + 50, ci % 2 == 0))
        cases.append(Case(c, 2 * c.capacity + 1, "zeroq", 100 * ci + 60, ci % 2 == 1))
    return cases


# Seeds of the big cases, chosen (scanning 7000..7029 with the reference) for the largest
# smallest relative gap between the k-th and (k+1)-th pooled score over heads; the gaps are
# 1.1e-5 .. 4.4e-5, against about 1e-6 of f32 rounding in the scores. Other L: 7000 + i.
BIG_SEEDS = {
    ("big_bf16_expand", 4096): 7015, ("big_bf16_mean", 4096): 7000,
    ("big_f32_expand", 4096): 7019, ("big_f32_mean", 4096): 7000,
    ("big_bf16_expand", 16384): 7024, ("big_bf16_mean", 16384): 7013,
    ("big_f32_expand", 16384): 7024, ("big_f32_mean", 16384): 7016,
}


def big_cases(names, lengths):
    cases = []
    for c in BIG:
        if names and c.name not in names:
            continue
        for li, length in enumerate(lengths):
            seed = BIG_SEEDS.get((c.name, length), 7000 + li)
            cases.append(Case(c, length, "rand", seed, li % 2 == 1))
    return cases


# ---------------------------------------------------------------------------------------
# (a) correctness
def _reference(args):
    c, q, k, v = args
    sel = reference.select(q, k, v, c.window, c.capacity, **c.options())
    return sel


def near_tie(case, sel, got_idx):
    """Whether every difference between got_idx and the reference is a near-tie."""
    c = case.config
    keep = c.capacity - c.window
    if case.length < c.capacity or sel.pooled.shape[-1] == 0:
        return False, "bypass case differs"
    worst = 0.0
    for b in range(got_idx.shape[0]):
        for h in range(got_idx.shape[1]):
            want, got = sel.indices[b, h], got_idx[b, h]
            if np.array_equal(want, got):
                continue
            pooled = sel.pooled[b, h]
            order = reference.rank(pooled)
            thresh = pooled[order[keep - 1]]
            if not np.array_equal(want[keep:], got[keep:]):
                return False, f"window part differs (b={b}, h={h})"
            ws, gs = set(want[:keep].tolist()), set(got[:keep].tolist())
            if any(j < 0 or j >= pooled.size for j in gs):
                return False, f"index out of range (b={b}, h={h})"
            if ws != gs:
                for j in ws ^ gs:
                    rel = abs(pooled[j] - thresh) / max(abs(thresh), 1e-300)
                    worst = max(worst, rel)
            else:  # same set, different order (order score): compare the swapped scores
                for x, y in zip(want[:keep], got[:keep]):
                    if x != y:
                        rel = abs(pooled[x] - pooled[y]) / max(abs(pooled[x]), 1e-300)
                        worst = max(worst, rel)
    return worst <= NEAR_TIE_REL, f"max rel. distance of differing scores {worst:.2e}"


def threshold_gap(case, sel):
    """Smallest relative gap between the k-th and (k+1)-th pooled score over heads."""
    c = case.config
    keep = c.capacity - c.window
    if case.length <= c.capacity or sel.pooled.shape[-1] <= keep:
        return None
    gaps = []
    for b in range(sel.pooled.shape[0]):
        for h in range(sel.pooled.shape[1]):
            s = np.sort(sel.pooled[b, h][~np.isnan(sel.pooled[b, h])])[::-1]
            if s.size > keep:
                gaps.append((s[keep - 1] - s[keep]) / max(abs(s[keep - 1]), 1e-300))
    return min(gaps) if gaps else None


def compare(case, sel, prefix, k_in, v_in):
    c = case.config
    heads = c.cache_heads
    kept = min(case.length, c.capacity)
    np_elem = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[c.elem]
    try:
        idx = np.fromfile(f"{prefix}.idx.bin", dtype=np.int64)
        keys = np.fromfile(f"{prefix}.keys.bin", dtype=np_elem)
        vals = np.fromfile(f"{prefix}.values.bin", dtype=np_elem)
    except OSError as e:
        return "ERROR", f"no output ({e.strerror})"
    want_rows = c.batch * heads * kept
    if idx.size != want_rows or keys.size != want_rows * c.dim or vals.size != keys.size:
        return "FAIL", f"output sizes {idx.size}/{keys.size}/{vals.size}, want {want_rows} rows"
    idx = idx.reshape(c.batch, heads, kept)
    keys = keys.reshape(c.batch, heads, kept, c.dim)
    vals = vals.reshape(c.batch, heads, kept, c.dim)
    same_idx = np.array_equal(idx, sel.indices)
    same_kv = (keys.tobytes() == np.ascontiguousarray(sel.keys).tobytes()
               and vals.tobytes() == np.ascontiguousarray(sel.values).tobytes())
    gap = threshold_gap(case, sel)
    gap_text = f"; min rel. gap at the k-th score {gap:.1e}" if gap is not None else ""
    if same_idx and same_kv:
        return "PASS", "indices exact, K/V bit-identical" + gap_text
    if same_idx:
        return "FAIL", "indices exact but K/V rows differ"
    # Are the K/V rows at least the rows of the GPU's own indices?
    group = c.q_heads // c.kv_heads
    source = np.arange(heads) // group if c.gqa == "expand" else np.arange(heads)
    safe = np.clip(idx, 0, case.length - 1)
    own_k = np.take_along_axis(k_in[:, source], safe[..., None], axis=2)
    own_v = np.take_along_axis(v_in[:, source], safe[..., None], axis=2)
    consistent = (np.array_equal(safe, idx) and own_k.tobytes() == keys.tobytes()
                  and own_v.tobytes() == vals.tobytes())
    ok, why = near_tie(case, sel, idx)
    ndiff = int(np.sum(np.any(idx != sel.indices, axis=-1)))
    if ok and consistent:
        return "NEAR-TIE", (f"indices differ in {ndiff} head(s), only at near-ties ({why}); "
                            "K/V = rows of its indices")
    return "FAIL", (f"indices differ in {ndiff} head(s) ({why}); K/V "
                    f"{'consistent' if consistent else 'NOT consistent'} with its own indices")


def run_harness(exe, args, timeout):
    try:
        p = subprocess.run([str(exe)] + [str(a) for a in args], capture_output=True,
                           text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return 124, out, err + f"\n(timed out after {timeout} s)"


def tail(text, n=3):
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])


def correctness(rep, exe, cases, workdir, jobs, timeout, torch_check):
    rep("## (a) Correctness: compiled select vs `snapkv.reference` (numpy, float64)")
    rep()
    rep(f"Executable: `{exe.relative_to(REPO) if exe.is_relative_to(REPO) else exe}`; "
        f"{len(cases)} cases. PASS = indices exact and gathered K/V bit-identical.")
    rep()
    workdir.mkdir(parents=True, exist_ok=True)
    manifest = workdir / "manifest.txt"
    inputs = {}
    t0 = time.monotonic()
    with manifest.open("w") as m:
        for i, case in enumerate(cases):
            q, k, v = make_inputs(case.config, case.length, case.seed, case.kind)
            base = workdir / f"c{i:03d}"
            for name, arr in (("q", q), ("k", k), ("v", v)):
                arr.tofile(f"{base}.{name}.bin")
            case.tag = str(base)
            inputs[i] = (q, k, v)
            m.write(f"{case.config.name} {base}.q.bin {base}.k.bin {base}.v.bin {base}.out"
                    f"{' device' if case.device_inputs else ''}\n")
    gen_s = time.monotonic() - t0

    t0 = time.monotonic()
    rc, out, err = run_harness(exe, ["batch", manifest], timeout)
    run_s = time.monotonic() - t0
    if rc != 0:
        rep(f"batch run exited with {rc}: {tail(err)}")
    # Cases without output (a crash stops the batch): run them one process each.
    missing = [i for i, c in enumerate(cases) if not Path(f"{c.tag}.out.idx.bin").exists()]
    if missing and rc != 0:
        rep(f"re-running {len(missing)} case(s) without output one by one")
        for i in missing:
            c = cases[i]
            args = ["run", c.config.name, f"{c.tag}.q.bin", f"{c.tag}.k.bin", f"{c.tag}.v.bin",
                    f"{c.tag}.out"] + (["--device-inputs"] if c.device_inputs else [])
            rc1, out1, err1 = run_harness(exe, args, timeout)
            if rc1 != 0:
                c.detail = f"harness exit {rc1}: {tail(err1 or out1)}"

    t0 = time.monotonic()
    work = [(c.config, *inputs[i][:3]) for i, c in enumerate(cases)]
    if jobs > 1:
        # spawn, not fork: the parent may hold CUDA (torch) and thread pools.
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            sels = list(pool.map(_reference, work))
    else:
        sels = [_reference(w) for w in work]
    ref_s = time.monotonic() - t0

    for i, case in enumerate(cases):
        q, k, v = inputs[i]
        if case.detail.startswith("harness exit"):
            case.status = "ERROR"
            continue
        try:
            case.status, case.detail = compare(case, sels[i], f"{case.tag}.out", k, v)
        except Exception as e:  # noqa: BLE001
            case.status, case.detail = "ERROR", f"compare failed: {e!r}"
        if torch_check is not None and case.config.big and case.config.elem == "f32":
            case.extra["torch"] = torch_check(case, q, k, v, sels[i])
        for suffix in ("idx", "keys", "values"):
            Path(f"{case.tag}.out.{suffix}.bin").unlink(missing_ok=True)

    rep("| # | config | elem | gqa | order | kernel | L | C | inputs | in | status | detail |")
    rep("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, case in enumerate(cases):
        c = case.config
        detail = case.detail
        if "torch" in case.extra:
            detail += f"; torch eager port: {case.extra['torch']}"
        rep(f"| {i} | {c.name} | {c.elem} | {c.gqa} | {c.order} | {c.pooling} {c.kernel} | "
            f"{case.length} | {c.capacity} | {case.kind} | "
            f"{'dev' if case.device_inputs else 'host'} | **{case.status}** | {detail} |")
    counts = {s: sum(c.status == s for c in cases) for s in ("PASS", "NEAR-TIE", "FAIL", "ERROR")}
    rep()
    rep("Summary: " + ", ".join(f"{k} {v}" for k, v in counts.items())
        + f" (inputs {gen_s:.1f} s, harness {run_s:.1f} s, reference {ref_s:.1f} s)")
    rep()
    return counts


def make_torch_check(torch, device):
    """Kept-set comparison of the torch eager port with the reference (informational)."""
    from torch_baselines import BASELINES

    def check(case, q, k, v, sel):
        c = case.config
        if case.length < c.capacity:
            return "bypass"
        try:
            fn = BASELINES[c.gqa]
            with torch.no_grad():
                _, _, idx = fn(torch.from_numpy(q).to(device), torch.from_numpy(k).to(device),
                               torch.from_numpy(v).to(device), c.window, c.capacity, c.kernel,
                               c.pooling, return_indices=True)
            idx = idx.cpu().numpy()
            diff = sum(set(idx[b, h].tolist()) != set(sel.indices[b, h].tolist())
                       for b in range(idx.shape[0]) for h in range(idx.shape[1]))
            return ("same kept sets in every head" if diff == 0
                    else f"kept sets differ in {diff} head(s)")
        except Exception as e:  # noqa: BLE001
            return f"error {e!r}"
    return check


# ---------------------------------------------------------------------------------------
# (b) timing
def bytes_moved(c: Config, length):
    kept = min(length, c.capacity)
    e = c.elem_bytes
    return (e * c.batch * c.kv_heads * length * c.dim
            + 2 * e * c.batch * c.cache_heads * kept * c.dim)


# The big configs to time: the half-precision ones (--timing-configs picks others).
TIMED = [c for c in BIG if c.elem in ("f16", "bf16")]


def time_fused(rep, exe, lengths, repeats, per_call_cap, timeout, budget_end):
    results = {}
    for c in TIMED:
        for length in lengths:
            left = budget_end - elapsed()
            if left < 20:
                rep(f"- {c.name} L={length}: skipped (time budget)")
                continue
            cap = max(5.0, min(per_call_cap, left / 4))
            rc, out, err = run_harness(
                exe, ["time", c.name, length, repeats, "--max-seconds", f"{cap:.0f}"],
                min(timeout, cap * 3 + 60))
            res = None
            for line in out.splitlines():
                if line.startswith("RESULT "):
                    res = json.loads(line[len("RESULT "):])
                elif line.strip() and not line.startswith("device:"):
                    rep(f"- {line}")
            if rc != 0 or res is None:
                rep(f"- {c.name} L={length}: harness exit {rc}: {tail(err or out)}")
                continue
            results[(c.elem, c.gqa, length)] = res
    return results


def time_torch(rep, torch, lengths, repeats, budget_end, mode, device, results):
    """One pass over the timed configs: mode "eager" or "compile"; merges into results."""
    import torch._dynamo as dynamo
    from torch_baselines import BASELINES

    for attr in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(dynamo.config, attr):
            setattr(dynamo.config, attr, 256)
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def measure(fn, q, k, v, c, n):
        walls, events = [], []
        for _ in range(n):
            if device == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
            sync()
            t0 = time.perf_counter()
            if device == "cuda":
                start.record()
            out = fn(q, k, v, c.window, c.capacity, c.kernel, c.pooling)
            if device == "cuda":
                end.record()
            sync()
            walls.append((time.perf_counter() - t0) * 1e3)
            if device == "cuda":
                events.append(start.elapsed_time(end))
            del out
        return walls, events

    for c in TIMED:
        fn = BASELINES[c.gqa]
        if mode == "compile":
            # Fresh dynamo state per (dtype, gqa): static graph at the first L, automatic
            # dynamic-shape recompile at the second, reuse at the third.
            dynamo.reset()
            fn = torch.compile(fn)  # mode default, dynamic=None
        for length in lengths:
            res = results.setdefault((c.elem, c.gqa, length), {})
            if mode == "compile" and budget_end - elapsed() < 45:
                rep(f"- torch.compile {c.name} L={length}: skipped (time budget)")
                continue
            q = k = v = None
            try:
                gen = torch.Generator(device=device).manual_seed(length)
                q = torch.randn((c.batch, c.q_heads, c.window, c.dim), generator=gen,
                                device=device, dtype=torch.float32).mul_(2).to(dtypes[c.elem])
                k = torch.randn((c.batch, c.kv_heads, length, c.dim), generator=gen,
                                device=device, dtype=torch.float32).to(dtypes[c.elem])
                v = torch.randn((c.batch, c.kv_heads, length, c.dim), generator=gen,
                                device=device, dtype=torch.float32).to(dtypes[c.elem])
                with torch.no_grad():
                    if mode == "compile":
                        t0 = time.perf_counter()
                        out = fn(q, k, v, c.window, c.capacity, c.kernel, c.pooling)
                        sync()
                        res["compile_first_s"] = time.perf_counter() - t0
                        del out
                    measure(fn, q, k, v, c, 3)
                    walls, events = measure(fn, q, k, v, c, repeats)
                name = "eager" if mode == "eager" else "compiled"
                res[f"{name}_ms"] = statistics.median(walls)
                res[f"{name}_ms_min"] = min(walls)
                res[f"{name}_event_ms"] = statistics.median(events) if events else None
                res[f"{name}_runs"] = len(walls)
                rep(f"- torch {mode} {c.name} L={length}: median {res[f'{name}_ms']:.3f} ms, "
                    f"min {res[f'{name}_ms_min']:.3f} ms"
                    + (f", events {res[f'{name}_event_ms']:.3f} ms" if events else "")
                    + (f", first call {res['compile_first_s']:.1f} s" if mode == "compile"
                       else "") + f" ({len(walls)} runs)")
            except Exception as e:  # noqa: BLE001
                rep(f"- torch {mode} {c.name} L={length}: failed: {tail(repr(e), 2)[:400]}")
            q = k = v = None  # noqa: F841  (free the inputs before the next shape)
        if device == "cuda":
            torch.cuda.empty_cache()
    return results


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def tables(rep, fused, torch_res, lengths):
    rep("### Times (ms, median; wall clock per call incl. synchronisation)")
    rep()
    rep("fused = `snapkv-gpu-bench time`: the compiled select (its device allocations, D2D copies "
        "of q/k/v, 2 kernels, D2H copies of the results); kernels = sum of the 2 kernels' "
        "CUDA-event times; pool-keep = fused with the memory pool keeping freed memory; "
        "eager / compile = "
        "PyTorch port of the official update_kv (`torch_baselines.py`; outputs stay on the GPU); "
        "ratios > 1 mean the fused select is faster.")
    rep()
    rep("| dtype | gqa | L | fused | fused min | kernels | pool-keep | eager | compile | "
        "compile 1st call (s) | eager/fused | compile/fused | eager/kernels | compile/kernels |")
    rep("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in TIMED:
        for length in lengths:
            key = (c.elem, c.gqa, length)
            f = fused.get(key, {})
            t = torch_res.get(key, {})
            fw, kern = f.get("wall_ms_median"), f.get("kernel_ms_total_median")
            ew, cw = t.get("eager_ms"), t.get("compiled_ms")
            ratio = lambda a, b: None if (a is None or not b) else a / b  # noqa: E731
            rep(f"| {c.elem} | {c.gqa} | {length} | {fmt(fw)} | {fmt(f.get('wall_ms_min'))} | "
                f"{fmt(kern)} | {fmt(f.get('pool_keep_wall_ms_median'))} | {fmt(ew)} | {fmt(cw)} | "
                f"{fmt(t.get('compile_first_s'), '.1f')} | {fmt(ratio(ew, fw), '.2f')} | "
                f"{fmt(ratio(cw, fw), '.2f')} | {fmt(ratio(ew, kern), '.2f')} | "
                f"{fmt(ratio(cw, kern), '.2f')} |")
    rep()
    rep("Kernel breakdown (median ms per kernel: votes (statistics + column sums), "
        "select+gather; grid x block):")
    rep()
    for c in TIMED:
        for length in lengths:
            f = fused.get((c.elem, c.gqa, length))
            if f and f.get("kernel_ms"):
                parts = ", ".join(f"k{i} {ms:.3f} ({g[0]}x{g[1]})" for i, (ms, g) in
                                  enumerate(zip(f["kernel_ms"], f.get("kernel_grid", []))))
                rep(f"- {c.name} L={length}: {parts}; runs {f.get('runs')}, "
                    f"first call {f.get('first_ms', 0):.1f} ms")
    rep()
    rep("### Bandwidth vs a 4.3 TB/s roofline")
    rep()
    rep("bytes = e*B*Hkv*L*D (K read once) + 2*e*B*Hc*S*D (compacted K and V written), "
        "S = min(L, C), e = 2 (f16, bf16) or 4 (f32), Hc = 32 (expand) or 8 (mean); "
        "GB/s = bytes / median time; roofline time = bytes / 4.3 TB/s.")
    rep()
    rep("| dtype | gqa | L | MB | roofline us | fused GB/s | % roof | kernels GB/s | % roof | "
        "eager GB/s | % roof | compile GB/s | % roof |")
    rep("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in TIMED:
        for length in lengths:
            key = (c.elem, c.gqa, length)
            nbytes = bytes_moved(c, length)
            f, t = fused.get(key, {}), torch_res.get(key, {})
            cells = []
            for ms in (f.get("wall_ms_median"), f.get("kernel_ms_total_median"),
                       t.get("eager_ms"), t.get("compiled_ms")):
                if ms:
                    gbs = nbytes / (ms * 1e-3) / 1e9
                    cells += [f"{gbs:.1f}", f"{100 * gbs / ROOFLINE_GBS:.2f}"]
                else:
                    cells += ["-", "-"]
            rep(f"| {c.elem} | {c.gqa} | {length} | {nbytes / 1e6:.1f} | "
                f"{nbytes / (ROOFLINE_GBS * 1e9) * 1e6:.1f} | " + " | ".join(cells) + " |")
    rep()


# ---------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emulation", action="store_true",
                    help="use build/gpu-bench/snapkv-cpu-emul and skip the torch timing")
    ap.add_argument("--exe", type=Path, help="harness executable (default by mode)")
    ap.add_argument("--big-lengths", default="4096,16384")
    ap.add_argument("--big-configs", default="", help="comma-separated subset of the big configs")
    ap.add_argument("--no-small", action="store_true")
    ap.add_argument("--skip-correctness", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--timing-lengths", default=None,
                    help="default 8192,32768,131072 (none with --emulation)")
    ap.add_argument("--timing-configs", default="",
                    help="comma-separated big configs to time (default: f16 and bf16)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--budget", type=float, default=420.0,
                    help="seconds for the whole script; later parts are skipped past it")
    ap.add_argument("--per-call-cap", type=float, default=12.0,
                    help="max seconds of repeats per fused timing invocation")
    ap.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--report", default=None,
                    help="markdown report path (default $OUT/device_report.md if $OUT is set)")
    ap.add_argument("--torch-device", default=None, help="cuda (default when available) or cpu")
    args = ap.parse_args(argv)

    report_path = args.report or (os.path.join(os.environ["OUT"], "device_report.md")
                                  if os.environ.get("OUT") else None)
    rep = Report(report_path)
    exe = args.exe or (REPO / "build/gpu-bench" /
                       ("snapkv-cpu-emul" if args.emulation else "snapkv-gpu-bench"))
    exe = exe.resolve()
    budget_end = args.budget
    timing_lengths = [int(x) for x in (args.timing_lengths if args.timing_lengths is not None
                                       else ("" if args.emulation else "8192,32768,131072"))
                      .split(",") if x]

    rep(f"# snapkv GPU device check ({'CPU EMULATION' if args.emulation else 'GPU'})")
    rep()
    rep(f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}, host "
        f"{platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"numpy {np.__version__}")
    rc, out, err = run_harness(exe, ["info"], 60)
    rep(f"- harness `{exe.name} info`: {out.strip() or tail(err)} (exit {rc})")
    torch = None
    try:
        import torch as _torch
        torch = _torch
        rep(f"- torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"
            + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
    except Exception as e:  # noqa: BLE001
        rep(f"- torch not importable: {e!r}")
    torch_device = args.torch_device or ("cuda" if torch is not None and torch.cuda.is_available()
                                         else None)
    rep()
    rep.save()

    status = 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="snapkv-gpu-check-"))
    if not args.skip_correctness:
        try:
            cases = ([] if args.no_small else small_cases()) + big_cases(
                [n for n in args.big_configs.split(",") if n],
                [int(x) for x in args.big_lengths.split(",") if x])
            check = (make_torch_check(torch, torch_device)
                     if torch is not None and torch_device else None)
            timeout = 3600 if args.emulation else 300
            counts = correctness(rep, exe, cases, workdir, args.jobs, timeout, check)
            if counts["FAIL"] or counts["ERROR"]:
                status = 1
        except Exception:  # noqa: BLE001
            rep("correctness section failed:\n```\n" + traceback.format_exc() + "```")
            status = 1
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        rep.save()

    if args.timing_configs:
        TIMED[:] = [c for c in BIG if c.name in args.timing_configs.split(",")]
    if not args.skip_timing and timing_lengths:
        rep("## (b) Timing: B=1 Hq=32 Hkv=8 D=128 W=32 C=2048, kernel 5 avg, "
            f"L in {timing_lengths}")
        rep()
        fused, torch_res = {}, {}
        try:
            fused = time_fused(rep, exe, timing_lengths, args.repeats, args.per_call_cap,
                               600, budget_end)
        except Exception:  # noqa: BLE001
            rep("fused timing failed:\n```\n" + traceback.format_exc() + "```")
        rep.save()
        run_torch = torch is not None and torch_device and (
            not args.emulation or torch_device == "cpu")
        if run_torch:
            try:
                time_torch(rep, torch, timing_lengths, args.repeats, budget_end, "eager",
                           torch_device, torch_res)
            except Exception:  # noqa: BLE001
                rep("torch eager timing failed:\n```\n" + traceback.format_exc() + "```")
        else:
            rep("(torch timing skipped)")
        rep()
        # Tables now (in case the compile pass runs into the time limit), again after it.
        try:
            tables(rep, fused, torch_res, timing_lengths)
        except Exception:  # noqa: BLE001
            rep("tables failed:\n```\n" + traceback.format_exc() + "```")
        if run_torch and not args.no_compile:
            rep("## torch.compile pass")
            rep()
            try:
                time_torch(rep, torch, timing_lengths, args.repeats, budget_end, "compile",
                           torch_device, torch_res)
            except Exception:  # noqa: BLE001
                rep("torch.compile timing failed:\n```\n" + traceback.format_exc() + "```")
            rep()
            rep("## Final tables (with torch.compile)")
            rep()
            try:
                tables(rep, fused, torch_res, timing_lengths)
            except Exception:  # noqa: BLE001
                rep("tables failed:\n```\n" + traceback.format_exc() + "```")

    rep(f"Total time of the check: {elapsed():.0f} s.")
    rep.save()
    return status


if __name__ == "__main__":
    sys.exit(main())
