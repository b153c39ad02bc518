#!/usr/bin/env python3
"""Checks that the test suite catches deliberate bugs in the lowering.

Each mutation below is a small change to the C++ source that breaks one rule of
docs/semantics.md (or one bound of the GPU layout). For each, the script applies it to a
private copy of the sources (build-mutation/src: the working tree is never edited), rebuilds
snapkv-opt there (build-mutation/build), runs the tests listed for it and reports which of
them failed. A mutation that no listed test catches is a hole in the suite: the script then
exits non-zero.

    python3 scripts/mutation-test.py            # every mutation
    python3 scripts/mutation-test.py --list     # what they are and which tests they run
    python3 scripts/mutation-test.py tie-rule   # one of them
    python3 scripts/mutation-test.py --in-tree  # mutate the working tree and build/ instead

--in-tree saves the first build of the copy (minutes on two cores): it edits the sources in
place (restoring them afterwards, also on Ctrl-C or SIGTERM) and rebuilds the configured
build/, which is left unmutated at the end. Do not edit or build the tree meanwhile.

docs/testing.md has the table of the last run; rerun this when the lowering changes (a
mutation whose text is no longer in the source stops the script with a message).
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "build-mutation"
SRC = WORK / "src"
BUILD = WORK / "build"
LLVM = Path(os.environ.get("LLVM_DIR_ROOT", "/usr/lib/llvm-22"))


@dataclass
class Mutation:
    name: str
    rule: str
    file: str
    old: str
    new: str
    lit: List[str] = field(default_factory=list)      # paths under test/
    pytest: List[str] = field(default_factory=list)   # node ids under python/


DIFFERENTIAL = "tests/test_differential.py"

MUTATIONS = [
    Mutation(
        "prefix-denominator",
        "votes use the FULL causal softmax: the window columns are in the denominator",
        "lib/Conversion/SnapKVToLinalg/Scoring.cpp",
        "bool prefixOnly = s.scoring == Scoring::prefix_votes;",
        "bool prefixOnly = true;",
        lit=["Integration/CPU/counter_example.mlir"]),
    Mutation(
        "causal-mask",
        "a window query does not see the window columns after it",
        "lib/Conversion/SnapKVToLinalg/Scoring.cpp",
        "return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, col, limit);",
        "return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, col, "
        "arith::AddIOp::create(nb, l, limit, arith::ConstantOp::create(nb, l, "
        "nb.getI32IntegerAttr(1))));",
        lit=["Integration/CPU/counter_example.mlir"]),
    Mutation(
        "pooling-border",
        "avg pooling counts out-of-range neighbours as 0 (and divides by the kernel)",
        "lib/Conversion/SnapKVToLinalg/Scoring.cpp",
        "float padValue = avg ? 0.0f : kNegInf;",
        "float padValue = avg ? 1e-3f : kNegInf;",
        lit=["Integration/CPU/pooling_borders.mlir"]),
    Mutation(
        "tie-rule",
        "keys equal to the threshold are kept lowest position first, only as many as needed",
        "lib/Conversion/SnapKVToLinalg/Selection.cpp",
        "cmp(fb, fl, arith::CmpIPredicate::slt, acc[1], ties);",
        "cmp(fb, fl, arith::CmpIPredicate::sle, acc[1], ties);",
        lit=["Integration/CPU/ties.mlir"]),
    Mutation(
        "nan-ranks-lowest",
        "a NaN pooled score ranks below every number",
        "lib/Conversion/SnapKVToLinalg/Selection.cpp",
        "nb, l, ranked, key, constI32(nb, l, 0))",
        "nb, l, real, key, constI32(nb, l, 0))",
        lit=["Integration/CPU/hostile_values.mlir"]),
    # The GPU layout's own bounds (the selection and scoring rules above are shared with
    # the CPU, so their mutations break the GPU kernels as well).
    Mutation(
        "gpu-key-tile-clamp",
        "GPU: every key tile is staged (clamped here to the first tile of 64 keys: the "
        "blocks of the later tiles read zeros), so only prompts longer than one tile see it",
        "lib/Conversion/SnapKVToLinalg/Blocks.cpp",
        "Value last = arith::SubIOp::create(b, loc, length, cIndex(1));",
        "Value last = arith::MinUIOp::create(b, loc, arith::SubIOp::create(b, loc, length, "
        "cIndex(1)), cIndex(tile - 1));",
        lit=["Integration/GPU/emulation.mlir"],
        pytest=[f"{DIFFERENTIAL}::test_gpu_kernels_long_prompts"]),
    Mutation(
        "gpu-row-blocks",
        "GPU: one block per (batch, head) row for the selection (clamped here to the rows of "
        "head 0: the other rows' results are never written)",
        "lib/Conversion/SnapKVToLinalg/Blocks.cpp",
        "b, loc, ArrayRef<OpFoldResult>{ofr(s.batch), ofr(s.heads)}, inits,",
        "b, loc, ArrayRef<OpFoldResult>{ofr(s.batch), ofr(1)}, inits,",
        lit=["Integration/GPU/emulation.mlir"]),
]


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


def use_working_tree():
    global SRC, BUILD
    SRC, BUILD = REPO, REPO / "build"
    if not (BUILD / "build.ninja").is_file():
        sys.exit(f"--in-tree needs a configured {BUILD} (make build)")


def sync_sources():
    """Copies the tracked and untracked-but-not-ignored files to SRC, rewriting only the
    files that differ (so that ninja rebuilds only what changed since the last run)."""
    listed = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO)
    if listed.returncode:
        sys.exit(f"git ls-files failed: {listed.stderr}")
    for name in filter(None, listed.stdout.split("\0")):
        source, copy = REPO / name, SRC / name
        if not source.is_file():
            continue  # deleted in the working tree
        data = source.read_bytes()
        if copy.is_file() and copy.read_bytes() == data:
            continue
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(data)
        shutil.copymode(source, copy)


def configure():
    if (BUILD / "build.ninja").is_file():
        return
    launcher = (["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else [])
    done = run(["cmake", "-S", str(SRC), "-B", str(BUILD), "-G", "Ninja",
                "-DCMAKE_BUILD_TYPE=Release", f"-DMLIR_DIR={LLVM}/lib/cmake/mlir",
                "-DCMAKE_C_COMPILER=clang-22", "-DCMAKE_CXX_COMPILER=clang++-22",
                "-DLLVM_ENABLE_LLD=ON", "-DLLVM_ENABLE_ASSERTIONS=ON", *launcher])
    if done.returncode:
        sys.exit(f"configuring {BUILD} failed:\n{done.stderr[-3000:]}")


def build():
    # snapkv-opt and what lit's configuration needs (the CUDA runtime library).
    done = run(["ninja", "-C", str(BUILD), f"-j{os.environ.get('JOBS', '2')}"])
    return done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def tests_fail(mutation, verbose):
    """(test, failed) for each test listed for the mutation, run on the mutated build."""
    results = []
    lit = str(LLVM / "bin" / "lit")
    for test in mutation.lit:
        done = run([lit, "-v" if verbose else "-q", str(BUILD / "test" / test)])
        results.append((test, done.returncode != 0))
        if verbose and done.returncode:
            print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
    env = dict(os.environ, SNAPKV_OPT=str(BUILD / "bin" / "snapkv-opt"),
               PYTHONPATH=str(SRC / "python"))
    env.pop("SNAPKV_STRICT_SKIPS", None)
    for test in mutation.pytest:
        done = run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test],
                   cwd=SRC / "python", env=env)
        # 1: tests failed; anything else but 0 (collection or usage errors), or a skip,
        # means the test did not run.
        summary = done.stdout.strip().splitlines()[-1:] or [""]
        if done.returncode not in (0, 1) or "skipped" in summary[0]:
            sys.exit(f"{mutation.name}: pytest {test} did not run:\n{done.stdout[-3000:]}")
        results.append((test, done.returncode == 1))
        if verbose and done.returncode:
            print(done.stdout[-2000:])
    return results


def apply(mutation):
    path = SRC / mutation.file
    text = path.read_text()
    if text.count(mutation.old) != 1:
        sys.exit(f"{mutation.name}: the text to mutate is not (exactly once) in "
                 f"{mutation.file}; update scripts/mutation-test.py")
    path.write_text(text.replace(mutation.old, mutation.new))
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--in-tree", action="store_true",
                        help="mutate the working tree and rebuild build/ (no private copy)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print the output of the tests that failed")
    args = parser.parse_args()
    unknown = set(args.names) - {m.name for m in MUTATIONS}
    if unknown:
        sys.exit(f"unknown mutation(s): {', '.join(sorted(unknown))}")
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name}: {m.rule}\n    {m.file}; tests: {', '.join(m.lit + m.pytest)}")
        return 0
    # A SIGTERM ends the run through the `finally` below (the copy is restored).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    if args.in_tree:
        use_working_tree()
    else:
        sync_sources()
    for mutation in chosen:  # every mutation applies before anything is built
        (SRC / mutation.file).write_text(apply(mutation))
    configure()
    ok, log = build()
    if not ok:
        sys.exit(f"the unmutated copy does not build:\n{log}")
    rows, missed = [], []
    for mutation in chosen:
        start = time.perf_counter()
        original = apply(mutation)
        try:
            ok, log = build()
            if not ok:
                sys.exit(f"{mutation.name}: the mutated source does not build:\n{log}")
            results = tests_fail(mutation, args.verbose)
        finally:
            (SRC / mutation.file).write_text(original)
        failed = [test for test, bad in results if bad]
        passed = [test for test, bad in results if not bad]
        if not failed:
            missed.append(mutation.name)
        rows.append((mutation.name, "caught" if failed else "MISSED",
                     f"{time.perf_counter() - start:.0f} s", failed, passed))
        print(f"{mutation.name}: {rows[-1][1]}", flush=True)
    build()  # back to the unmutated source
    print()
    for name, verdict, seconds, failed, passed in rows:
        print(f"{name}  {verdict}  ({seconds})\n    failing: {', '.join(failed) or '-'}"
              f"\n    passing: {', '.join(passed) or '-'}")
    if missed:
        print(f"\nnot caught by any listed test: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
