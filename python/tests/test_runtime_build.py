"""snapkv.runtime.build: the pipeline is the caller's, a large module is split for parallel
clang, and the library calls its own functions (-Bsymbolic)."""

import ctypes

import numpy as np
import pytest
from conftest import require_aot_tools
from runtime_inputs import ALLOC

from snapkv import runtime
from snapkv.runtime import build
from snapkv.tools import ToolError


def test_the_pipeline_is_the_callers_and_part_of_the_cache_key(tmp_path):
    """compile_library(pipeline=...) runs that pipeline (a bad option fails in snapkv-opt)
    and caches its result apart from the default pipeline's."""
    require_aot_tools()
    recompute = runtime.PIPELINE.replace("asserts=report", "asserts=report keep-logits=false")
    assert recompute != runtime.PIPELINE
    runtime.compile_library(ALLOC, cache_dir=tmp_path)
    runtime.compile_library(ALLOC, cache_dir=tmp_path, pipeline=recompute)
    assert len(list(tmp_path.rglob("*.key"))) == 2
    bad = runtime.PIPELINE.replace("asserts=report", "asserts=report no-such-option=1")
    with pytest.raises(ToolError, match="no-such-option"):
        runtime.compile_library(ALLOC, cache_dir=tmp_path, pipeline=bad)


def test_a_module_split_for_parallel_clang_behaves_the_same(tmp_path, monkeypatch):
    """A large module is split (snapkv-translate --parts) and compiled on several cores: the
    parts link into one library whose functions and run-time checks (the error slot) work
    as before."""
    require_aot_tools()
    monkeypatch.setattr(build, "SPLIT_BYTECODE_BYTES", 0)
    monkeypatch.setattr(build, "_cores", lambda: 2)
    lib = runtime.compile_library(ALLOC, cache_dir=tmp_path)
    assert lib.stats["clang"]["parts"] == 2
    fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "f", runtime.signature(ALLOC, "f"))
    with pytest.raises(runtime.CompiledCheckError, match="out of memory: @f could not allocate"):
        fn(np.array([2 ** 60], dtype=np.int64))
    (out,) = fn(np.array([3], dtype=np.int64))
    np.testing.assert_array_equal(out, [1, 1, 1])


LIBC_NAMED = """
func.func @select(%a: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%a : tensor<4xf32>)
                       outs(%e : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}
"""


def test_a_function_named_like_libc_is_the_one_called(tmp_path):
    """`_mlir_ciface_select` calls the module's @select, not libc's select(): the library
    binds its own symbols first (-Bsymbolic), whatever else the process has loaded."""
    require_aot_tools()
    # -O0: the wrapper really calls @select (inlined, the question would not arise).
    lib = runtime.compile_library(LIBC_NAMED, cache_dir=tmp_path, cflags=("-O0",))
    fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "select",
                                  runtime.signature(LIBC_NAMED, "select"))
    a = np.arange(4, dtype=np.float32)
    (doubled,) = fn(a)
    np.testing.assert_array_equal(doubled, 2 * a)


def test_tools_under_other_names_compile(tmp_path, monkeypatch):
    """SNAPKV_OPT/SNAPKV_TRANSLATE may name copies under any file name (a pinned copy of the
    tools while the tree is rebuilt): the compile's statistics are keyed by the step, not the
    file name (a KeyError once ended `snapkv eval` this way)."""
    require_aot_tools()
    from snapkv import tools

    pinned = tmp_path / "bin"
    pinned.mkdir()
    for name, env in (("snapkv-opt", "SNAPKV_OPT"), ("snapkv-translate", "SNAPKV_TRANSLATE")):
        copy = pinned / f"{name}-pinned"
        copy.write_bytes(tools.require(getattr(tools, name.replace("-", "_"))(), name)
                         .read_bytes())
        copy.chmod(0o755)
        monkeypatch.setenv(env, str(copy))
    lib = runtime.compile_library(ALLOC, cache_dir=tmp_path / "cache")
    assert {"snapkv-opt", "snapkv-translate", "clang"} <= set(lib.stats)
    assert lib.stats["snapkv-translate"]["bytes"] > 0


def test_a_failing_part_is_a_tool_error_naming_it(tmp_path, monkeypatch):
    """The parts compile in parallel (one thread per clang, through tools.run); a clang that
    fails ends the compile with a ToolFailed naming its part and quoting clang."""
    require_aot_tools()
    from snapkv.tools import ToolFailed

    monkeypatch.setattr(build, "SPLIT_BYTECODE_BYTES", 0)
    monkeypatch.setattr(build, "_cores", lambda: 2)
    with pytest.raises(ToolFailed, match=r"clang on part\d failed \(exit 1\)[\s\S]*"
                                         r"-fno-such-flag"):
        runtime.compile_library(ALLOC, cache_dir=tmp_path, cflags=("-fno-such-flag",))


BF16_MATMUL = """
func.func @mm(%a: tensor<4x64xbf16>, %b: tensor<64x32xbf16>, %c: tensor<4x32xf32>)
    -> tensor<4x32xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<4x64xbf16>, tensor<64x32xbf16>)
      outs(%c : tensor<4x32xf32>) -> tensor<4x32xf32>
  return %r : tensor<4x32xf32>
}
"""


def test_the_bf16_microkernel_follows_clangs_target(tmp_path, capsys):
    """The pipeline's bf16 microkernel (vdpbf16ps) is the host's only when clang compiles
    for the host (-march=native): without it the fallback is forced, so the library still
    compiles (clang cannot select vdpbf16ps for a generic x86-64). -v says which."""
    require_aot_tools()
    generic, why = build._microkernel(runtime.PIPELINE, ("-O0",))
    assert "snapkv-cpu-pipeline{cpu-features=-avx512bf16 " in generic
    assert "no -march=native" in why
    explicit = runtime.PIPELINE.replace("asserts=report", "asserts=report cpu-features=+avx2")
    assert build._microkernel(explicit, ("-O0",))[0] == explicit
    native, why = build._microkernel(runtime.PIPELINE, build.DEFAULT_CFLAGS)
    assert native == runtime.PIPELINE
    assert why.startswith("avx512bf16" if "avx512_bf16" in build._cpu().split() else "fallback")
    for cflags in (("-O0",), build.DEFAULT_CFLAGS):
        runtime.compile_library(BF16_MATMUL, cache_dir=tmp_path, cflags=cflags, verbose=True)
    log = capsys.readouterr().err
    assert "bf16 matmuls: fallback (f32 FMAs): not compiled for this CPU" in log
    assert f"bf16 matmuls: {why}" in log
