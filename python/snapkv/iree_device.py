"""The model compiled by ``iree-compile`` for a device, and run where no MLIR tool exists.

``snapkv compile MODEL --device cuda -o OUT.vmfb`` (docs/gpu.md, "The whole model through
IREE") ends here: the module (rewritten by ``snapkv-compress-kv-cache``, or the original for
the full-cache baseline) is lowered to upstream dialects (:func:`snapkv.iree_backend.
lower_to_upstream`: the attention fused, ``snapkv.select`` as our linalg form), compiled by
``iree-compile`` for a :class:`Target` and written as ``OUT.vmfb`` plus ``OUT.json``, the
manifest (:data:`FORMAT`): the entry points' tensor types, the checkpoint tensors each
weight argument takes, the target and the compaction. :func:`load` needs only numpy and
``iree.runtime`` (plus the checkpoint for a module that takes weights), which is what the GPU
machine has: no ``snapkv-opt``, no ``iree-compile``.

Targets: ``cuda`` (IREE's CUDA HAL target: PTX for one ``sm_XX``, JIT-compiled by the driver
when the module is loaded, so ``sm_80`` PTX also runs on Hopper) and ``llvm-cpu`` (the host
CPU, IREE's ``local-task`` device): the stand-in that runs the same files through the same
code on a machine without a GPU.

The select runs as IREE's own lowering of our linalg form, not as our NVVM kernels
(``--snapkv-gpu-pipeline``): those kernels are launched by host code of their own (the
``mgpu*`` runtime, their own device buffers and streams) with host logic between launches,
whereas an IREE module's dispatches are IREE executables with IREE's binding layout and
workgroup-count functions; docs/gpu.md says what substituting them would take.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

FORMAT = "snapkv-iree-model 1"
# The CUDA targets iree-compile 3.13 configures. It has no sm_90 in its table of known GPUs
# ("missing GPU target in #hal.executable.target", IREE issue 22147), so Hopper runs sm_80
# PTX, JIT-compiled by the driver at load (PTX is forward-compatible; cubins are not).
CUDA_ARCHS = ("sm_80", "sm_86", "sm_87", "sm_89")
DEFAULT_CUDA_ARCH = "sm_80"
DEVICES = ("cuda", "llvm-cpu")
# The element types a module can be compiled in (hf.ExportOptions.dtype), recorded in the
# manifest. bf16 weights and caches travel as uint16 bit patterns on the host and are uploaded
# as bf16 (iree_backend.device_array).
DTYPES = ("f32", "bf16", "f16")


class DeviceModelError(Exception):
    """A target, a manifest or a checkpoint that does not fit; the message says which."""


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the module runs: ``cuda`` for `arch` (one of :data:`CUDA_ARCHS`) or ``llvm-cpu``
    (the host CPU: the stand-in for a machine without a GPU)."""
    device: str = "cuda"
    arch: Optional[str] = None

    def __post_init__(self):
        if self.device not in DEVICES:
            raise DeviceModelError(f"the device must be one of {', '.join(DEVICES)}, "
                                   f"got {self.device!r}")
        if self.device != "cuda":
            if self.arch is not None:
                raise DeviceModelError(f"a CUDA architecture ({self.arch}) goes with the "
                                       f"cuda device, not {self.device}")
            return
        arch = self.arch or DEFAULT_CUDA_ARCH
        if arch not in CUDA_ARCHS:
            hint = (" (iree-compile 3.13 has no sm_90 target; sm_80 PTX runs on Hopper, "
                    "JIT-compiled by the driver)" if arch.startswith("sm_9") else "")
            raise DeviceModelError(f"CUDA architecture {arch!r} is not one iree-compile 3.13 "
                                   f"configures: {', '.join(CUDA_ARCHS)}{hint}")
        object.__setattr__(self, "arch", arch)

    def flags(self) -> List[str]:
        """iree-compile's target flags (the input is plain upstream MLIR)."""
        if self.device == "cuda":
            return ["--iree-input-type=none", "--iree-hal-target-device=cuda",
                    f"--iree-cuda-target={self.arch}"]
        from .iree_backend import IREE_COMPILE_FLAGS
        return list(IREE_COMPILE_FLAGS)

    @property
    def driver(self) -> str:
        """The IREE runtime driver that runs the module."""
        return "cuda" if self.device == "cuda" else "local-task"

    def describe(self) -> str:
        return f"cuda {self.arch}" if self.device == "cuda" else "llvm-cpu (host)"


# ---------------------------------------------------------------------------------------------
# A workaround for iree-compile 3.13's CUDA backend

def _backward_slice(value, body) -> Optional[list]:
    """The ops of `body` (a block) that `value` depends on, in block order, or None when one
    of them has regions (not split)."""
    from iree.compiler import ir

    wanted, stack = [], [value]
    while stack:
        v = stack.pop()
        if isinstance(v.owner, ir.Block):
            continue  # a block argument
        op = v.owner.operation
        if op.block != body or op in wanted:
            continue  # defined outside the body: used as it is
        if len(op.regions):
            return None
        wanted.append(op)
        stack.extend(op.operands)
    return [op for op in body.operations if op in wanted]


def _uses_only_own_accumulator(ops, result, accumulators, index) -> bool:
    others = [a for j, a in enumerate(accumulators) if j != index]
    used = [v for op in ops for v in op.operands] + [result]
    return not any(v == other for v in used for other in others)


def split_multi_result_reductions(lowered: str) -> Tuple[str, int]:
    """`lowered` with every ``linalg.generic`` that has a reduction loop and several results,
    each computed from its own accumulator only, split into one single-result generic per
    result (the same inputs, maps and loops; each body the slice its result needs), and how
    many were split.

    Why: iree-compile 3.13's CUDA backend (LLVMGPU) fails to bufferize a reduction with two
    results over a dynamic parallel dimension ("failed to bufferize op" on a
    ``bufferization.alloc_tensor``; llvm-cpu compiles it, and the same op with one result
    compiles for CUDA). The select's per-chunk counts (keys above and equal to the
    threshold) and their prefix sums are such ops. ``test_iree_cuda.py`` pins the bug with a
    reproducer, so that a fixed IREE shows this can go.
    """
    from iree.compiler import ir

    context = ir.Context()
    with context, ir.Location.unknown(context):
        module = ir.Module.parse(lowered)
        found = []
        module.operation.walk(lambda op: (found.append(op) if op.name == "linalg.generic"
                                          and len(op.results) > 1 else None)
                              or ir.WalkResult.ADVANCE)
        reduction = ir.Attribute.parse("#linalg.iterator_type<reduction>")
        split = 0
        for op in found:
            if not any(it == reduction for it in op.attributes["iterator_types"]):
                continue
            n_in, n_out = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
            body = op.regions[0].blocks[0]
            args = list(body.arguments)
            terminator = list(body.operations)[-1]
            slices = [_backward_slice(v, body) for v in terminator.operands]
            if any(ops is None for ops in slices):
                continue
            # Each result computed from its own accumulator (block argument n_in + i) only.
            if not all(_uses_only_own_accumulator(slices[i], terminator.operands[i],
                                                  args[n_in:], i) for i in range(n_out)):
                continue
            maps = list(op.attributes["indexing_maps"])
            for i in range(n_out):
                with ir.InsertionPoint(op):
                    new = ir.Operation.create(
                        "linalg.generic", results=[op.results[i].type],
                        operands=[*op.operands[:n_in], op.operands[n_in + i]],
                        attributes={
                            "indexing_maps": ir.ArrayAttr.get([*maps[:n_in], maps[n_in + i]]),
                            "iterator_types": op.attributes["iterator_types"],
                            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([n_in, 1])},
                        regions=1)
                block = new.regions[0].blocks.append(
                    *[a.type for a in args[:n_in]], args[n_in + i].type)
                mapping = {args[k]: block.arguments[k] for k in range(n_in)}
                mapping[args[n_in + i]] = block.arguments[n_in]
                with ir.InsertionPoint(block):
                    for old in slices[i]:
                        clone = old.clone()
                        for k, operand in enumerate(old.operands):
                            if operand in mapping:
                                clone.operands[k] = mapping[operand]
                        for r_old, r_new in zip(old.results, clone.results):
                            mapping[r_old] = r_new
                    yielded = terminator.operands[i]
                    ir.Operation.create("linalg.yield", operands=[mapping.get(yielded,
                                                                              yielded)])
                op.results[i].replace_all_uses_with(new.results[0])
            op.erase()
            split += 1
        return str(module), split


# ---------------------------------------------------------------------------------------------
# Compiling

def _tensor(ttype) -> dict:
    return {"shape": list(ttype.shape), "element": ttype.elem}


def entry_points(lowered: str) -> Dict[str, dict]:
    """``@prefill``'s and ``@decode``'s argument and result types (dynamic dims None) and
    the checkpoint tensor each weight argument takes: what :func:`load` needs of the module
    (from ``snapkv-opt --snapkv-describe-module``, here where the tool is)."""
    from . import runtime

    out = {}
    for name in ("prefill", "decode"):
        sig = runtime.signature(lowered, name)
        weights = sig.weights or (None,) * len(sig.args)
        out[name] = {
            "inputs": [_tensor(t) for t, w in zip(sig.args, weights) if w is None],
            "results": [_tensor(t) for t in sig.results],
            "weights": [{"name": ref.name, "transposed": ref.transposed, **_tensor(t)}
                        for ref, t in sig.weight_args],
        }
    return out


@dataclasses.dataclass
class DeviceModule:
    """A compiled module: the vmfb, its manifest and the upstream-dialect text iree-compile
    got."""
    vmfb: bytes = dataclasses.field(repr=False)
    manifest: dict
    lowered: str = dataclasses.field(repr=False)

    def write(self, path: Path) -> Path:
        """``path`` (the vmfb) and the manifest next to it (``.json``); returns the latter."""
        path = Path(path)
        path.write_bytes(self.vmfb)
        manifest = path.with_suffix(".json")
        manifest.write_text(json.dumps(self.manifest, indent=1) + "\n")
        return manifest


def compile_module(text: str, target: Target = Target(), *, dtype: str = "f32",
                   compaction: Optional[dict] = None, checkpoint=None,
                   max_positions: Optional[int] = None, label: str = "",
                   dump_dir: Optional[Path] = None) -> DeviceModule:
    """Lower `text` (a model module, rewritten or not) to upstream dialects and compile it
    for `target`. `compaction`: the rewrite's options (None: the full-cache original), kept in
    the manifest with `checkpoint` (a :class:`~snapkv.frontend.checkpoint.Checkpoint`, for a
    module that takes weights: its path and architecture) and `max_positions`.
    `dump_dir`: where iree-compile writes each executable's source (``sources/``) and
    binary (``binaries/``: PTX for cuda), both replaced."""
    from . import iree_backend

    if dtype not in DTYPES:
        raise DeviceModelError(f"dtype {dtype!r}: the model is exported in "
                               f"{', '.join(DTYPES)} only (so far)")
    upstream = iree_backend.lower_to_upstream(text)
    points = entry_points(upstream)
    lowered, split = split_multi_result_reductions(upstream)
    takes_weights = any(p["weights"] for p in points.values())
    if takes_weights and checkpoint is None:
        raise DeviceModelError("the module takes weights (snapkv.weight arguments): give the "
                               "checkpoint they come from")
    import iree.compiler
    with tempfile.TemporaryDirectory(prefix="snapkv-iree-") as scratch:
        dumps = Path(dump_dir) if dump_dir is not None else Path(scratch)
        for sub in ("sources", "binaries"):  # an earlier compile's would be counted
            shutil.rmtree(dumps / sub, ignore_errors=True)
        start = time.perf_counter()
        try:
            vmfb = iree.compiler.compile_str(lowered, extra_args=[
                *target.flags(),
                f"--iree-hal-dump-executable-sources-to={dumps / 'sources'}",
                f"--iree-hal-dump-executable-binaries-to={dumps / 'binaries'}"])
        except iree.compiler.CompilerToolError as error:
            from .tools import ToolError
            raise ToolError(f"iree-compile for {target.describe()} failed: "
                            f"{str(error)[-6000:]}") from None
        names = [path.stem for path in executables(dumps)]
    seconds = time.perf_counter() - start
    versions = iree_backend.versions()
    manifest = {
        "format": FORMAT,
        "model": label,
        "device": target.device,
        "arch": target.arch,
        "driver": target.driver,
        "dtype": dtype,
        "compaction": compaction,
        "checkpoint": None if checkpoint is None else str(checkpoint.path),
        "checkpoint_architecture": None if checkpoint is None else checkpoint.architecture(),
        "max_positions": max_positions,
        "vocab_size": points["prefill"]["results"][0]["shape"][-1],
        "entry_points": points,
        "split_reductions": split,
        "executables": names,
        "iree_compile": versions["iree-base-compiler"],
        "compile_seconds": round(seconds, 2),
    }
    return DeviceModule(vmfb, manifest, lowered)


def executables(dump_dir: Path) -> List[Path]:
    """The executables' sources iree-compile wrote under `dump_dir` (one ``hal.executable``
    per file, in dispatch form: what each dispatch computes, on tensors)."""
    return sorted((Path(dump_dir) / "sources").glob("*.mlir"))


# ---------------------------------------------------------------------------------------------
# Loading (numpy and iree.runtime only)

def read_manifest(vmfb: Path) -> dict:
    """The manifest next to `vmfb` (``.json``), checked for its format."""
    path = Path(vmfb).with_suffix(".json")
    try:
        manifest = json.loads(path.read_text())
    except OSError as error:
        raise DeviceModelError(f"{path}: cannot read the manifest written with the vmfb "
                               f"({error.strerror or error})") from None
    except ValueError as error:
        raise DeviceModelError(f"{path}: not JSON ({error})") from None
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found != FORMAT:
        raise DeviceModelError(f"{path}: not a manifest of {FORMAT!r} (format {found!r})")
    return manifest


def bind(manifest: dict, checkpoint=None) -> Dict[str, List[np.ndarray]]:
    """The weight arrays ``prefill`` and ``decode`` take after their inputs, in order, from
    `checkpoint` (a directory or Checkpoint; default: the one the manifest names), which must
    have the architecture the module was compiled for (its config, less the keys that do not
    change the module, and its tensors' names and shapes) but may hold other values: the
    same checkpoint elsewhere, or one written from the same config."""
    points = manifest["entry_points"]
    if not any(points[name]["weights"] for name in points):
        if checkpoint is not None:
            raise DeviceModelError("the module takes no weights (they are inside it), but a "
                                   "checkpoint was given")
        return {"prefill": [], "decode": []}
    from .frontend.checkpoint import Checkpoint, CheckpointError, WeightRef, weight_arrays

    where = checkpoint if checkpoint is not None else manifest.get("checkpoint")
    if where is None:
        raise DeviceModelError("the module takes weights and its manifest names no checkpoint: "
                               "give one")
    try:
        ckpt = where if isinstance(where, Checkpoint) else Checkpoint(where)
    except CheckpointError as error:
        raise DeviceModelError(str(error)) from None
    try:
        # The config's architecture keys; the tensors' names and shapes: weight_arrays.
        ckpt.check_architecture(manifest.get("checkpoint_architecture") or {},
                                "the module")
    except CheckpointError as error:
        raise DeviceModelError(str(error)) from None
    refs = {name: [WeightRef(w["name"], w["transposed"]) for w in points[name]["weights"]]
            for name in ("prefill", "decode")}
    wanted = {ref: (tuple(w["shape"]), w["element"])
              for name in refs for ref, w in zip(refs[name], points[name]["weights"])}
    try:
        arrays, _ = weight_arrays(ckpt, wanted)
    except CheckpointError as error:
        raise DeviceModelError(str(error)) from None
    return {name: [arrays[ref] for ref in refs[name]] for name in refs}


def load(vmfb: Path, *, checkpoint=None, driver: Optional[str] = None,
         workers: Optional[int] = None):
    """The module at `vmfb` (with its manifest) as an :class:`~snapkv.iree_backend.IreeModel`
    on `driver` (default: the manifest's, ``cuda`` or ``local-task``), its weights bound from
    `checkpoint` (default: the manifest's)."""
    from .iree_backend import IreeModel

    manifest = read_manifest(vmfb)
    driver = driver or manifest["driver"]
    if (driver == "cuda") != (manifest["device"] == "cuda"):
        raise DeviceModelError(f"{vmfb} was compiled for {manifest['device']}, which the "
                               f"{driver} driver does not run")
    weights = bind(manifest, checkpoint)
    model = IreeModel(Path(vmfb).read_bytes(), vocab_size=manifest["vocab_size"],
                      driver=driver, workers=workers, max_positions=manifest["max_positions"],
                      weights=weights)
    model.manifest = manifest
    return model


def timed_generate(model, ids: Sequence[int], steps: int) -> dict:
    """Greedy decoding with the caches kept on the device between steps (only the logits
    row comes back), timing prefill and each decode step (wall clock around the call, which
    returns when the device is done). Returns ``tokens`` (``steps + 1``), ``prefill_seconds``,
    ``decode_seconds`` (one per step) and ``physical_lengths`` (cache rows after prefill and
    after each step)."""
    ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(1, -1)
    model._check_ids(ids)
    model.check_limits(ids.shape[1], steps)
    start = time.perf_counter()
    out = model.call_prefill(ids)
    row = np.array(out[0].to_host()[0, -1], copy=True)
    prefill = time.perf_counter() - start
    caches = list(out[1:])
    tokens, physical, decode = [int(np.argmax(row))], [caches[0].shape[2]], []
    for g in range(steps):
        start = time.perf_counter()
        out = model.call_decode(tokens[-1], ids.shape[1] + g, caches)
        row = np.array(out[0].to_host()[0, -1], copy=True)
        decode.append(time.perf_counter() - start)
        caches = list(out[1:])
        tokens.append(int(np.argmax(row)))
        physical.append(caches[0].shape[2])
    return {"tokens": tokens, "prefill_seconds": prefill, "decode_seconds": decode,
            "physical_lengths": physical}
