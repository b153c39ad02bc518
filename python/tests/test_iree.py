"""snapkv on IREE (docs/iree.md): what `convert-snapkv-to-linalg` prints goes through plain
`iree-compile` (llvm-cpu), with no rewriting on our side, and runs on `iree.runtime`.

The select alone, against the numpy reference `snapkv.reference.select` (indices identical,
gathered K/V bit for bit; inputs redrawn until f32 rounding cannot reorder the decisive pooled
scores, as in test_differential):

* every GQA policy x both orders x static and dynamic L on a small shape; a dynamic-L module at
  several prompt lengths (several key tiles plus a remainder, a whole tile, L == C, L < C),
  with avg/max pooling, kernels 1, 3 and 5 and f32/f16 spread over the matrix; static L == C
  and L < C; exact ties (the lower position wins); bf16; the `local-task` driver;
* the benchmark shape (B=1, Hq=32, Hkv=8, D=128, W=32, C=1024): plain `iree-compile` for every
  policy and order with a dynamic L, and a run at L = 2048 (position order) against the
  reference.
* our strategy on IREE's dispatches (`IreeSelect.compile`'s default, so every select test above
  runs with it): `snapkv-configure-lowering`'s choice, the `compilation_info` on the key-tile
  statistics' roots, kept by IREE's own configuration, and the same results without it.

The rewritten tiny Llama (`snapkv-compress-kv-cache` + `convert-snapkv-to-linalg`) gives the
same tokens, logits (within 1e-5), caches and cache lengths as the project's CPU pipeline
(`snapkv.runtime.CompiledModel` on the module before `convert-snapkv-to-linalg`):

* L = 48 > capacity 24: greedy 8 tokens from `default_rng(7).integers(0, 256, 48)` at logical
  positions 48..55, physical cache lengths 24..32;
* L = 16 < capacity: the selection is bypassed, physical length 16 + g;
* L = 4 < window: the lowering's runtime check fails with its message through IREE.

Skipped without `iree-base-compiler`/`iree-base-runtime` (pip) or without `snapkv-opt`.
"""

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import require_aot_tools
from test_differential import HOSTILE_PATTERNS, decisive_scores_separated, separated_hostile

from snapkv import iree_backend, mlirgen, runtime
from snapkv.tools import ToolError

REASON = iree_backend.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

REPO = Path(__file__).resolve().parents[2]
DYNAMIC = REPO / "test" / "Models" / "tiny_llama_dynamic.mlir"
WINDOW, CAPACITY = 8, 24
HQ = 4                       # query heads of the tiny model (gqa=expand caches Hq heads)
PROMPT = np.random.default_rng(7).integers(0, 256, 48)
STEPS = 8
ATOL = 1e-5                  # IREE llvm-cpu vs the CPU pipeline, both f32 (observed ~2e-6)


def _tools_or_skip():
    require_aot_tools()


# --- the select alone ------------------------------------------------------------------------

# Small shape: B=2, Hq=4, Hkv=2, D=16, W=4, C=12. The default key tile is 64 positions.
B, SMALL_HQ, SMALL_HKV, D, W, C = 2, 4, 2, 16, 4, 12
# Two tiles and a remainder; one whole tile; L == C (selection keeps everything); L < C.
LENGTHS = (150, 64, C, C - 1)
# Clauses and element types spread over the policy x order x static/dynamic matrix.
VARIANTS = {
    "expand": dict(),
    "mean": dict(pooling="max", kernel=3, dtype=np.float16),
    "max": dict(kernel=1),
}


def _inputs(length, seed, dtype=np.float32, heads=(SMALL_HQ, SMALL_HKV), dim=D, window=W,
            batch=B):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, heads[0], window, dim)).astype(dtype)
    k = rng.standard_normal((batch, heads[1], length, dim)).astype(dtype)
    v = rng.standard_normal((batch, heads[1], length, dim)).astype(dtype)
    return q, k, v


def _case(length, seed, dtype=np.float32, **clauses):
    """A small case whose decisive pooled scores are apart (IREE scores in f32, the reference
    in float64; see test_differential), redrawing the inputs until they are."""
    for attempt in range(50):
        q, k, v = _inputs(length, seed=1000 * seed + attempt, dtype=dtype)
        case = mlirgen.Case(q, k, v, W, C, **clauses)
        if decisive_scores_separated(case.reference(), case):
            return case
    raise AssertionError(f"no separated inputs for {clauses} at L={length}")


def _check(select, case, inputs=None):
    keys, values, indices, *offsets = select(*(inputs or (case.q, case.k, case.v)))
    ref = case.reference()
    if case.adaptive:
        np.testing.assert_array_equal(offsets[0], ref.offsets, err_msg=case.describe())
    assert indices.dtype == np.int64 and indices.shape == ref.indices.shape, case.describe()
    np.testing.assert_array_equal(indices, ref.indices, err_msg=case.describe())
    # Bit-identical copies of the input rows (compared as raw bits).
    assert keys.shape == ref.keys.shape and values.shape == ref.values.shape
    assert keys.tobytes() == ref.keys.tobytes(), case.describe()
    assert values.tobytes() == ref.values.tobytes(), case.describe()


@pytest.mark.parametrize("gqa,order,dynamic",
                         list(itertools.product(VARIANTS, ("position", "score"),
                                                (False, True))))
def test_select_matches_reference(gqa, order, dynamic):
    _tools_or_skip()
    variant = dict(VARIANTS[gqa])
    dtype = variant.pop("dtype", np.float32)
    # A dynamic L: one module for every length. A static L: the longest length.
    lengths = LENGTHS if dynamic else LENGTHS[:1]
    cases = [_case(length, seed, dtype, gqa=gqa, order=order, dynamic=dynamic, **variant)
             for seed, length in enumerate(lengths)]
    select = iree_backend.IreeSelect.compile(cases[0])
    for case in cases:
        _check(select, case)


def test_select_blocks_match_reference():
    """`block 4` (C - W = 8): the block sums are one more linalg op of the lowering, which
    iree-compile takes; at L = 150 the last block of the prefix is short."""
    _tools_or_skip()
    cases = [_case(length, seed, gqa="mean", kernel=3, block=4, dynamic=True)
             for seed, length in enumerate(LENGTHS)]
    select = iree_backend.IreeSelect.compile(cases[0])
    for case in cases:
        _check(select, case)


@pytest.mark.parametrize("dynamic", [False, True])
def test_select_adaptive_matches_reference(dynamic):
    """snapkv.select_adaptive through IREE: its decomposition (score, the floor raised
    elementwise, the flattened top positions, the packed gathers) is plain linalg that
    iree-compile takes, bit for bit the reference's at every length (the bypass too)."""
    _tools_or_skip()
    from test_differential import adaptive_separated

    cases = []
    for seed, length in enumerate(LENGTHS if dynamic else LENGTHS[:1]):
        for attempt in range(50):
            q, k, v = _inputs(length, seed=2000 * seed + attempt)
            case = mlirgen.Case(q, k, v, W, C, kernel=3, gqa="mean", adaptive=True, floor=2,
                                dynamic=dynamic)
            if adaptive_separated(case):
                break
        cases.append(case)
    select = iree_backend.IreeSelect.compile(cases[0])
    for case in cases:
        _check(select, case)


@pytest.mark.parametrize("length", [C, C - 1])
def test_select_static_bypass_and_equal_length(length):
    _tools_or_skip()
    case = _case(length, seed=2)
    _check(iree_backend.IreeSelect.compile(case), case)


def test_select_exact_ties_go_to_the_lower_position():
    _tools_or_skip()
    q, k, v = _inputs(40, seed=3)
    k[:] = k[:, :, :1]       # every key the same: equal logits, equal votes in the prefix
    case = mlirgen.Case(q, k, v, W, C, kernel=3, order="score", dynamic=True)
    select = iree_backend.IreeSelect.compile(case)
    _check(select, case)
    # The pooled scores tie everywhere but at the two ends (zero padding), so the kept
    # prefix is the lowest interior positions, in position order even in score order.
    _, _, indices = select(q, k, v)
    assert (indices[:, :, :C - W] == np.arange(1, C - W + 1)).all()


def test_select_bf16():
    _tools_or_skip()
    ml_dtypes = pytest.importorskip("ml_dtypes")   # installed with iree-base-runtime
    case = _case(150, seed=6, dtype=np.float32)
    as_bf16 = [x.astype(ml_dtypes.bfloat16) for x in (case.q, case.k, case.v)]
    # mlirgen and the reference take bf16 as 16-bit patterns; IREE takes ml_dtypes arrays.
    case = mlirgen.Case(*(x.view(np.uint16) for x in as_bf16), W, C, dtype="bf16",
                        dynamic=True)
    if not decisive_scores_separated(case.reference(), case):
        pytest.fail("bf16 rounding brought decisive scores together; pick another seed")
    select = iree_backend.IreeSelect.compile(case)
    keys, values, indices = select(*as_bf16)
    ref = case.reference()
    np.testing.assert_array_equal(indices, ref.indices)
    assert keys.view(np.uint16).tobytes() == ref.keys.tobytes()
    assert values.view(np.uint16).tobytes() == ref.values.tobytes()


def test_task_driver_with_two_workers():
    _tools_or_skip()
    case = _case(150, seed=7, dynamic=True)
    select = iree_backend.IreeSelect.compile(case)
    _check(iree_backend.IreeSelect(select.vmfb, driver=iree_backend.TASK_DRIVER, workers=2),
           case)


@pytest.mark.parametrize("gqa", ("expand", "mean", "max"))
def test_select_hostile_values(gqa):
    # NaN in keys or queries, +-inf logits, logits near 1e30, all-equal keys, NaN/inf/-0
    # payloads (test_differential.hostile_inputs; B=2, Hq=4, Hkv=2, D=4, W=4, C=12, L=150):
    # one dynamic-L module per policy, every pattern through it, against the reference.
    _tools_or_skip()
    cases = [separated_hostile(pattern, n, "f32", gqa, ("position", "score")[n % 2],
                               dynamic=True)
             for n, pattern in enumerate(HOSTILE_PATTERNS)]
    position = iree_backend.IreeSelect.compile(cases[0])
    score = iree_backend.IreeSelect.compile(cases[1])
    for n, case in enumerate(cases):
        _check((position, score)[n % 2], case)


def test_worker_count_is_checked():
    with pytest.raises(ValueError, match="workers applies to the local-task driver"):
        iree_backend.config(iree_backend.DEFAULT_DRIVER, workers=2)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        iree_backend.config(iree_backend.TASK_DRIVER, workers=0)


# --- our strategy on IREE's dispatches (docs/iree.md) ----------------------------------------

def test_strategy_is_configure_lowerings_choice():
    _tools_or_skip()
    choice = iree_backend.strategy(iree_backend.select_module(_case(150, 3, dynamic=True)))
    # snapkv-configure-lowering's choice for a dynamic prompt length (its own lit test,
    # strategy.mlir, pins the rules); the vector width is the host's.
    assert (choice.key_tile, choice.query_tile, choice.chunk) == (64, 32, 0)
    assert choice.vector_bits in (128, 256, 512)


def test_strategy_needs_a_root_op():
    _tools_or_skip()
    with pytest.raises(ToolError, match="chose 0 different configurations"):
        iree_backend.strategy("func.func @f() {\n  return\n}\n")


def test_dispatch_roots_carry_the_strategy_and_results_are_unchanged():
    import iree.compiler
    _tools_or_skip()
    case = _case(150, seed=11, dynamic=True)
    module = iree_backend.select_module(case)
    choice = iree_backend.strategy(module)
    flags = [*iree_backend.IREE_COMPILE_FLAGS, *iree_backend.SELECT_COMPILE_FLAGS]
    sources = iree.compiler.compile_str(iree_backend.lower_to_upstream(module, choice),
                                        extra_args=[*flags, "--compile-to=executable-sources"])
    configured, applied = iree_backend.attach_strategy(sources.decode(), choice)
    # The statistics of the key tiles (maximum, then sum of exponentials): one pair per
    # dispatch region IREE forms for them (with a dynamic L, two), nothing else.
    assert len(applied) >= 2 and len(applied) % 2 == 0, applied
    assert all("_reduction_" in entry["dispatch"] for entry in applied), applied
    lanes = choice.vector_bits // 32
    for entry in applied:
        sizes = entry["config"]
        assert sizes["distribution"][0] == 1 and not any(sizes["distribution"][1:])
        # One reduction loop, over the key tile, one key at a time; the query rows (W = 4
        # of them, contiguous in the logits) in one vector of min(lanes, W) lanes.
        assert sorted(sizes["vector_reduction"]) == [0] * (len(sizes["vector_reduction"]) - 1) + [1]
        assert max(sizes["vector_common_parallel"]) == min(lanes, W)
    # IREE keeps our choice through its own strategy selection.
    selected = iree.compiler.compile_str(
        configured, extra_args=[*flags, "--compile-from=executable-sources",
                                "--compile-to=executable-configurations"]).decode()
    from iree.compiler import ir
    wanted = {entry["dispatch"]: entry["config"] for entry in applied}
    with ir.Context():
        module = ir.Module.parse(selected)
        for op in iree_backend._ops(module):
            name = ir.StringAttr(op.attributes["sym_name"]).value \
                if op.name == "func.func" else None
            if name in wanted:
                root = [o for o in iree_backend._ops(op) if o.name == "linalg.generic"][-1]
                assert root.attributes["lowering_config"] == \
                    iree_backend.lowering_config(wanted.pop(name))
    assert not wanted, f"dispatches not found after configuration: {sorted(wanted)}"
    # Same indices, bit-identical rows, with and without the strategy.
    carried = iree_backend.IreeSelect.compile(case)
    own = iree_backend.IreeSelect.compile(case, carry_strategy=False)
    assert carried.strategy == choice and own.strategy is None
    _check(carried, case)
    for length in (150, 64):
        inputs = _inputs(length, seed=5)
        for got, want in zip(carried(*inputs), own(*inputs)):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


# The benchmark shape. Position order once failed here: the per-slot search of the kept
# positions (an all-parallel op, i32 inputs, i64 result) was read by the window append through
# tensor.extract, so IREE cloned all of it into every workgroup of the append's dispatch and
# exceeded its 32 KiB stack limit (docs/iree.md). The append now reads the positions through an
# indexing map; these keep that fixed.
BENCH = dict(heads=(32, 8), dim=128, window=32, batch=1)
BENCH_C = 1024


@pytest.mark.parametrize("gqa,order",
                         list(itertools.product(("expand", "mean", "max"), ("position", "score"))))
def test_benchmark_shape_compiles_with_plain_iree_compile(gqa, order):
    _tools_or_skip()
    q, k, v = _inputs(BENCH_C + 1, seed=0, **BENCH)
    case = mlirgen.Case(q, k, v, BENCH["window"], BENCH_C, gqa=gqa, order=order, dynamic=True)
    lowered = iree_backend.lower_to_upstream(iree_backend.select_module(case))
    assert iree_backend.compile_vmfb(lowered)


def test_benchmark_shape_matches_reference():
    # Position order: only the kept set matters, so only the gap between the last kept and
    # the first dropped pooled score of each head must exceed f32 rounding (random inputs of
    # this size always have some other pair of scores within 1e-4 of each other). Queries
    # scaled by 4 spread the votes.
    _tools_or_skip()
    keep = BENCH_C - BENCH["window"]
    for seed in range(20):
        q, k, v = _inputs(2048, seed=seed, **BENCH)
        case = mlirgen.Case(q * np.float32(4), k, v, BENCH["window"], BENCH_C)
        ranked = -np.sort(-case.reference().pooled[0], axis=-1)
        if ((ranked[:, keep - 1] - ranked[:, keep]) > 1e-4 * ranked[:, keep - 1]).all():
            break
    else:
        pytest.fail("no inputs with a clear top-k boundary at the benchmark shape")
    _check(iree_backend.IreeSelect.compile(case), case)


# --- the model -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stages():
    _tools_or_skip()
    return iree_backend.prepare(DYNAMIC.read_text(), window=WINDOW, capacity=CAPACITY,
                                gqa="expand")


@pytest.fixture(scope="module")
def iree_model(stages):
    return iree_backend.IreeModel.from_text(stages["lowered"])


@pytest.fixture(scope="module")
def cpu_model(stages):
    return runtime.CompiledModel(stages["rewritten"])


def _assert_same_generation(got, want, prompt_len, steps):
    assert got["tokens"] == want["tokens"]
    assert got["positions"] == want["positions"] == list(range(prompt_len, prompt_len + steps))
    expected_physical = [min(prompt_len, CAPACITY) + g for g in range(steps + 1)]
    assert got["physical_lengths"] == want["physical_lengths"] == expected_physical
    assert got["logits"].shape == want["logits"].shape
    assert np.abs(got["logits"] - want["logits"]).max() <= ATOL
    assert [c.shape for c in got["caches"]] == [c.shape for c in want["caches"]]
    for a, b in zip(got["caches"], want["caches"]):
        assert np.abs(a - b).max() <= ATOL


def test_lowered_model_is_upstream_only(stages):
    # (IREE's MLIR cannot parse snapkv ops, so count the rewritten module's text.)
    assert len(re.findall(r"= snapkv\.select ", stages["rewritten"])) == 2   # one per layer
    found = iree_backend.dialects(stages["lowered"])
    assert "snapkv" not in found
    assert found <= iree_backend.UPSTREAM_DIALECTS, found
    # No single-element tensor writes: IREE would run them on the host, one by one (and
    # mis-sizes those into tensors of rank >= 2; see docs/iree.md).
    assert iree_backend.count_ops(stages["lowered"], "tensor.insert") == 0


def test_generate_matches_cpu_pipeline(iree_model, cpu_model):
    got = iree_model.generate(PROMPT, STEPS)
    want = cpu_model.generate(PROMPT, STEPS)
    _assert_same_generation(got, want, len(PROMPT), STEPS)
    assert got["caches"][0].shape == (1, HQ, CAPACITY + STEPS, 16)


def test_short_prompt_bypasses_selection(iree_model, cpu_model):
    prompt = PROMPT[:16]
    got = iree_model.generate(prompt, 3)
    want = cpu_model.generate(prompt, 3)
    _assert_same_generation(got, want, len(prompt), 3)


def test_prompt_shorter_than_window_fails_with_the_lowering_message(iree_model):
    with pytest.raises(RuntimeError, match="the prompt is shorter than the observation window"):
        iree_model.prefill(PROMPT[:WINDOW // 2])


def test_out_of_range_ids_are_refused_before_the_call(iree_model):
    # IREE drops the embedding gather's in-dispatch cf.assert, so the check is in Python.
    with pytest.raises(ValueError, match="token ids must be in"):
        iree_model.prefill(np.array([1, 2, 256] + [3] * 10))


# --- a checkpoint's module: weights as arguments ------------------------------------------

def test_checkpoint_module_with_weights_matches_cpu_pipeline():
    """What `snapkv.hf` exports (one function per layer kind, weights as `snapkv.weight`
    arguments) runs through IREE with the checkpoint's weights bound once, and generates
    what the CPU runner generates; without weights it is refused before compiling."""
    _tools_or_skip()
    from test_hf_models import FAMILIES, checkpoint_dir

    from snapkv import hf
    from snapkv.frontend.checkpoint import Checkpoint

    checkpoint = Checkpoint(checkpoint_dir("llama", FAMILIES["llama"]))
    text = hf.export(checkpoint).text
    lowered = iree_backend.lower_to_upstream(text)
    # IREE gets the fused attention of both layer functions (prefill and decode), lowered
    # untiled: the prompt's as one loop over key tiles, no scf.forall (which iree-compile
    # 3.13 crashes on) and no [L, L] scores.
    fused = iree_backend.snapkv_opt(text, "--snapkv-fuse-attention", "--mlir-print-op-generic")
    assert iree_backend.count_ops(fused, "snapkv.attention") == 2
    assert iree_backend.count_ops(lowered, "scf.forall") == 0
    assert iree_backend.count_ops(lowered, "scf.for") == 1
    with pytest.raises(ValueError, match="takes .* weights .* but none were given"):
        iree_backend.IreeModel.from_text(lowered)
    model = iree_backend.IreeModel.from_text(lowered, weights=checkpoint)
    prompt = np.random.default_rng(3).integers(0, 256, 24)
    got = model.generate(prompt, 4)
    want = runtime.CompiledModel(text, weights=checkpoint).generate(prompt, 4)
    assert got["tokens"] == want["tokens"]
    assert np.abs(got["logits"] - want["logits"]).max() <= 1e-4
