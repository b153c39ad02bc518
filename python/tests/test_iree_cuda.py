"""The rewritten model through IREE's CUDA target, compile-only (no GPU here; docs/gpu.md,
"The whole model through IREE"), and the same files run on IREE's llvm-cpu, the stand-in.

* iree-compile 3.13's CUDA targets: sm_80 configures, sm_90 does not (pinned, so that a newer
  IREE shows the default can move); the bug that :func:`iree_device.split_multi_result_
  reductions` works around, on a reproducer, and that the split computes the same;
* ``snapkv compile tiny_llama_dynamic.mlir --device cuda`` (one compile, module fixture):
  the manifest; the vmfb's executables are CUDA ones (its flatbuffer's rodata, read with
  ``iree-dump-module``) and hold every dumped dispatch; the expected dispatch count per entry
  point; the PTX targets sm_80 with one entry per executable and ``ptxas`` assembles it for
  sm_90 (what the driver's JIT does on an H100/H200); no tensor of any dispatch has two
  dynamic dimensions (the importer's ``[heads, L, L]`` scores would), while the input has;
* the same module for llvm-cpu, loaded from its manifest with :func:`iree_device.load`:
  tokens, logits and cache lengths equal the CPU pipeline's (``CompiledModel``), and the
  device-resident loop (:func:`iree_device.timed_generate`) gives the same tokens;
* `--dtype bf16|f16`: the retrieval model in that type compiles for CUDA and, on the
  stand-in, gives our CPU pipeline's tokens in that type;
* bad options and manifests are one-line errors.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import cli, iree_backend, iree_device, runtime

REASON = iree_backend.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

REPO = Path(__file__).resolve().parents[2]
DYNAMIC = REPO / "test" / "Models" / "tiny_llama_dynamic.mlir"
WINDOW, CAPACITY = 8, 24
OPTIONS = ["--window", str(WINDOW), "--capacity", str(CAPACITY), "--gqa", "expand"]
# Executables (dispatches compiled for the device) of the tiny model rewritten with OPTIONS,
# per entry point, with iree-compile 3.13: prefill holds the fused attention's key-tile ops
# and the select's (scores, pooling, the threshold search, the gathers); decode the one-step
# attention. A change of the lowering or of IREE changes these: look at the dumped sources.
EXPECTED_EXECUTABLES = {"prefill": 65, "decode": 25}

# A reduction with two results over a dynamic parallel dimension: iree-compile 3.13 fails on
# it for CUDA ("failed to bufferize op") and compiles it for llvm-cpu.
TWO_RESULT_REDUCTION = """
func.func @counts(%x: tensor<4x?x128xi32>, %t: tensor<4xi32>)
    -> (tensor<4x?xi32>, tensor<4x?xi32>) {
  %c1 = arith.constant 1 : index
  %n = tensor.dim %x, %c1 : tensor<4x?x128xi32>
  %zero = arith.constant 0 : i32
  %e = tensor.empty(%n) : tensor<4x?xi32>
  %z = linalg.fill ins(%zero : i32) outs(%e : tensor<4x?xi32>) -> tensor<4x?xi32>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>,
                                          affine_map<(d0, d1, d2) -> (d0)>,
                                          affine_map<(d0, d1, d2) -> (d0, d1)>,
                                          affine_map<(d0, d1, d2) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %t : tensor<4x?x128xi32>, tensor<4xi32>)
      outs(%z, %z : tensor<4x?xi32>, tensor<4x?xi32>) {
  ^bb0(%in: i32, %thr: i32, %above: i32, %equal: i32):
    %gt = arith.cmpi ugt, %in, %thr : i32
    %eq = arith.cmpi eq, %in, %thr : i32
    %gt32 = arith.extui %gt : i1 to i32
    %eq32 = arith.extui %eq : i1 to i32
    %a = arith.addi %above, %gt32 : i32
    %b = arith.addi %equal, %eq32 : i32
    linalg.yield %a, %b : i32, i32
  } -> (tensor<4x?xi32>, tensor<4x?xi32>)
  return %r#0, %r#1 : tensor<4x?xi32>, tensor<4x?xi32>
}
"""


def _compile(text, target):
    import iree.compiler
    return iree.compiler.compile_str(text, extra_args=target.flags())


def _ptxas():
    """ptxas where test/lit.cfg.py finds it (scripts/install-deps.sh provides one)."""
    roots = [os.environ[v] for v in ("CUDA_ROOT", "CUDA_HOME") if os.environ.get(v)]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    roots += ["/usr/local/cuda", os.path.join(cache, "snapkv", "cuda-wheels", "nvidia", "cu13")]
    for root in roots:
        if os.path.isfile(os.path.join(root, "bin", "ptxas")):
            return os.path.join(root, "bin", "ptxas")
    pytest.fail("no ptxas (CUDA toolkit or scripts/install-deps.sh's wheels)")


# --- iree-compile 3.13 itself ---------------------------------------------------------------

def test_cuda_targets_of_iree_compile():
    from iree.compiler import CompilerToolError

    one_op = "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n" \
             "  %b = arith.addf %a, %a : tensor<4xf32>\n  return %b : tensor<4xf32>\n}\n"
    assert _compile(one_op, iree_device.Target("cuda", "sm_80"))
    # What Target refuses with a hint, iree-compile 3.13 cannot configure (IREE issue 22147).
    flags = [f for f in iree_device.Target("cuda").flags() if "cuda-target" not in f]
    import iree.compiler
    with pytest.raises(CompilerToolError, match="missing GPU target"):
        iree.compiler.compile_str(one_op, extra_args=[*flags, "--iree-cuda-target=sm_90"])
    with pytest.raises(iree_device.DeviceModelError, match="no sm_90 target; sm_80 PTX runs"):
        iree_device.Target("cuda", "sm_90")
    with pytest.raises(iree_device.DeviceModelError, match="goes with the cuda device"):
        iree_device.Target("llvm-cpu", "sm_80")


def test_two_result_reduction_is_split_for_cuda():
    from iree.compiler import CompilerToolError

    cuda = iree_device.Target("cuda")
    with pytest.raises(CompilerToolError, match="failed to bufferize op"):
        _compile(TWO_RESULT_REDUCTION, cuda)
    split, count = iree_device.split_multi_result_reductions(TWO_RESULT_REDUCTION)
    assert count == 1
    assert iree_backend.count_ops(split, "linalg.generic") == 2
    assert _compile(split, cuda)
    # The split computes what the original does (llvm-cpu compiles both).
    import iree.runtime as rt

    rng = np.random.default_rng(0)
    x = rng.integers(0, 8, (4, 37, 128)).astype(np.int32)
    t = rng.integers(0, 8, 4).astype(np.int32)
    results = []
    for text in (TWO_RESULT_REDUCTION, split):
        vmfb = _compile(text, iree_device.Target("llvm-cpu"))
        module = rt.load_vm_flatbuffer(vmfb, driver="local-sync")
        results.append([np.asarray(r.to_host()) for r in module.counts(x, t)])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(results[0][0], (x > t[:, None, None]).sum(-1))


# --- snapkv compile --device cuda -------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_build(tmp_path_factory):
    require_aot_tools()
    out = tmp_path_factory.mktemp("cuda")
    status = cli.main(["compile", str(DYNAMIC), "-o", str(out / "tiny.vmfb"), "--device",
                       "cuda", *OPTIONS, "--dump-executables", str(out / "dump"), "-q"])
    assert status == 0
    return out


def _executables(dump):
    """{export name: parsed executable source} of every dumped executable."""
    from iree.compiler import ir

    context = ir.Context()
    found = {}
    with context:
        for path in iree_device.executables(dump):
            module = ir.Module.parse(path.read_text())
            exports = [op for op in _walk(module) if op.name == "hal.executable.export"]
            assert len(exports) == 1, path
            name = ir.StringAttr(exports[0].attributes["sym_name"]).value
            found[name] = module
    return context, found


def _walk(module):
    from iree.compiler import ir

    ops = []
    module.operation.walk(lambda op: ops.append(op) or ir.WalkResult.ADVANCE)
    return ops


def test_manifest(cuda_build):
    manifest = json.loads((cuda_build / "tiny.json").read_text())
    assert manifest["format"] == iree_device.FORMAT
    assert (manifest["device"], manifest["arch"], manifest["driver"]) == ("cuda", "sm_80", "cuda")
    assert manifest["compaction"]["window"] == WINDOW
    assert manifest["compaction"]["capacity"] == CAPACITY
    assert manifest["dtype"] == "f32" and manifest["vocab_size"] == 256
    assert manifest["split_reductions"] == 4   # two per select (counts, prefix sums)
    prefill, decode = (manifest["entry_points"][n] for n in ("prefill", "decode"))
    assert prefill["inputs"] == [{"shape": [1, None], "element": "i64"}]
    assert [t["shape"] for t in decode["inputs"]] == \
        [[1, 1], [1]] + [[1, 4, None, 16]] * 4   # token, position, K/V of two layers
    assert prefill["weights"] == decode["weights"] == []     # inside the module
    assert len(manifest["executables"]) == sum(EXPECTED_EXECUTABLES.values())


def test_vmfb_holds_cuda_executables(cuda_build):
    # iree-dump-module (iree-base-runtime), run as a module: no reliance on PATH.
    dumped = subprocess.run([sys.executable, "-m", "iree._runtime.scripts.iree_dump_module",
                             "--output=flatbuffer-json", str(cuda_build / "tiny.vmfb")],
                            capture_output=True, text=True, check=True).stdout
    segments = json.loads(dumped)["rodata_segments"]
    strings = set()
    for segment in segments:
        if "embedded_data" in segment:
            try:
                strings.add(bytes(segment["embedded_data"]).decode())
            except UnicodeDecodeError:
                pass
    assert "cuda-nvptx-fb" in strings             # hal.executable.format
    assert not any(s.startswith("embedded-elf") for s in strings)
    context, executables = _executables(cuda_build / "dump")
    assert set(executables) <= strings             # every dispatch is in the module
    with context:
        from iree.compiler import ir
        for name, module in executables.items():
            variants = [op for op in _walk(module) if op.name == "hal.executable.variant"]
            assert [ir.StringAttr(v.attributes["sym_name"]).value for v in variants] == \
                ["cuda_nvptx_fb"], name


def test_expected_dispatch_count(cuda_build):
    _, executables = _executables(cuda_build / "dump")
    counts = {point: sum(name.startswith(f"{point}_dispatch_") for name in executables)
              for point in EXPECTED_EXECUTABLES}
    assert counts == EXPECTED_EXECUTABLES
    assert len(executables) == sum(EXPECTED_EXECUTABLES.values())


def test_ptx_targets_sm80_and_assembles_for_sm90(cuda_build, tmp_path):
    binaries = sorted((cuda_build / "dump" / "binaries").glob("*.ptx"))
    assert len(binaries) == 1                      # linked: one CUDA module
    lines = [line.split() for line in binaries[0].read_text().splitlines()]
    assert [words[1] for words in lines if words[:1] == [".target"]] == ["sm_80"]
    entries = [words for words in lines if words[:2] == [".visible", ".entry"]]
    assert len(entries) == sum(EXPECTED_EXECUTABLES.values())
    subprocess.run([_ptxas(), "-arch=sm_90", str(binaries[0]), "-o", str(tmp_path / "a.cubin")],
                   check=True, capture_output=True)
    assert (tmp_path / "a.cubin").stat().st_size > 0


def test_no_dispatch_holds_a_length_by_length_tensor(cuda_build):
    """With a dynamic prompt length L, a [heads, L, L] tensor has two dynamic dimensions:
    the imported model has them (its attention scores), no dispatch of the compiled one has
    (the fused attention works on [rows, key tile] tiles, the select on tiles and rows)."""
    imported = [shape for shape, _, _ in runtime.tensor_types(DYNAMIC.read_text(), "prefill")
                if sum(d is None for d in shape) >= 2]
    assert imported, "the imported model should hold [heads, L, L] scores"
    context, executables = _executables(cuda_build / "dump")
    from iree.compiler import ir

    attention = 0
    with context:
        for name, module in executables.items():
            ops = _walk(module)
            for op in ops:
                for value in [*op.operands, *op.results]:
                    if isinstance(value.type, ir.RankedTensorType):
                        dynamic = [ir.ShapedType.is_dynamic_size(d) for d in value.type.shape]
                        assert sum(dynamic) < 2, f"{name}: {value.type}"
            attention += name.startswith("prefill") and any(op.name == "math.exp" for op in ops)
    # The prefill's softmaxes: the fused attention's key-tile steps and the select's
    # statistics and votes, each in dispatches of their own.
    assert attention >= 4


# --- the same module on llvm-cpu (the stand-in) ----------------------------------------------

def test_stand_in_matches_cpu_pipeline(tmp_path):
    require_aot_tools()
    stages = iree_backend.prepare(DYNAMIC.read_text(), window=WINDOW, capacity=CAPACITY,
                                  gqa="expand")
    module = iree_device.compile_module(stages["rewritten"], iree_device.Target("llvm-cpu"),
                                        compaction={"window": WINDOW, "capacity": CAPACITY})
    module.write(tmp_path / "tiny.vmfb")
    model = iree_device.load(tmp_path / "tiny.vmfb", workers=2)
    prompt = np.random.default_rng(7).integers(0, 256, 48)
    got = model.generate(prompt, 6)
    want = runtime.CompiledModel(stages["rewritten"]).generate(prompt, 6)
    assert got["tokens"] == want["tokens"]
    assert got["physical_lengths"] == want["physical_lengths"] == list(range(24, 31))
    assert np.abs(got["logits"] - want["logits"]).max() <= 1e-5
    timed = iree_device.timed_generate(model, prompt, 6)
    assert timed["tokens"] == want["tokens"]
    assert timed["physical_lengths"] == want["physical_lengths"]
    assert len(timed["decode_seconds"]) == 6 and timed["prefill_seconds"] > 0


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_16_bit_model_compiles_for_cuda_and_matches_the_cpu_pipeline_on_the_stand_in(
        dtype, tmp_path):
    """`--dtype bf16|f16` through IREE: the retrieval model exported in that type (weights,
    activations, caches) compiles for CUDA and for llvm-cpu; its manifest says so and its
    weights are arguments of that type; on the stand-in (bf16 weights and caches uploaded as
    bf16 from their uint16 bit patterns) it gives the tokens of our CPU pipeline's model in
    the same type."""
    require_aot_tools()
    pytest.importorskip("torch_mlir")
    from snapkv import hf

    model_dir = REPO / "models" / "retrieval-llama"
    options = ["--window", "16", "--capacity", "64", "--dtype", dtype, "-q"]
    for device in ("cuda", "iree-cpu"):
        out = tmp_path / f"{device}.vmfb"
        assert cli.main(["compile", str(model_dir), "-o", str(out), "--device", device,
                         *options]) == 0
        manifest = json.loads(out.with_suffix(".json").read_text())
        assert manifest["dtype"] == dtype and manifest["executables"]
        weights = manifest["entry_points"]["prefill"]["weights"]
        assert weights and {w["element"] for w in weights} == {dtype}
    model = iree_device.load(tmp_path / "iree-cpu.vmfb", workers=2)
    prompt = np.random.default_rng(3).integers(0, 200, 80)
    got = model.generate(prompt, 6)
    want = hf.load(model_dir, hf.Compaction(window=16, capacity=64),
                   options=hf.ExportOptions(dtype=dtype)).generate(prompt, 6)
    assert got["tokens"] == want["tokens"]
    assert got["physical_lengths"] == want["physical_lengths"]


# --- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["-o", "-", "--device", "cuda"], "give -o OUT.vmfb"),
    (["-o", "x.vmfb", "--device", "cuda", "--cuda-arch", "sm_90"], "no sm_90 target"),
    (["-o", "x.vmfb", "--device", "cuda", "--lower"], "--lower is our CPU pipeline"),
    (["-o", "x.vmfb", "--full-cache"], "--full-cache goes with --device cuda or iree-cpu"),
    (["-o", "x.vmfb", "--device", "iree-cpu", "--cuda-arch", "sm_80"],
     "--cuda-arch goes with --device cuda"),
    (["-o", "x.vmfb", "--device", "cuda", "--gqa", "mean", "--chunk", "16"],
     "one-shot prefill and a uniform budget only"),
    (["-o", "x.mlir", "--checkpoint", str(REPO / "models" / "retrieval-llama")],
     "--checkpoint goes with --device cuda or iree-cpu"),
])
def test_bad_device_options_are_one_line_errors(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compile", str(DYNAMIC), *args]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_manifests_are_refused(cuda_build, tmp_path):
    with pytest.raises(iree_device.DeviceModelError, match="cannot read the manifest"):
        iree_device.load(tmp_path / "missing.vmfb")
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(iree_device.DeviceModelError, match="not a manifest of"):
        iree_device.load(tmp_path / "other.vmfb")
    with pytest.raises(iree_device.DeviceModelError, match="compiled for cuda, which the "
                                                           "local-task driver does not run"):
        iree_device.load(cuda_build / "tiny.vmfb", driver="local-task")
    manifest = iree_device.read_manifest(cuda_build / "tiny.vmfb")
    with pytest.raises(iree_device.DeviceModelError, match="takes no weights"):
        iree_device.bind(manifest, REPO / "models" / "retrieval-llama")


# --- the device script's verdicts (benchmarks/gpu/model_check.py) --------------------------

def _model_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "model_check", REPO / "benchmarks" / "gpu" / "model_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_check"] = module   # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_model_check_verdicts_and_table():
    check = _model_check()
    logits = np.zeros((3, 4), np.float32)
    logits[:, 1] = 1.0                               # token 1, far ahead of the others
    assert check.compare([1, 1, 1], logits, [1, 1, 1], logits)["status"] == "PASS"
    assert check.compare([1, 2, 1], logits, [1, 1, 1], logits) == {
        "status": "FAIL", "first_difference": 1, "logits_max_abs_diff": 0.0}
    tied = logits.copy()
    tied[1, 2] = 1.0 - check.TIE / 2                 # the reference's two best nearly equal
    assert check.compare([1, 2, 1], logits, [1, 1, 1], tied)["status"] == "NEAR-TIE"
    # A large vocabulary keeps each row's TOP largest logits; compare() reads those.
    wide = np.random.default_rng(0).standard_normal((3, 5000)).astype(np.float32)
    kept = check.record(wide)
    assert np.asarray(kept["top_indices"]).shape == (3, check.TOP)
    tokens = list(wide.argmax(1))
    same = check.compare(tokens, wide, tokens, kept)     # values kept to 6 decimals
    assert same["status"] == "PASS" and same["logits_max_abs_diff"] <= 1e-6
    shifted = wide.copy()
    shifted[0, kept["top_indices"][0][5]] += 0.5
    assert abs(check.compare(tokens, shifted, tokens, kept)["logits_max_abs_diff"] - 0.5) < 1e-5
    assert check.record(logits) == {"all": logits.tolist()}
    cell = {"prefill_ms": 1.5, "decode_ms": 0.25}
    table = check.table([{"model": "retrieval", "length": 1024, "iree_full": cell,
                          "iree_snapkv": cell, "hf_sdpa": cell,
                          "torch_compile": {"error": "x"}},
                         {"model": "retrieval", "length": 4096, "skipped": "past --budget"}])
    lines = table.splitlines()
    assert lines[2] == \
        "| retrieval | 1024 | 1.50 | 0.250 | 1.50 | 0.250 | 1.50 | 0.250 | - | - |"
    assert lines[3].count("skipped") == 8


def test_bind_takes_the_manifests_weights_from_the_checkpoint():
    """What load() binds on the GPU machine: each entry point's weights, in the manifest's
    order, mapped from the checkpoint (one array for a tensor both take), and only from a
    checkpoint of the architecture the module was compiled for (its config's architecture
    keys: transformers_version and the like may differ)."""
    from snapkv.frontend.checkpoint import Checkpoint

    checkpoint = Checkpoint(REPO / "models" / "retrieval-llama")
    names = sorted(checkpoint.tensors)
    weights = [{"name": n, "transposed": False, "shape": list(checkpoint.tensors[n].shape),
                "element": "f32"} for n in names]
    manifest = {"entry_points": {"prefill": {"weights": weights},
                                 "decode": {"weights": weights[:1]}},
                "checkpoint": str(checkpoint.path),
                "checkpoint_architecture": checkpoint.architecture()}
    bound = iree_device.bind(manifest)
    assert len(bound["prefill"]) == len(names)
    assert bound["decode"][0] is bound["prefill"][0]
    for name, array in zip(names, bound["prefill"]):
        np.testing.assert_array_equal(array, checkpoint.array(name))
    other = dict(checkpoint.architecture(), num_hidden_layers=3)
    with pytest.raises(iree_device.DeviceModelError,
                       match="not the architecture the module was exported from "
                             r"\(num_hidden_layers: 3 there, 2 here\)"):
        iree_device.bind({**manifest, "checkpoint_architecture": other})
    with pytest.raises(iree_device.DeviceModelError, match="names no checkpoint"):
        iree_device.bind({**manifest, "checkpoint": None})
