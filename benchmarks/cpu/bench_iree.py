#!/usr/bin/env python3
"""``snapkv.select`` and the rewritten tiny model through IREE (llvm-cpu, ``local-task``)
next to the project's CPU pipeline and PyTorch eager.

Select (the shape of bench_select.py: B=1, Hq=32, Hkv=8, D=128, W=32, C=1024, kernel 5,
avg pooling, gqa expand, f32, its hashed inputs), L in ``--lengths`` (4096, 16384, 65536),
for both orders:

* IREE: ``convert-snapkv-to-linalg`` output compiled by plain ``iree-compile``
  (``snapkv.iree_backend.IREE_COMPILE_FLAGS``: llvm-cpu, ``--iree-llvmcpu-target-cpu=host``;
  for the select also ``SELECT_COMPILE_FLAGS``, data tiling), twice: with our strategy
  (``snapkv-configure-lowering``'s choice carried onto IREE's dispatch roots,
  ``iree_backend.attach_strategy``) and with IREE's own tiles everywhere
  and called through ``iree.runtime`` on a ``local-task`` device with ``--workers`` (2)
  worker threads, inputs uploaded once; a call is timed until its indices are on the host.
  If plain ``iree-compile`` refuses the module for its stack limit, the script says so and,
  unless ``--plain-only``, measures it again with the limit raised
  (``--iree-llvmcpu-stack-allocation-limit`` and the workers' stack size): such numbers are
  marked in the table;
* ours: ``snapkv-opt --snapkv-cpu-pipeline`` ahead of time (bench_select.py's shared object,
  clang -O3, libomp);
* PyTorch eager ``update_kv`` (bench_select.py's port, K/V already repeated, ``--threads``).

Indices: IREE == numpy reference == ours, exactly (position and score order).

Tiny model (``test/Models/tiny_llama_dynamic.mlir`` rewritten by ``snapkv-compress-kv-cache``
with ``--window``/``--capacity``): the public ``prefill(ids)`` and ``decode(token, position,
caches)`` calls (numpy in, numpy out) of ``iree_backend.IreeModel`` (same ``local-task``
device) and ``snapkv.runtime.CompiledModel`` (clang -O2, libomp), prompt lengths
``--prompt-lengths``; decode runs on the compacted caches that prefill returned, at logical
position L. Logits of both are compared.

Select: the four timed interleaved (``bench_select.interleaved``), medians of ``--runs``;
model: medians of ``--runs`` after one warm-up; ratios from the same run. Prints markdown tables;
``--write docs/benchmarks.md`` replaces (or appends) this script's section there, ``--json``
writes every number. The load average before and after is printed: numbers taken on a busy
machine are noisy.
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_select as bs  # noqa: E402  (also puts python/ on sys.path)

from snapkv import iree_backend, mlirgen, reference, runtime  # noqa: E402

REPO = bs.REPO
FIXTURE = REPO / "test" / "Models" / "tiny_llama_dynamic.mlir"
BEGIN, END = "<!-- bench_iree:cpu:begin -->", "<!-- bench_iree:cpu:end -->"
STACK_LIMIT = "exceeded stack allocation limit"
# Only when plain iree-compile refuses the module (see the docstring): 1 MiB.
RAISED_STACK = ("--iree-llvmcpu-stack-allocation-limit=1048576",)
RAISED_WORKER_STACK = "--task_worker_stack_size=4194304"


def timed(fn, runs):
    fn()
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return statistics.median(out)


def iree_select(case, workers, allow_raise, carry_strategy=True):
    """(IreeSelect or None, whether the stack limit had to be raised, what plain
    iree-compile said if it refused the module)."""
    kwargs = dict(carry_strategy=carry_strategy, driver=iree_backend.TASK_DRIVER,
                  workers=workers)
    try:
        return iree_backend.IreeSelect.compile(case, **kwargs), False, None
    except mlirgen.ToolError as error:
        said = [ln.strip() for ln in str(error).splitlines() if "error:" in ln]
        why = (said or [str(error).strip()[:300]])[0]
        if STACK_LIMIT not in str(error) or not allow_raise:
            return None, False, why
    import iree.runtime as rt
    rt.flags.parse_flags(RAISED_WORKER_STACK)   # read when the device is created
    select = iree_backend.IreeSelect.compile(case, extra_args=RAISED_STACK, **kwargs)
    return select, True, why


def measure_select(length, order, args):
    """IREE with our strategy, IREE with its own tiles, ours and PyTorch eager, timed
    interleaved (bench_select.interleaved) in one run."""
    q, k, v = bs.inputs(length)
    case = mlirgen.Case(q, k, v, bs.W, bs.C, kernel=bs.KERNEL, order=order)
    ref = reference.select(q, k, v, bs.W, bs.C, bs.KERNEL, "avg", order=order)
    row = {"L": length, "order": order}
    fns = {"torch": torch_fn(length)}
    for key, carry in (("iree", True), ("iree_own", False)):
        select, raised, why = iree_select(case, args.workers, not args.plain_only, carry)
        row.update({f"{key}_raised_stack": raised, f"{key}_plain_error": why})
        if select is None:
            continue
        row[f"{key}_compile_s"] = select.compile_seconds
        dq, dk, dv = select.device_arrays(q, k, v)
        fns[key] = lambda s=select, d=(dq, dk, dv): s.call(*d)[2].to_host()
        keys, values, idx = select(q, k, v)
        row[f"{key}_vs_ref"] = index_check(idx, ref)
        row[f"{key}_kv_exact"] = gathered_exactly(k, v, keys, values, idx)
        row[f"{key}_idx"] = idx
    body = bs.select_function(1, length)
    if order != "position":
        body = body.replace(f"kernel {bs.KERNEL}\n", f"kernel {bs.KERNEL} order {order}\n")
    ours = bs.AotFunction(body, bs.SELECT_FN, args.cache_dir)
    fns["ours"] = lambda: ours.times((q, k, v), 1)[0]
    row.update(bs.interleaved(fns, args.runs))
    _, _, ours_idx = ours(q, k, v)
    row["ours_vs_ref"] = index_check(ours_idx, ref)
    for key in ("iree", "iree_own"):
        if f"{key}_idx" in row:
            row[f"{key}_eq_ours"] = bool((row.pop(f"{key}_idx") == ours_idx).all())
    print(f"  select L={length} order={order} done", flush=True)
    return row


def dispatch_times(case, carry_strategy, workers, min_time=0.3):
    """{dispatch: milliseconds} for each dispatch of the select of `case`: the standalone
    benchmark modules iree-compile writes (``--iree-hal-dump-executable-benchmarks-to``),
    each timed by ``iree-benchmark-module`` (its JSON output) on `workers` threads; None for
    one whose benchmark module iree-compile 3.13 cannot build (the pooling's)."""
    import shutil
    import subprocess
    import tempfile

    import iree.compiler
    tool = shutil.which("iree-benchmark-module")
    if tool is None:
        sys.exit("--dispatches needs iree-benchmark-module (pip iree-base-runtime)")
    module = iree_backend.select_module(case)
    choice = iree_backend.strategy(module) if carry_strategy else None
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        iree_backend.compile_vmfb(
            iree_backend.lower_to_upstream(module, choice),
            [*iree_backend.SELECT_COMPILE_FLAGS,
             f"--iree-hal-dump-executable-benchmarks-to={tmp}"], choice)
        for source in sorted(Path(tmp).glob("*.mlir")):
            vmfb = source.with_suffix(".vmfb")
            name = source.stem.removeprefix("module_").split("_embedded_")[0]
            try:
                vmfb.write_bytes(iree.compiler.compile_file(str(source)))
            except iree.compiler.CompilerToolError:
                out[name] = None
                continue
            done = subprocess.run(
                [tool, f"--module={vmfb}", "--device=local-task",
                 f"--task_topology_group_count={workers}", f"--benchmark_min_time={min_time}",
                 "--benchmark_format=json"], capture_output=True, text=True, check=True)
            bench = json.loads(done.stdout)["benchmarks"][0]
            out[name] = bench["real_time"] / {"us": 1e3, "ms": 1.0}[bench["time_unit"]]
    return out


def print_dispatches(length, args):
    """Both compilations' dispatches at `length`, the slowest first (position order)."""
    q, k, v = bs.inputs(length)
    case = mlirgen.Case(q, k, v, bs.W, bs.C, kernel=bs.KERNEL)
    own = dispatch_times(case, False, args.workers)
    ours = dispatch_times(case, True, args.workers)
    print(f"\nL={length}: dispatches, ms ({args.workers} workers; a dispatch in the "
          "threshold search runs 32 times per call)")
    print("| dispatch | IREE's own tiles | our strategy |\n|---|---:|---:|")
    def cell(times, name):
        return "n/a" if times.get(name) is None else f"{times[name]:.2f}"
    for name in sorted(own, key=lambda n: own[n] or 0.0, reverse=True):
        print(f"| `{name}` | {cell(own, name)} | {cell(ours, name)} |")


def gathered_exactly(k, v, keys, values, idx):
    """Whether keys/values are bit-exact copies of the rows `idx` names (expand: head h
    reads kv head h // G)."""
    heads = np.arange(idx.shape[1]) // (bs.HQ // bs.HKV)
    want_k = k[0][heads[:, None], idx[0]]
    want_v = v[0][heads[:, None], idx[0]]
    return keys[0].tobytes() == want_k.tobytes() and values[0].tobytes() == want_v.tobytes()


def index_check(idx, ref, rtol=1e-5):
    """'exact', 'same sets, order differs only at near-ties' or 'DIFFERENT ...'."""
    if (idx == ref.indices).all():
        return "exact"
    pooled = ref.pooled[0]
    for h in range(idx.shape[1]):
        a, b = idx[0, h], ref.indices[0, h]
        if set(a.tolist()) != set(b.tolist()):
            return f"DIFFERENT kept set (head {h})"
        for i in np.nonzero(a != b)[0]:
            x, y = pooled[h, a[i]], pooled[h, b[i]]   # window slots never differ
            if abs(x - y) > rtol * max(abs(x), abs(y)):
                return f"DIFFERENT order (head {h}, slot {i})"
    return "same sets, order differs only at near-ties"


def torch_fn(length):
    """One PyTorch eager ``update_kv`` call at `length` (K/V already repeated)."""
    import torch
    from torch_update_kv import SnapKVCluster, repeat_kv
    q, k, v = (torch.from_numpy(x) for x in bs.inputs(length))
    n_rep = bs.HQ // bs.HKV
    k_rep, v_rep = repeat_kv(k, n_rep).contiguous(), repeat_kv(v, n_rep).contiguous()
    cluster = SnapKVCluster(bs.W, bs.C, bs.KERNEL, "avgpool")

    def call():
        with torch.inference_mode():
            cluster.update_kv(k_rep, q, v_rep, None, n_rep)
    return call


def measure_model(args):
    text = iree_backend.compress(FIXTURE.read_text(), window=args.window,
                                 capacity=args.capacity)
    lowered = iree_backend.lower_to_upstream(text)
    start = time.perf_counter()
    vmfb = iree_backend.compile_vmfb(lowered)
    iree_compile_s = time.perf_counter() - start
    vocab = runtime.signature(lowered, "prefill").results[0].shape[-1]
    iree_model = iree_backend.IreeModel(vmfb, vocab_size=vocab, driver=iree_backend.TASK_DRIVER,
                                        workers=args.workers)
    cpu_model = runtime.CompiledModel(text)
    rows = []
    for length in args.prompt_lengths:
        ids = np.random.default_rng(0).integers(0, vocab, length)[None]
        logits_i, caches_i = iree_model.prefill(ids)
        logits_c, caches_c = cpu_model.prefill(ids)
        token = int(np.argmax(logits_c[0, -1]))
        row = {"L": length, "physical": caches_c[0].shape[2],
               "prefill_logits_diff": float(np.abs(logits_i - logits_c).max()),
               "caches_diff": max(float(np.abs(a - b).max()) for a, b in zip(caches_i, caches_c)),
               "iree_prefill": timed(lambda ids=ids: iree_model.prefill(ids), args.runs),
               "ours_prefill": timed(lambda ids=ids: cpu_model.prefill(ids), args.runs),
               "iree_decode": timed(lambda t=token, n=length, c=caches_c:
                                    iree_model.decode(t, n, c), args.decode_runs),
               "ours_decode": timed(lambda t=token, n=length, c=caches_c:
                                    cpu_model.decode(t, n, c), args.decode_runs)}
        d_i, _ = iree_model.decode(token, length, caches_c)
        d_c, _ = cpu_model.decode(token, length, caches_c)
        row["decode_logits_diff"] = float(np.abs(d_i - d_c).max())
        rows.append(row)
        print(f"  model L={length} done", flush=True)
    return rows, iree_compile_s, cpu_model.library.seconds


def ms(s):
    return f"{s * 1e3:.2f}" if s is not None else "n/a"


def ratio(base, x):
    return f"{base / x:.2f}x" if base is not None and x is not None else "n/a"


def render(select_rows, model_rows, compile_s, args, load_before, load_after):
    head = ["L", "order", "IREE, our strategy (ms)", "IREE, its own tiles (ms)",
            "ours, CPU pipeline (ms)",
            f"PyTorch eager `update_kv` (ms, {args.threads} threads)", "IREE vs PyTorch",
            "IREE vs IREE's own tiles", "IREE vs ours", "`iree-compile` (s)"]
    t = ["| " + " | ".join(head) + " |", "|---:|---|" + "---:|" * (len(head) - 2)]
    checks = []
    notes = []
    for r in select_rows:
        iree, own = r.get("iree"), r.get("iree_own")

        def cell(key, r=r):
            mark = "†" if r.get(f"{key}_raised_stack") else ""
            return ms(r[key]) + mark if r.get(key) is not None else "does not compile"
        for key, name in (("iree", "IREE (our strategy)"), ("iree_own", "IREE (own tiles)")):
            if r.get(key) is not None:
                checks.append(f"L={r['L']} {r['order']}: {name} indices vs numpy reference: "
                              f"{r[f'{key}_vs_ref']}; == ours: "
                              f"{'yes' if r[f'{key}_eq_ours'] else 'NO'}; K/V rows exact "
                              f"copies: {'yes' if r[f'{key}_kv_exact'] else 'NO'}")
        checks.append(f"L={r['L']} {r['order']}: ours vs numpy reference: {r['ours_vs_ref']}")
        t.append("| " + " | ".join([
            str(r["L"]), r["order"], cell("iree"), cell("iree_own"), ms(r["ours"]),
            ms(r["torch"]), ratio(r["torch"], iree), ratio(own, iree),
            ratio(r["ours"], iree),
            f"{r['iree_compile_s']:.1f}" if "iree_compile_s" in r else "n/a"]) + " |")
        for key in ("iree", "iree_own"):
            if r.get(f"{key}_plain_error") and r[f"{key}_plain_error"] not in notes:
                notes.append(r[f"{key}_plain_error"])
    ratio_note = ("`X vs Y` = Y time / X time (>1: X is faster). PyTorch eager is the same "
                  "call for both orders (its output is in score order).")
    mt = ["| L | physical cache after prefill | IREE prefill (ms) | ours prefill (ms) | "
          "IREE vs ours (prefill) | IREE decode step (ms) | ours decode step (ms) | "
          "IREE vs ours (decode) | max abs logits diff (prefill / decode) |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in model_rows:
        mt.append(f"| {r['L']} | {r['physical']} | {ms(r['iree_prefill'])} | "
                  f"{ms(r['ours_prefill'])} | {ratio(r['ours_prefill'], r['iree_prefill'])} | "
                  f"{ms(r['iree_decode'])} | {ms(r['ours_decode'])} | "
                  f"{ratio(r['ours_decode'], r['iree_decode'])} | "
                  f"{r['prefill_logits_diff']:.1e} / {r['decode_logits_diff']:.1e} |")
    load = (f"1-min load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
            f"(5-min {load_before[1]:.2f} / {load_after[1]:.2f})")
    raised = any(r.get("iree_raised_stack") or r.get("iree_own_raised_stack")
                 for r in select_rows)
    footer = []
    if raised:
        footer.append("† plain `iree-compile` refuses this module; measured with "
                      f"`{' '.join(RAISED_STACK)}` and `{RAISED_WORKER_STACK}`. Plain "
                      "`iree-compile` said: " + "; ".join(f"`{n}`" for n in notes))
    elif notes:
        footer.append("`iree-compile` said: " + "; ".join(f"`{n}`" for n in notes))
    text = "\n".join(["\n".join(t), "", ratio_note, *footer, *checks, "", "\n".join(mt), "",
                      load,
                      f"iree-compile of the model {compile_s[0]:.1f} s; our model library "
                      f"{compile_s[1]:.1f} s (0 if cached)"])
    versions = ", ".join(f"{k} {v}" for k, v in iree_backend.versions().items())
    mach = bs.machine_info()
    md = [
        "## CPU: `snapkv.select` and the tiny model through IREE",
        "",
        f"Measured {datetime.datetime.now():%Y-%m-%d %H:%M} with "
        "`python3 benchmarks/cpu/bench_iree.py --write docs/benchmarks.md`.",
        "",
        f"* Machine: {mach['cpu']}, {mach['cores']} cores; {load}.",
        f"* IREE: {versions}; `iree-compile {' '.join(iree_backend.IREE_COMPILE_FLAGS)}` "
        f"(the select also `{' '.join(iree_backend.SELECT_COMPILE_FLAGS)}`) on "
        "the output of `snapkv-opt --convert-snapkv-to-linalg`, with our strategy on the "
        "dispatch roots (docs/iree.md) and without; `iree.runtime` on a "
        f"`local-task` device with {args.workers} worker threads; inputs uploaded once, a "
        "call timed until its indices are on the host.",
        f"* Ours: as in the CPU table above (clang -O3 shared object, OpenMP "
        f"{bs.omp_threads()} threads). PyTorch: eager `update_kv`, "
        f"`torch.set_num_threads({args.threads})`.",
        f"* Select shape: B=1, Hq={bs.HQ}, Hkv={bs.HKV}, D={bs.D}, W={bs.W}, C={bs.C}, "
        f"kernel {bs.KERNEL}, avg pooling, gqa expand, f32; medians of {args.runs} runs, "
        "the four interleaved.",
        "",
        "\n".join(t), "", ratio_note, *footer, "", *[f"* {ln}" for ln in checks], "",
        f"Tiny model (`test/Models/tiny_llama_dynamic.mlir`, rewritten with window "
        f"{args.window}, capacity {args.capacity}, gqa expand): the public `prefill(ids)` "
        "and `decode(token, position, caches)` calls (numpy in, numpy out) of "
        f"`iree_backend.IreeModel` ({args.workers} workers) and "
        "`snapkv.runtime.CompiledModel` (clang -O2, OpenMP); decode on the compacted "
        f"caches prefill returned, at logical position L; medians of {args.runs} (prefill) "
        f"and {args.decode_runs} (decode) runs. iree-compile of the model: "
        f"{compile_s[0]:.1f} s.",
        "",
        "\n".join(mt),
    ]
    return text, "\n".join(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,16384,65536")
    ap.add_argument("--orders", default="position,score")
    ap.add_argument("--prompt-lengths", default="1024,4096")
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2, help="IREE local-task worker threads")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="PyTorch threads")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--decode-runs", type=int, default=50)
    ap.add_argument("--plain-only", action="store_true",
                    help="never raise IREE's stack limit (a module it refuses is reported)")
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--dispatches", action="store_true",
                    help="also time each dispatch of the select, with and without our "
                         "strategy (iree-benchmark-module)")
    ap.add_argument("--snapkv-opt", default=str(bs.tools.snapkv_opt()))
    ap.add_argument("--cache-dir", help="where our compiled .so files are kept")
    ap.add_argument("--write", metavar="MD")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    args.prompt_lengths = [int(x) for x in args.prompt_lengths.split(",") if x]
    os.environ["SNAPKV_OPT"] = args.snapkv_opt
    reason = iree_backend.unavailable_reason()
    if reason:
        sys.exit(reason)
    import torch
    torch.set_num_threads(args.threads)

    load_before = os.getloadavg()
    print(f"load average {load_before[0]:.2f}; IREE workers {args.workers}; OpenMP threads "
          f"{bs.omp_threads()}; torch threads {torch.get_num_threads()}", flush=True)
    select_rows = []
    for length in (int(x) for x in args.lengths.split(",") if x):
        for order in args.orders.split(","):
            select_rows.append(measure_select(length, order, args))
    if args.dispatches:
        for length in (int(x) for x in args.lengths.split(",") if x):
            print_dispatches(length, args)
    model_rows, compile_s = ([], (0.0, 0.0))
    if not args.skip_model:
        model_rows, iree_s, ours_s = measure_model(args)
        compile_s = (iree_s, ours_s)
    load_after = os.getloadavg()
    text, md = render(select_rows, model_rows, compile_s, args, load_before, load_after)
    print()
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"date": datetime.datetime.now().isoformat(timespec="minutes"),
             "load_before": load_before, "load_after": load_after,
             "iree": iree_backend.versions(), "select": select_rows, "model": model_rows,
             "model_compile_s": compile_s}, indent=1, default=str))
        print(f"wrote {args.json}")
    if args.write:
        bs.write_section(args.write, md, BEGIN, END)


if __name__ == "__main__":
    main()
