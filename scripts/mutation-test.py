#!/usr/bin/env python3
"""Checks that the test suite catches deliberate bugs in the lowering.

Each mutation below is a one-line change to the C++ source that breaks one rule of
docs/semantics.md. For each, the script applies it, rebuilds snapkv-opt in a separate build
directory (build-mutation, so the main build is untouched), runs the tests that are supposed
to catch it, restores the source, and reports whether they failed. A mutation that no test
catches is a hole in the suite: the script then exits non-zero.

    python3 scripts/mutation-test.py            # every mutation
    python3 scripts/mutation-test.py --list     # what they are
    python3 scripts/mutation-test.py tie-rule   # one of them

docs/testing.md has the table; rerun this when the lowering changes.
"""

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build-mutation"
LLVM = Path(os.environ.get("LLVM_DIR_ROOT", "/usr/lib/llvm-22"))


@dataclass
class Mutation:
    name: str
    rule: str
    file: str
    old: str
    new: str
    lit: List[str] = field(default_factory=list)
    pytest: List[str] = field(default_factory=list)


MUTATIONS = [
    Mutation(
        "prefix-denominator",
        "votes use the FULL causal softmax: the window columns are in the denominator",
        "lib/Conversion/SnapKVToLinalg/Scoring.cpp",
        "bool prefixOnly = s.scoring == Scoring::prefix_votes;",
        "bool prefixOnly = true;",
        lit=["Integration/CPU/counter_example.mlir"],
        pytest=["tests/test_differential.py::test_random_cases_match_reference"]),
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
        lit=["Integration/CPU/pooling_borders.mlir"],
        pytest=["tests/test_differential.py::test_random_cases_match_reference"]),
    Mutation(
        "tie-rule",
        "keys equal to the threshold are kept lowest position first, only as many as needed",
        "lib/Conversion/SnapKVToLinalg/Selection.cpp",
        "cmp(fb, fl, arith::CmpIPredicate::slt, acc[1], ties);",
        "cmp(fb, fl, arith::CmpIPredicate::sle, acc[1], ties);",
        lit=["Integration/CPU/ties.mlir"],
        pytest=["tests/test_differential.py::test_exact_ties_go_to_lower_position"]),
    Mutation(
        "nan-ranks-lowest",
        "a NaN pooled score ranks below every number",
        "lib/Conversion/SnapKVToLinalg/Selection.cpp",
        "arith::SelectOp::create(nb, l, ranked, key,\n"
        "                                               constI32(nb, l, 0))",
        "arith::SelectOp::create(nb, l, real, key,\n"
        "                                               constI32(nb, l, 0))",
        lit=["Integration/CPU/hostile_values.mlir"]),
]


def run(command, **kwargs):
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, **kwargs)


def configure():
    if (BUILD / "build.ninja").is_file():
        return
    done = run(["cmake", "-S", ".", "-B", str(BUILD), "-G", "Ninja",
                "-DCMAKE_BUILD_TYPE=Release", f"-DMLIR_DIR={LLVM}/lib/cmake/mlir",
                "-DCMAKE_C_COMPILER=clang-22", "-DCMAKE_CXX_COMPILER=clang++-22",
                "-DLLVM_ENABLE_LLD=ON"])
    if done.returncode:
        sys.exit(f"configuring {BUILD} failed:\n{done.stderr[-3000:]}")


def build():
    done = run(["ninja", "-C", str(BUILD), "-j2", "snapkv-opt"])
    return done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def tests_fail(mutation):
    """Names of the tests (of those listed) that fail on the mutated build."""
    failed = []
    lit = str(LLVM / "bin" / "lit")
    for test in mutation.lit:
        done = run([lit, "-q", str(BUILD / "test" / test)])
        if done.returncode:
            failed.append(test)
    env = dict(os.environ, SNAPKV_OPT=str(BUILD / "bin" / "snapkv-opt"))
    for test in mutation.pytest:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", test],
                              cwd=REPO / "python", capture_output=True, text=True, env=env)
        if done.returncode:
            failed.append(test)
    return failed


def apply(mutation):
    path = REPO / mutation.file
    text = path.read_text()
    if text.count(mutation.old) != 1:
        sys.exit(f"{mutation.name}: the line to mutate is not (exactly once) in "
                 f"{mutation.file}; update scripts/mutation-test.py")
    path.write_text(text.replace(mutation.old, mutation.new))
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTATIONS}
    if unknown:
        sys.exit(f"unknown mutation(s): {', '.join(sorted(unknown))}")
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name}: {m.rule} ({m.file}; tests: {', '.join(m.lit + m.pytest)})")
        return 0
    configure()
    rows, missed = [], []
    for mutation in chosen:
        start = time.perf_counter()
        original = apply(mutation)
        try:
            ok, log = build()
            if not ok:
                sys.exit(f"{mutation.name}: the mutated source does not build:\n{log}")
            failed = tests_fail(mutation)
        finally:
            (REPO / mutation.file).write_text(original)
        caught = bool(failed)
        if not caught:
            missed.append(mutation.name)
        rows.append((mutation.name, "caught" if caught else "MISSED",
                     ", ".join(failed) or "-", f"{time.perf_counter() - start:.0f} s"))
    build()  # back to the unmutated source
    width = max(len(r[0]) for r in rows)
    for name, verdict, failed, seconds in rows:
        print(f"{name:<{width}}  {verdict:<6}  {seconds:>5}  failing: {failed}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
