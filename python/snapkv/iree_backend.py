"""The rewritten model on IREE: compile with ``iree-compile`` (llvm-cpu), run with ``iree.runtime``.

See docs/iree.md. The steps, each a function here:

1. :func:`compress` -- ``snapkv-opt --snapkv-compress-kv-cache="..."`` (``strict=true``, so a
   model the pass does not recognise is an error, not a silently unchanged module);
2. :func:`lower_to_upstream` -- ``snapkv-opt --convert-snapkv-to-linalg``: ``snapkv.select``
   becomes func/arith/math/linalg/tensor/scf/cf/affine code; :func:`dialects` checks that no
   other dialect (in particular no ``snapkv`` op) is left;
3. :func:`linearize_tensor_inserts` -- the one IREE-specific preparation: every
   ``tensor.insert`` into a tensor of rank >= 2 becomes collapse-to-1-D / insert / expand.
   IREE (checked 2.9.0, 3.10.0, 3.13.0) turns a host-side ``tensor.insert`` (one outside a
   dispatch, such as the top-k compaction loops of the lowered select) into a
   ``stream.tensor.fill`` of lengths ``[1, ..., 1]`` and encodes its byte length as if the
   lengths were an index (``EncodeTensorFillOp`` calls ``calculateElementByteOffset`` on the
   lengths): a rank-3 ``1x4x17`` target gets a fill of ``68 + 17 + 1 = 86`` elements instead of
   one. Here ``iree-compile`` rejects the module ("invalid Write access range ... length >
   resource size"); when the wrong length happens to fit, it silently writes a run of elements
   (a ``2x8`` insert at ``[0, 1]`` fills 9 of them; ``python/tests/test_iree.py`` keeps that
   reproducer as a strict xfail). A rank-1 insert has the right length. No upstream pass
   linearises ``tensor.insert``, so this is a small rewrite through the MLIR Python bindings that
   ship with ``iree-base-compiler`` (semantics-preserving; it only changes how the element is
   addressed);
4. :func:`compile_vmfb` -- ``iree-compile`` with :data:`IREE_COMPILE_FLAGS`;
5. :class:`IreeModel` -- prefill/decode/generate through ``iree.runtime`` with the same calling
   convention and the same ``generate()`` as :class:`snapkv.frontend.runner.CompiledModel`.

Needs ``iree-base-compiler`` and ``iree-base-runtime`` (PyPI), numpy and ``snapkv-opt``.
Command line (compares with the CPU pipeline)::

    python -m snapkv.iree_backend test/Models/tiny_llama_dynamic.mlir --window 8 --capacity 24 \\
        --prompt-length 48 --seed 7 --steps 8 --compare --save-dir /tmp/snapkv-iree

(The module is not called ``snapkv/iree.py`` so that running it as a script can never shadow the
``iree`` package.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import tools
from .frontend import runner
from .tools import ToolError

# What convert-snapkv-to-linalg may leave (the importer's IR uses the same dialects).
UPSTREAM_DIALECTS = frozenset({"builtin", "func", "arith", "math", "linalg", "tensor", "scf",
                               "cf", "affine"})

# The input is plain upstream MLIR (no torch/stablehlo/tosa conversion). `host`: the vmfb is
# built for the machine that runs it (the tests compile and run in one process).
IREE_COMPILE_FLAGS = (
    "--iree-input-type=none",
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
)

# Single-threaded, synchronous local device: deterministic and modest on a shared machine.
DEFAULT_DRIVER = "local-sync"


def unavailable_reason() -> Optional[str]:
    """None if ``iree.compiler`` and ``iree.runtime`` import, else why not."""
    for name in ("iree.compiler", "iree.runtime"):
        try:
            __import__(name)
        except ImportError as error:
            return (f"{name} is not importable ({error}); "
                    f"pip install iree-base-compiler iree-base-runtime")
    return None


def versions() -> Dict[str, str]:
    """Installed versions of the IREE wheels (and the compiler's own version line)."""
    from importlib import metadata
    out = {}
    for dist in ("iree-base-compiler", "iree-base-runtime"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


# ---------------------------------------------------------------------------------------------
# snapkv-opt steps

def snapkv_opt(text: str, *args: str, timeout: int = 600) -> str:
    """``snapkv-opt <args>`` on `text` (stdin), returning the printed module."""
    opt = tools.require(tools.snapkv_opt(), "snapkv-opt")
    try:
        done = subprocess.run([str(opt), *args, "-"], input=text, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError(f"snapkv-opt timed out after {timeout}s") from None
    if done.returncode != 0:
        raise ToolError(f"snapkv-opt {' '.join(args)} failed (exit {done.returncode}):\n"
                        f"{done.stderr[-4000:]}")
    return done.stdout


def compress_options(window: int, capacity: int, kernel_size: int = 5, pooling: str = "avg",
                     gqa: str = "expand", order: str = "position") -> str:
    return (f"window={window} capacity={capacity} kernel={kernel_size} "
            f"pooling={pooling} gqa={gqa} order={order} strict=true")


def compress(text: str, **options) -> str:
    """The model rewrite (``--snapkv-compress-kv-cache``, strict): keeps ``snapkv.select`` ops."""
    return snapkv_opt(text, f"--snapkv-compress-kv-cache={compress_options(**options)}")


def lower_to_upstream(text: str) -> str:
    """``--convert-snapkv-to-linalg``; raises if anything but upstream dialects remains."""
    lowered = snapkv_opt(text, "--convert-snapkv-to-linalg")
    extra = dialects(lowered) - UPSTREAM_DIALECTS
    if extra:
        raise ToolError(f"convert-snapkv-to-linalg left ops of {sorted(extra)}")
    return lowered


# ---------------------------------------------------------------------------------------------
# IR inspection and the tensor.insert workaround (MLIR Python bindings of iree-base-compiler)

def _parse(text: str):
    from iree.compiler import ir
    context = ir.Context()
    # The lowering keeps discardable `snapkv.*` tiling hints on some linalg ops.
    context.allow_unregistered_dialects = True
    with context:
        return context, ir.Module.parse(text)


def _ops(module) -> list:
    from iree.compiler import ir
    ops = []

    def visit(op):
        ops.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return ops


def dialects(text: str) -> set:
    """Dialect namespaces of every operation in `text` (nested ones included)."""
    context, module = _parse(text)
    with context:
        return {op.name.split(".", 1)[0] for op in _ops(module)}


def count_ops(text: str, name: str) -> int:
    """How many `name` ops `text` holds (`text` must parse without the snapkv dialect)."""
    context, module = _parse(text)
    with context:
        return sum(op.name == name for op in _ops(module))


def linearize_tensor_inserts(text: str) -> Tuple[str, int]:
    """Rewrite each ``tensor.insert`` into a rank >= 2 tensor as an insert into its 1-D view.

    ``%r = tensor.insert %v into %t[%i, %j, %k] : tensor<AxBxC>`` becomes::

        %f = tensor.collapse_shape %t [[0, 1, 2]] : tensor<AxBxC> into tensor<(A*B*C)>
        %n = (%i * B + %j) * C + %k
        %g = tensor.insert %v into %f[%n] : tensor<(A*B*C)>
        %r = tensor.expand_shape %g [[0, 1, 2]] output_shape [A, B, C]

    (dynamic extents come from ``tensor.dim``). Returns the new text and the number of inserts
    rewritten. Works around the IREE ``stream.tensor.fill`` length bug described in the module
    docstring; the result means exactly what the input means.
    """
    from iree.compiler import ir
    from iree.compiler.dialects import arith, tensor

    context, module = _parse(text)
    count = 0
    with context, ir.Location.unknown():
        index = ir.IndexType.get()
        i64 = ir.IntegerType.get_signless(64)
        for op in _ops(module):
            if op.name != "tensor.insert":
                continue
            value, dest, indices = op.operands[0], op.operands[1], list(op.operands[2:])
            dest_type = ir.RankedTensorType(dest.type)
            rank = dest_type.rank
            if rank < 2:
                continue
            shape = list(dest_type.shape)
            dynamic = ir.ShapedType.get_dynamic_size()
            with ir.InsertionPoint(op), op.location:
                def const(n):
                    return arith.ConstantOp(index, n).result

                extents = [const(d) if d != dynamic else tensor.DimOp(dest, const(i)).result
                           for i, d in enumerate(shape)]
                flat_size = dynamic if dynamic in shape else int(np.prod(shape))
                flat_type = ir.RankedTensorType.get([flat_size], dest_type.element_type)
                group = ir.ArrayAttr.get([ir.ArrayAttr.get(
                    [ir.IntegerAttr.get(i64, i) for i in range(rank)])])
                flat = tensor.CollapseShapeOp(flat_type, dest, group).result
                linear = indices[0]
                for extent, idx in zip(extents[1:], indices[1:]):
                    linear = arith.AddIOp(arith.MulIOp(linear, extent).result, idx).result
                inserted = tensor.InsertOp(value, flat, [linear]).result
                dynamic_extents = [e for e, d in zip(extents, shape) if d == dynamic]
                expanded = tensor.ExpandShapeOp(dest_type, inserted, group, dynamic_extents,
                                                shape).result
            op.result.replace_all_uses_with(expanded)
            op.erase()
            count += 1
        return str(module), count


# ---------------------------------------------------------------------------------------------
# Compiling and running

def compile_vmfb(text: str, extra_args: Sequence[str] = ()) -> bytes:
    """``iree-compile`` `text` (upstream dialects only) for llvm-cpu; returns the vmfb bytes."""
    import iree.compiler
    try:
        return iree.compiler.compile_str(text, extra_args=[*IREE_COMPILE_FLAGS, *extra_args])
    except iree.compiler.CompilerToolError as error:
        raise ToolError(str(error)[-6000:]) from None


def prepare(text: str, **options) -> Dict[str, object]:
    """The whole path from an imported model to IREE's input.

    Returns ``rewritten`` (what :class:`~snapkv.frontend.runner.CompiledModel` compiles),
    ``lowered`` (upstream dialects only), ``iree_input`` (after
    :func:`linearize_tensor_inserts`) and ``inserts`` (how many were rewritten).
    """
    rewritten = compress(text, **options)
    lowered = lower_to_upstream(rewritten)
    iree_input, inserts = linearize_tensor_inserts(lowered)
    return dict(rewritten=rewritten, lowered=lowered, iree_input=iree_input, inserts=inserts)


def _copy(array) -> np.ndarray:
    # A returned DeviceArray's host view maps the device buffer; once the DeviceArray is gone
    # the allocator reuses that memory (later calls overwrite it), so copy every result.
    return np.array(array.to_host(), copy=True)


class IreeModel:
    """A compiled ``@prefill``/``@decode`` module loaded into an IREE runtime context.

    Same interface as :class:`snapkv.frontend.runner.CompiledModel`: ``prefill(ids)`` ->
    ``(logits [1, L, V], caches)``, ``decode(token, position, caches)`` -> ``(logits [1, 1, V],
    caches)`` and the very same ``generate(ids, steps)`` (greedy, logical positions ``L + g``),
    which checks ``max_positions`` and, when the module text is known (:meth:`from_text`), the
    memory the largest tensor needs, as CompiledModel does.
    """

    def __init__(self, vmfb: bytes, *, vocab_size: Optional[int] = None,
                 driver: str = DEFAULT_DRIVER, growth: Optional[dict] = None,
                 max_positions: Optional[int] = None):
        import iree.runtime as rt
        self.vocab_size = vocab_size
        self.max_positions = max_positions
        self._growth = growth or {"prefill": {}, "decode": {}}
        self.config = rt.Config(driver)
        self.context = rt.SystemContext(config=self.config)
        self.context.add_vm_module(rt.VmModule.copy_buffer(self.config.vm_instance, vmfb))
        module = self.context.modules.module
        self._prefill, self._decode = module["prefill"], module["decode"]

    @classmethod
    def from_text(cls, text: str, **kwargs) -> "IreeModel":
        """Compile `text` (IREE's input, see :func:`prepare`) and load it."""
        vocab = runner.signature(text, "prefill").results[0].shape[-1]
        growth = {name: runner.growth(text, name) for name in ("prefill", "decode")}
        return cls(compile_vmfb(text), vocab_size=vocab, growth=growth, **kwargs)

    def _check_ids(self, ids: np.ndarray):
        # IREE drops the cf.assert inside the embedding gather's linalg body (a dispatch), so
        # an out-of-range id would read out of bounds without an error.
        runner.check_token_ids(ids, self.vocab_size)

    def prefill(self, ids) -> Tuple[np.ndarray, List[np.ndarray]]:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        self._check_ids(ids)
        out = [_copy(o) for o in self._prefill(ids)]
        return out[0], out[1:]

    def decode(self, token: int, position: int, caches: Sequence[np.ndarray]) \
            -> Tuple[np.ndarray, List[np.ndarray]]:
        ids = np.array([[int(token)]], dtype=np.int64)
        self._check_ids(ids)
        out = [_copy(o) for o in self._decode(ids, np.array([int(position)], dtype=np.int64),
                                              *[np.ascontiguousarray(c) for c in caches])]
        return out[0], out[1:]

    # The generation loop is CompiledModel's, unchanged (it only calls prefill/decode).
    _physical = staticmethod(runner.CompiledModel._physical)
    check_limits = runner.CompiledModel.check_limits
    generate = runner.CompiledModel.generate


def compare(iree_out: dict, cpu_out: dict) -> Dict[str, object]:
    """Differences between two ``generate()`` results."""
    return dict(
        tokens_equal=iree_out["tokens"] == cpu_out["tokens"],
        physical_equal=iree_out["physical_lengths"] == cpu_out["physical_lengths"],
        logits_max_abs_diff=float(np.abs(iree_out["logits"] - cpu_out["logits"]).max()),
        cache_max_abs_diff=max(float(np.abs(a - b).max())
                               for a, b in zip(iree_out["caches"], cpu_out["caches"])),
    )


# ---------------------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path, help="imported model (@prefill, @decode)")
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--capacity", type=int, default=24)
    parser.add_argument("--kernel", "--kernel-size", type=int, default=5, dest="kernel_size")
    parser.add_argument("--pooling", default="avg")
    parser.add_argument("--gqa", default="expand")
    parser.add_argument("--order", default="position")
    parser.add_argument("--prompt-length", "--prompt-len", type=int, default=48,
                        dest="prompt_length")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--compare", action="store_true",
                        help="also run the CPU pipeline (CompiledModel) and print differences")
    parser.add_argument("--save-dir", type=Path,
                        help="write rewritten.mlir, lowered.mlir, iree_input.mlir, model.vmfb")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        sys.exit(reason)
    print("versions:", ", ".join(f"{k} {v}" for k, v in versions().items()))
    options = dict(window=args.window, capacity=args.capacity, kernel_size=args.kernel_size,
                   pooling=args.pooling, gqa=args.gqa, order=args.order)
    stages = prepare(args.module.read_text(), **options)
    print(f"lowered: dialects {sorted(dialects(stages['lowered']))}; "
          f"{stages['inserts']} tensor.insert linearised")
    start = time.perf_counter()
    vmfb = compile_vmfb(stages["iree_input"])
    print(f"iree-compile: {len(vmfb)} bytes in {time.perf_counter() - start:.1f} s")
    if args.save_dir:
        args.save_dir.mkdir(parents=True, exist_ok=True)
        for name in ("rewritten", "lowered", "iree_input"):
            (args.save_dir / f"{name}.mlir").write_text(stages[name])
        (args.save_dir / "model.vmfb").write_bytes(vmfb)
        print(f"saved to {args.save_dir}")
    vocab = runner.signature(stages["iree_input"], "prefill").results[0].shape[-1]
    model = IreeModel(vmfb, vocab_size=vocab)
    ids = np.random.default_rng(args.seed).integers(0, vocab, args.prompt_length)[None]
    start = time.perf_counter()
    out = model.generate(ids, args.steps)
    print(f"iree generate: {(time.perf_counter() - start) * 1e3:.1f} ms")
    print(f"tokens:           {out['tokens']}")
    print(f"positions:        {out['positions']}")
    print(f"physical lengths: {out['physical_lengths']}")
    if args.compare:
        cpu = runner.CompiledModel(stages["rewritten"]).generate(ids, args.steps)
        print(f"cpu tokens:       {cpu['tokens']}")
        for key, value in compare(out, cpu).items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
