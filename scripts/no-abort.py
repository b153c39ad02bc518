#!/usr/bin/env python3
"""Runs snapkv-opt with every snapkv pass (and the CPU pipeline) over every
given input file (lit tests, fuzz corpus entries) and fails if any run dies
from a signal (assertion, crash, sanitizer abort) or hangs. Rejections with
diagnostics (exit code 1) are the expected outcome for bad input.

usage: no-abort.py SNAPKV_OPT PATH...   (directories are searched recursively)

Inputs run in parallel, NO_ABORT_JOBS at a time (default: one per CPU); the report
keeps the inputs' order.
"""
import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys

PASSES = [
    ["--convert-snapkv-to-linalg"],
    # The CPU pipeline tiles with keep-logits; the recomputing form separately.
    ["--convert-snapkv-to-linalg=tiling=cpu keep-logits=false"],
    ["--convert-snapkv-to-linalg=tiling=gpu", "--snapkv-tile-and-fuse"],
    # On its own: whatever #snapkv.tile / snapkv.fuse the input carries.
    ["--snapkv-tile-and-fuse"],
    ["--snapkv-cpu-pipeline"],
    ["--snapkv-cpu-pipeline=fuse-attention=false"],
    ["--snapkv-decompose-select"],
    ["--snapkv-decompose-select", "--convert-snapkv-to-linalg=tiling=cpu"],
    # Each op's configuration as data, then the conversion that reads it (on GPU blocks
    # with their own threads, without tensor cores).
    ["--snapkv-configure-lowering"],
    ["--snapkv-configure-lowering=target=gpu threads=64 tensor-cores=false",
     "--convert-snapkv-to-linalg", "--snapkv-tile-and-fuse"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-fuse-attention))"],
    ["--snapkv-append-in-place"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-fuse-attention),snapkv-append-in-place)"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-fuse-elementwise))"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-parallelize))"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-parallelize),func.func(snapkv-fuse-parallel-loops))"],
    # Small panels, so that the lit inputs' matmuls are packed too.
    ["--pass-pipeline=builtin.module(func.func(snapkv-pack-weights{panel=4 min-columns=8}))"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-vectorize))"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-optimize-math))"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-expand-strided-copies))"],
    ["--pass-pipeline=builtin.module(convert-scf-to-openmp,func.func(snapkv-schedule-parallel-loops))"],
    ["--snapkv-lower-asserts"],
    ["--pass-pipeline=builtin.module(llvm.func(snapkv-byte-bool-vectors))"],
    ["--snapkv-quantize-weights"],
    # Q4_1's one-row products through snapkv-parallelize and snapkv-vectorize, float and int8.
    ["--pass-pipeline=builtin.module(snapkv-quantize-weights{format=q4_1},"
     "func.func(snapkv-parallelize,snapkv-vectorize))"],
    ["--pass-pipeline=builtin.module(snapkv-quantize-weights{format=q4_1 activations=i8},"
     "func.func(snapkv-parallelize,snapkv-vectorize))"],
    ["--snapkv-outline-select"],
    ["--snapkv-expose-scores"],
    ["--snapkv-expose-scores=through-callers=true"],
    ["--snapkv-report-cache=prompt-length=16 generated=4"],
    ["--snapkv-report-cache=prompt-length=16 generated=4 format=json"],
    ["--snapkv-describe-module"],
    # Every entry must run on an empty module, which has no entry point to drop.
    ["--snapkv-drop-glue"],
    ["--snapkv-compress-kv-cache"],
    ["--snapkv-compress-kv-cache=window=2 capacity=6 kernel=3 gqa=mean"],
    # Per-layer budgets, and per-call copies of a layer function (llama_layers.mlir).
    ["--snapkv-compress-kv-cache=window=2 capacity=6 budget=pyramid pyramid-beta=2"],
    ["--snapkv-compress-kv-cache=window=2 capacity=6 budget=pyramid prefill-func=prefill_layer "
     "decode-func=decode_layer"],
    # Ada-KV's shared budget: ragged caches, decode appending each head's row in place.
    ["--snapkv-compress-kv-cache=window=2 capacity=6 budget=adaptive floor=1"],
    ["--snapkv-compress-kv-cache=window=2 capacity=6 budget=adaptive prefill-func=prefill_layer "
     "decode-func=decode_layer"],
    # Chunked prefill: the extend function rewritten like prefill (llama_layers_extend.mlir).
    ["--snapkv-compress-kv-cache=window=2 capacity=6 chunk=4"],
    ["--snapkv-compress-kv-cache=window=2 capacity=6 chunk=4 prefill-func=prefill_layer "
     "decode-func=decode_layer extend-func=extend_layer"],
    # ... with decode-time compression to another capacity (a copy of the extend chain).
    ["--snapkv-compress-kv-cache=window=2 capacity=6 chunk=4 decode-interval=4 "
     "decode-capacity=5 prefill-func=prefill_layer decode-func=decode_layer "
     "extend-func=extend_layer"],
    ["--snapkv-gpu-emulation"],
    ["--snapkv-gpu-emulation=decompose-select=true"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-gpu-distribute))"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-gpu-distribute{tensor-cores=true}))"],
    ["--pass-pipeline=builtin.module(func.func(snapkv-gpu-mma-sync))"],
    ["--snapkv-gpu-launch"],
    ["--snapkv-gpu-device-buffers"],
]

# Registered passes that PASSES leaves out, and why.
NOT_RUN = {
    "snapkv-gpu-pipeline": "assembles every kernel with ptxas (seconds per input); its own "
                           "passes are the GPU entries above, the rest is upstream's "
                           "gpu-lower-to-nvvm-pipeline",
}


def registered_passes(tool):
    """The snapkv passes and pipelines that `tool --help` lists."""
    out = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=120).stdout
    return set(re.findall(r"^\s+--((?:convert-)?snapkv-[a-z0-9-]+)\b", out, re.MULTILINE))


def check_passes(tool):
    """Every registered snapkv pass is run (an entry of PASSES) or excused (NOT_RUN), and
    every entry of PASSES runs: a renamed pass would otherwise fail on every input with
    exit code 1, which counts as no abort, and test nothing."""
    listed = " ".join(" ".join(args) for args in PASSES)
    missing = sorted(name for name in registered_passes(tool) - NOT_RUN.keys()
                     if not re.search(rf"(--|\(){re.escape(name)}(\b(?!-)|$)", listed))
    if missing:
        sys.exit(f"no-abort: registered passes not in PASSES or NOT_RUN: {', '.join(missing)}")
    for args in PASSES:
        proc = subprocess.run([tool, *args, "-o", "/dev/null"], input=b"", capture_output=True,
                              timeout=120)
        if proc.returncode != 0:
            sys.exit(f"no-abort: {' '.join(args)} does not run on an empty module:\n"
                     + proc.stderr.decode(errors="replace")[-2000:])


# Upstream's parser recurses without a depth limit and overflows the stack on
# a few thousand nested brackets (docs/reliability.md, F2): such inputs are
# reported as skipped, not run, like the fuzz harness does.
MAX_NESTING = 256


# Upstream's linalg.transpose parser crashes on a malformed `permutation = [...]`
# list (docs/reliability.md, F3): skipped the same way.
_WELL_FORMED = re.compile(rb"\s*=\s*(\[\s*(\d{1,9}\s*(,\s*\d{1,9}\s*)*)?\])")


def _bad_list(data, key, well_formed):
    """True when some `key` in `data` is not followed by what `well_formed` matches."""
    start = 0
    while (at := data.find(key, start)) >= 0:
        start = at + len(key)
        if not well_formed.match(data, start):
            return True
    return False


def has_malformed_permutation(data):
    return _bad_list(data, b"permutation", _WELL_FORMED)


# Upstream's parser for linalg ops crashes when their `<...>` properties are not a
# dictionary, e.g. `linalg.matmul<1>` (docs/reliability.md, F4), also after an attribute
# dictionary: `linalg.generic {iterator_types = []} <"x">` (F6; mlir-opt dies too).
_BAD_PROPERTIES = re.compile(rb"linalg\.[A-Za-z0-9_]*\s*(\{[^{}]*(\{[^{}]*\}[^{}]*)*\}\s*)?"
                             rb"<\s*(?!\{)")


def has_bad_linalg_properties(data):
    return _BAD_PROPERTIES.search(data) is not None


# Upstream's linalg.generic parser crashes on an `iterator_types` entry that is not a
# string, e.g. `linalg.generic{iterator_types=[2]}` (docs/reliability.md, F5).
_ITERATORS = re.compile(rb'\s*=\s*\[\s*"[a-z]+"\s*(,\s*"[a-z]+"\s*)*\]')


def has_bad_iterator_types(data):
    return _bad_list(data, b"iterator_types", _ITERATORS)


# Upstream's expand_shape verifier reads an uninitialised AffineExpr when a reassociation
# group is empty, e.g. `tensor.expand_shape %x [[ ], [1], [2, 3]]` (docs/reliability.md, F7).
def has_empty_reassociation_group(data):
    start = 0
    while (at := data.find(b"expand_shape", start)) >= 0:
        start = at + len(b"expand_shape")
        groups = re.split(rb"output_shape|:", data[start:], maxsplit=1)[0]
        if re.search(rb"\[\s*\]", groups):
            return True
    return False


def nests_too_deep(data):
    depth = 0
    for byte in data:
        if byte in b"([{<":
            depth += 1
        elif byte in b")]}>":
            depth = max(depth - 1, 0)
        if depth > MAX_NESTING:
            return True
    return False


def inputs(paths):
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            yield from sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in ("", ".mlir"))
        else:
            yield p


def skip_reason(data):
    """Why an input is not run (an upstream parser crash it would hit), or None."""
    return (f"nested deeper than {MAX_NESTING} (upstream parser limit, F2)"
            if nests_too_deep(data) else
            "malformed linalg.transpose permutation (upstream parser crash, F3)"
            if has_malformed_permutation(data) else
            "linalg op with non-dictionary properties (upstream parser crash, F4/F6)"
            if has_bad_linalg_properties(data) else
            "linalg.generic iterator_types entry that is not a string "
            "(upstream parser crash, F5)"
            if has_bad_iterator_types(data) else
            "expand_shape with an empty reassociation group (upstream verifier crash, F7)"
            if has_empty_reassociation_group(data) else None)


def check_input(tool, path):
    """Runs every entry of PASSES over one input: (runs, failures, skipped, report lines)."""
    reason = skip_reason(path.read_bytes())
    if reason:
        return 0, 0, 1, [f"SKIP  {path}: {reason}"]
    failures, lines = 0, []
    for args in PASSES:
        cmd = [tool, *args, "--split-input-file", str(path), "-o", "/dev/null"]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            failures += 1
            lines.append(f"HANG  {' '.join(cmd)}")
            continue
        # A signal shows as a negative code; sanitizers exit via abort.
        if proc.returncode < 0 or proc.returncode > 1:
            failures += 1
            tail = proc.stderr.decode(errors="replace").strip().splitlines()[-5:]
            lines.append(f"ABORT ({proc.returncode}) {' '.join(cmd)}")
            lines.extend(f"      {line}" for line in tail)
    return len(PASSES), failures, 0, lines


def main():
    tool, paths = sys.argv[1], sys.argv[2:]
    check_passes(tool)
    jobs = int(os.environ.get("NO_ABORT_JOBS", os.cpu_count() or 1))
    runs = failures = skipped = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for r, f, s, lines in pool.map(lambda p: check_input(tool, p), inputs(paths)):
            runs, failures, skipped = runs + r, failures + f, skipped + s
            for line in lines:
                print(line, flush=True)
    print(f"no-abort: {runs - failures} passed, {failures} failed, {skipped} skipped")
    sys.exit(1 if failures else 0)

if __name__ == "__main__":
    main()
