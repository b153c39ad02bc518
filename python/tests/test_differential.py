"""Differential tests: the compiled `snapkv.select` (snapkv-opt --snapkv-cpu-pipeline, compiled
ahead of time and called in process) against the numpy reference, on random configurations
covering every option.

The compiled code scores in f32 and the reference in float64, so random inputs are redrawn
until no two pooled scores that decide the result are within a relative 1e-4 of each other
(exact ties are allowed: they come from identical inputs and must go to the lower position).
Indices must be identical and gathered K/V rows bit-identical.

A failing case is reproducible alone: `random_case(n)` / `tie_case(n)` rebuild case n."""

import copy
import subprocess
from collections import Counter

import numpy as np
import pytest

from snapkv import reference
from snapkv.dtypes import bits, from_float32
from snapkv.mlirgen import GPU_EMULATION, Case, ToolError, build_module, run_batches, run_cases
from snapkv.tools import snapkv_opt

RANDOM_CASES = 300
TIE_CASES = 40
SEED = 20240617
BATCH = 25
TOLERANCE = 1e-4
# Share of cases whose prompt length is dynamic (the select sits behind tensor.cast).
DYNAMIC_SHARE = 0.4


def decisive_scores_separated(ref, case):
    """False if f32 rounding could reorder the pooled scores that decide the selection."""
    keep = case.capacity - case.window
    prefix = case.k.shape[2] - case.window
    if ref.pooled.shape[-1] == 0 or (keep >= prefix and case.order != "score"):
        return True  # bypassed, or everything kept in position order
    for scores in ref.pooled.reshape(-1, prefix):
        ranked = np.sort(scores)[::-1]
        # Position order depends on the kept/dropped boundary, score order on every kept rank.
        critical = ranked[keep - 1:keep + 1] if case.order != "score" else ranked[:keep + 1]
        for x in critical:
            with np.errstate(invalid="ignore"):  # inf - inf: the sinks of scoring recent
                gap = np.abs(scores - x)
            near = (gap > 0) & (gap < TOLERANCE * np.maximum(np.abs(scores), abs(x)) + 1e-30)
            if near.any():
                return False
    return True


def draw_config(rng):
    window = int(rng.integers(1, 6))
    capacity = window + int(rng.integers(1, 12))
    kind = rng.choice(["long", "long", "long", "equal", "short", "window"])
    length = {"long": capacity + int(rng.integers(1, 25)), "equal": capacity,
              "short": int(rng.integers(window, capacity)), "window": window}[kind]

    def pick(options):
        return options[int(rng.integers(len(options)))]

    scale = float(np.float32(rng.uniform(0.05, 1.5))) if rng.random() < 0.4 else None
    dynamic = bool(rng.random() < DYNAMIC_SHARE)
    batch, kv_heads, group = (int(x) for x in rng.integers(1, [3, 4, 4]))
    # The comparison scorings (one case in four): their own sinks and seeds.
    scoring = pick([None, None, None, None, None, "prefix_votes", "recent", "random"])
    sinks = pick([None, 0, 1, capacity - window]) if scoring == "recent" else None
    seed = pick([None, 0, 1, 12345]) if scoring == "random" else None
    return dict(batch=batch, kv_heads=kv_heads, group=group, dim=pick([2, 4, 8, 16]),
                window=window, capacity=capacity, length=length,
                kernel=pick([None, 1, 3, 5, 7]), pooling=pick([None, "avg", "max"]),
                gqa=pick([None, "expand", "mean", "max"]),
                order=pick([None, "position", "score"]), scale=scale,
                elem=pick(["f32", "f16", "bf16"]), dynamic=dynamic, scoring=scoring,
                sinks=sinks, seed=seed)


def draw_case(rng, config, zero_queries=False, duplicates=0):
    c = config
    # The accumulated scorings read `rows` queries (the last of the prompt), the others W.
    rows = c.get("rows", c["window"])
    q = rng.standard_normal((c["batch"], c["kv_heads"] * c["group"], rows, c["dim"]))
    q *= 0.0 if zero_queries else rng.uniform(0.5, 4.0)  # sharper or flatter attention
    kv_shape = (c["batch"], c["kv_heads"], c["length"], c["dim"])
    k, v = rng.standard_normal(kv_shape), rng.standard_normal(kv_shape)
    for _ in range(duplicates):  # identical key rows give exactly equal votes
        src, dst = rng.integers(c["length"], size=2)
        k[:, :, dst] = k[:, :, src]
    elem = c["elem"]
    return Case(from_float32(q, elem), from_float32(k, elem), from_float32(v, elem),
                c["window"], c["capacity"], kernel=c["kernel"], pooling=c["pooling"],
                gqa=c["gqa"], order=c["order"], scale=c["scale"],
                dtype="bf16" if elem == "bf16" else None, dynamic=c["dynamic"],
                scoring=c.get("scoring"), sinks=c.get("sinks"), seed=c.get("seed"),
                block=c.get("block"))


def separated_case(rng, make_config, **draw):
    """Redraw inputs (and, rarely, the configuration) until the decisive scores separate."""
    while True:
        config = make_config(rng)
        for _ in range(50):
            case = draw_case(rng, config, **draw)
            if decisive_scores_separated(case.reference(), case):
                return case


def random_case(n):
    return separated_case(np.random.default_rng([SEED, n]), draw_config)


def tie_config(rng):
    # Selection always happens here (L > C), so there is a boundary for the ties to decide.
    config = draw_config(rng)
    config["length"] = config["capacity"] + int(rng.integers(1, 12))
    # Ties of the votes: the comparison scorings have their own (tested above).
    config.update(scoring=None, sinks=None, seed=None)
    return config


def tie_case(n):
    rng = np.random.default_rng([SEED, 1, n])
    if n % 2 == 0:  # all-zero queries: every visible column gets the same weight
        return separated_case(rng, tie_config, zero_queries=True)

    def kernel_one_or_max(rng):  # keep duplicated rows' ties intact through pooling
        config = tie_config(rng)
        if config["pooling"] != "max":
            config["kernel"] = 1
        return config
    return separated_case(rng, kernel_one_or_max, duplicates=4)


def compare(cases, outputs):
    """Messages describing every case whose compiled output differs from the reference."""
    failures = []
    for n, (case, out) in enumerate(zip(cases, outputs)):
        if isinstance(out, ToolError):
            first_lines = "\n  ".join(str(out).splitlines()[:4])
            failures.append(f"case {n}: {case.describe()}\n  {first_lines}")
            continue
        ref = case.reference()
        checks = [("indices", out.indices, ref.indices),
                  ("keys", out.keys, bits(ref.keys, case.elem)),
                  ("values", out.values, bits(ref.values, case.elem))]
        if case.adaptive:
            checks.append(("offsets", out.offsets, ref.offsets))
        for name, got, want in checks:
            if got.shape != want.shape or not np.array_equal(got, want):
                failures.append(
                    f"case {n}: {case.describe()}\n  {name} differ"
                    f"\n  reference indices {ref.indices.tolist()}"
                    f"\n  compiled  indices {out.indices.tolist()}"
                    f"\n  reference pooled  {np.round(ref.pooled, 6).tolist()}")
                break
    return failures


def isolate_errors(cases, outputs, pre_passes=()):
    """Rerun, one by one, the cases whose batch failed, so the error names its case."""
    for n, out in enumerate(outputs):
        if isinstance(out, ToolError):
            try:
                outputs[n] = run_cases([cases[n]], pre_passes=pre_passes)[0]
            except ToolError as error:
                outputs[n] = error
    return outputs


def check(cases, pre_passes=()):
    if not snapkv_opt().is_file():
        pytest.skip(f"snapkv-opt not built ({snapkv_opt()}); set SNAPKV_OPT to use another")
    outputs = isolate_errors(
        cases, run_batches(cases, batch_size=BATCH, pre_passes=pre_passes), pre_passes)
    failures = compare(cases, outputs)
    if failures:
        pytest.fail(f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(failures[:10]),
                    pytrace=False)


@pytest.fixture(scope="module")
def random_cases():
    return [random_case(n) for n in range(RANDOM_CASES)]


def test_random_cases_cover_every_option(random_cases):
    seen = Counter()
    for case in random_cases:
        length, capacity = case.k.shape[2], case.capacity
        seen.update([("elem", case.elem), ("dynamic", case.dynamic),
                     ("kernel", case.kernel), ("pooling", case.pooling), ("gqa", case.gqa),
                     ("order", case.order), ("scale", case.scale is None),
                     ("scoring", case.scoring),
                     ("dim", case.q.shape[3]), ("batch", case.q.shape[0]),
                     ("kv_heads", case.k.shape[1]),
                     ("group", case.q.shape[1] // case.k.shape[1]),
                     ("length", "L<C" if length < capacity else
                      "L==C" if length == capacity else "L>C"),
                     ("window==L", case.window == length)])
    expected = {("elem", e) for e in ("f32", "f16", "bf16")} | \
        {("dynamic", d) for d in (True, False)} | \
        {("kernel", k) for k in (None, 1, 3, 5, 7)} | \
        {("pooling", p) for p in (None, "avg", "max")} | \
        {("gqa", g) for g in (None, "expand", "mean", "max")} | \
        {("order", o) for o in (None, "position", "score")} | \
        {("scoring", s) for s in (None, "prefix_votes", "recent", "random")} | \
        {("scale", s) for s in (True, False)} | {("dim", d) for d in (2, 4, 8, 16)} | \
        {("batch", b) for b in (1, 2)} | {("kv_heads", h) for h in (1, 2, 3)} | \
        {("group", g) for g in (1, 2, 3)} | \
        {("length", x) for x in ("L<C", "L==C", "L>C")} | {("window==L", True)}
    rare = {key: seen[key] for key in expected if seen[key] < 5}
    assert not rare, f"options drawn fewer than 5 times: {rare}"


def test_random_cases_match_reference(random_cases):
    check(random_cases)


def test_exact_ties_go_to_lower_position():
    cases = [tie_case(n) for n in range(TIE_CASES)]
    # The draw must really produce ties at the decisive boundary for most cases.
    tied = 0
    for case in cases:
        keep = case.capacity - case.window
        ranked = np.sort(case.reference().pooled, axis=-1)[..., ::-1]
        tied += bool((ranked[..., keep - 1] == ranked[..., keep]).any())
    assert tied >= TIE_CASES // 2, f"only {tied} cases tie at the top-k boundary"
    check(cases)


# Block-granular selection (`block B`, docs/semantics.md "Blocks"): blocks of B positions
# rank by their summed pooled scores. Random shapes with C - W a multiple of B, a short last
# block in most, exact ties between blocks (all-zero queries), and prompts whose short last
# block wins, so that the next block is cut.
BLOCK_CASES = 12
BLOCK_TIE_CASES = 4
BLOCK_CUT_CASES = 3


def block_config(rng):
    config = draw_config(rng)
    block = int(rng.integers(2, 6))
    window = config["window"]
    capacity = window + block * int(rng.integers(1, 4))
    kind = rng.choice(["long", "long", "long", "equal", "short"])
    length = {"long": capacity + int(rng.integers(1, 25)), "equal": capacity,
              "short": int(rng.integers(window, capacity))}[kind]
    config.update(block=block, capacity=capacity, length=length,
                  scoring=[None, "prefix_votes"][int(rng.integers(2))], sinks=None, seed=None)
    return config


def block_case(n):
    return separated_case(np.random.default_rng([SEED, 3, n]), block_config)


def block_tie_case(n):
    def long_block(rng):
        config = block_config(rng)
        config["length"] = config["capacity"] + config["block"] * int(rng.integers(2, 5))
        return config
    return separated_case(np.random.default_rng([SEED, 4, n]), long_block, zero_queries=True)


def block_cut_case(n):
    """A prompt whose last prefix positions (the short last block) draw nearly all votes:
    kept whole, it leaves slots that go to the lowest positions of the next block."""
    rng = np.random.default_rng([SEED, 5, n])
    while True:
        config = block_config(rng)
        block, keep = config["block"], config["capacity"] - config["window"]
        prefix = keep + block + int(rng.integers(1, block))  # P mod B != 0, P > C - W
        config.update(length=prefix + config["window"], kernel=1, pooling=None,
                      scoring=None, elem="f32")
        case = draw_case(rng, config)
        short = prefix % block
        case.k[:, :, prefix - short:prefix] = 0
        case.k[:, :, prefix - short:prefix, 0] = 8.0
        case.q[..., 0] = np.abs(case.q[..., 0]) + 1.0
        if decisive_scores_separated(case.reference(), case):
            return case


# Accumulated scorings (sum / norm_sum, docs/semantics.md "Comparison scorings"): the last Q
# prompt queries vote, W <= Q <= L; with a dynamic prompt length Q is dynamic too (as a
# prompt chunk's queries are in the rewrite). Some with blocks.
ACCUMULATED_CASES = 24


def accumulated_config(rng):
    config = draw_config(rng)
    window, capacity = config["window"], config["capacity"]
    length = config["length"]
    rows = int(rng.integers(window, length + 1))
    block = None
    if rng.random() < 0.25:
        block = [b for b in (2, 3) if (capacity - window) % b == 0] or [None]
        block = block[0]
    config.update(rows=rows, block=block, sinks=None, seed=None,
                  scoring=["sum", "norm_sum"][int(rng.integers(2))])
    return config


def accumulated_case(n):
    return separated_case(np.random.default_rng([SEED, 6, n]), accumulated_config)


@pytest.fixture(scope="module")
def accumulated_cases():
    return [accumulated_case(n) for n in range(ACCUMULATED_CASES)]


def test_accumulated_cases_cover_the_options(accumulated_cases):
    cases = accumulated_cases
    selected = [c for c in cases if c.k.shape[2] >= c.capacity]
    assert {c.scoring for c in selected} == {"sum", "norm_sum"}
    assert any(c.dynamic for c in selected) and any(not c.dynamic for c in selected)
    assert any(c.q.shape[2] == c.k.shape[2] for c in selected)  # every query votes
    assert any(c.window < c.q.shape[2] < c.k.shape[2] for c in selected)
    assert any(c.block for c in selected)
    # The ranking differs from the window's votes somewhere: more queries do change it.
    assert any(not np.array_equal(
        c.reference().indices,
        reference.select(c.q[:, :, -c.window:], c.k, c.v, c.window, c.capacity,
                         kernel=c.kernel or 5, pooling=c.pooling or "avg",
                         gqa=c.gqa or "expand", order=c.order or "position", scale=c.scale,
                         dtype=c.dtype, block=c.block or 1).indices) for c in selected)


def test_accumulated_scorings_match_reference(accumulated_cases):
    check(accumulated_cases)


# KeyDiff (docs/semantics.md "Comparison scorings"): ranked by the keys alone; exact ties from
# duplicated key rows (kernel 1 or max pooling keeps them), zero keys (score exactly 1).
KEYDIFF_CASES = 24


def keydiff_config(rng):
    config = draw_config(rng)
    config.update(scoring="keydiff", sinks=None, seed=None)
    return config


def keydiff_case(n):
    rng = np.random.default_rng([SEED, 7, n])
    if n % 3:
        return separated_case(rng, keydiff_config)

    def tied(rng):
        config = keydiff_config(rng)
        config["length"] = config["capacity"] + int(rng.integers(1, 12))
        if config["pooling"] != "max":
            config["kernel"] = 1
        return config
    while True:
        case = separated_case(rng, tied, duplicates=4)
        case.k[:, :, int(rng.integers(case.k.shape[2]))] = 0
        if decisive_scores_separated(case.reference(), case):
            return case


@pytest.fixture(scope="module")
def keydiff_cases():
    return [keydiff_case(n) for n in range(KEYDIFF_CASES)]


def test_keydiff_cases_cover_the_options(keydiff_cases):
    selected = [c for c in keydiff_cases if c.k.shape[2] > c.capacity]
    assert {c.elem for c in selected} == {"f32", "f16", "bf16"}
    assert {c.gqa or "expand" for c in selected} == {"expand", "mean", "max"}
    assert any(c.dynamic for c in selected) and any(not c.dynamic for c in selected)
    # Exact ties decide some selection (duplicated rows), and the ranking is not the votes'.
    assert any(len(np.unique(c.reference().pooled[0, 0])) < c.reference().pooled.shape[-1]
               for c in selected)
    assert any(not np.array_equal(
        c.reference().indices,
        reference.select(c.q, c.k, c.v, c.window, c.capacity, kernel=c.kernel or 5,
                         pooling=c.pooling or "avg", gqa=c.gqa or "expand",
                         order=c.order or "position", scale=c.scale, dtype=c.dtype).indices)
        for c in selected)


def test_keydiff_matches_reference(keydiff_cases):
    check(keydiff_cases)


def test_block_cases_are_what_they_claim():
    cases = [block_case(n) for n in range(BLOCK_CASES)]
    selected = [c for c in cases if c.k.shape[2] >= c.capacity]
    assert sum((c.k.shape[2] - c.window) % c.block != 0 for c in selected) >= 3
    assert {c.block for c in cases} == {2, 3, 4, 5}
    assert any(c.dynamic for c in cases) and any(c.k.shape[2] < c.capacity for c in cases)
    for case in [block_cut_case(n) for n in range(BLOCK_CUT_CASES)]:
        prefix = case.k.shape[2] - case.window
        kept = case.reference().indices[..., :case.capacity - case.window]
        # The short last block is kept and the block cut is not a whole block.
        assert (kept == prefix - 1).any(axis=-1).all()
        assert ((kept // case.block == prefix // case.block - 1).sum(axis=-1)
                < case.block).any()
    for case in [block_tie_case(n) for n in range(BLOCK_TIE_CASES)]:
        keep = case.capacity - case.window
        ranked = np.sort(case.reference().pooled, axis=-1)[..., ::-1]
        assert (ranked[..., keep - 1] == ranked[..., keep]).any()


@pytest.fixture(scope="module")
def block_cases():
    # One batch of cases (one compile) per test.
    return [block_case(n) for n in range(BLOCK_CASES)] + \
        [block_tie_case(n) for n in range(BLOCK_TIE_CASES)] + \
        [block_cut_case(n) for n in range(BLOCK_CUT_CASES)]


def test_blocks_match_reference(block_cases):
    check(block_cases)


def test_gpu_kernels_blocks_match_reference(block_cases):
    # The block sums are one more op of the pooling's GPU kernel: a few shapes, ties and
    # cut blocks (block.mlir runs the hand-checked example through the same kernels).
    ties = BLOCK_CASES + BLOCK_TIE_CASES
    check(block_cases[:6] + block_cases[BLOCK_CASES:BLOCK_CASES + 2] + block_cases[ties:ties + 2],
          GPU_EMULATION)


# Long prompts: every block and every thread of the GPU layout handles several positions
# (128 threads per block, key tiles of 64) and the last key tile is partial, for every
# element type and GQA policy; a few at L = 4096.
LONG_LENGTHS = (130, 401)
LONG_PER_COMBINATION = 2
VERY_LONG = 4096
ELEMS = ("f32", "f16", "bf16")
POLICIES = ("expand", "mean", "max")


def long_config(rng, elem, gqa, length):
    config = draw_config(rng)
    window = int(rng.integers(1, 9))
    config.update(elem=elem, gqa=gqa, window=window, length=length,
                  capacity=window + int(rng.integers(4, 40)))
    return config


def long_case(n):
    """Case n of the long prompts: (elem, gqa) cycle, L in [130, 400] except the last three
    (L = 4096, one per element type)."""
    combinations = [(e, g) for e in ELEMS for g in POLICIES]
    rng = np.random.default_rng([SEED, 2, n])
    regular = len(combinations) * LONG_PER_COMBINATION
    if n < regular:
        elem, gqa = combinations[n % len(combinations)]
        length = int(rng.integers(*LONG_LENGTHS))
    else:
        elem, gqa = ELEMS[n - regular], POLICIES[n - regular]
        length = VERY_LONG
    return separated_case(rng, lambda r: long_config(r, elem, gqa, length))


LONG_CASES = len(ELEMS) * len(POLICIES) * LONG_PER_COMBINATION + len(ELEMS)


@pytest.fixture(scope="module")
def long_cases():
    return [long_case(n) for n in range(LONG_CASES)]


def test_long_cases_cover_every_type_and_policy(long_cases):
    seen = Counter((case.elem, case.gqa) for case in long_cases)
    assert all(seen[(e, g)] >= LONG_PER_COMBINATION for e in ELEMS for g in POLICIES), seen
    lengths = [case.k.shape[2] for case in long_cases]
    assert sum(LONG_LENGTHS[0] <= n < LONG_LENGTHS[1] for n in lengths) >= 9 * 2
    assert sum(n == VERY_LONG for n in lengths) == len(ELEMS)
    # The last key tile of 64 is partial for nearly all the shorter ones.
    assert sum(n % 64 != 0 for n in lengths if n != VERY_LONG) >= 9 * 2 - 2
    assert any(case.dynamic for case in long_cases)


def test_long_prompts_match_reference(long_cases):
    check(long_cases)


# Other CPU forms of the select, lowered and tiled before the pipeline (whose own conversion
# then finds no snapkv op left). --snapkv-cpu-pipeline keeps each (batch, query head)'s
# logits between the softmax statistics and the votes (keep-logits); "recomputed-logits"
# does not (keep-logits=false). Both lower a select as its stage ops (score, top_positions,
# gather) tiled through TilingInterface, a comparison scoring whole with each step tiled over
# its rows.
CPU_FORMS = {  # textual pass-pipeline elements, run before the CPU pipeline
    "recomputed-logits": ("convert-snapkv-to-linalg{tiling=cpu keep-logits=false}",),
}
CPU_FORM_CASES = 100


@pytest.mark.parametrize("form", sorted(CPU_FORMS))
def test_cpu_form_matches_reference(random_cases, form):
    check(random_cases[:CPU_FORM_CASES], CPU_FORMS[form])


@pytest.mark.parametrize("form", sorted(CPU_FORMS))
def test_cpu_form_long_prompts(long_cases, form):
    check(long_cases, CPU_FORMS[form])


# The GPU kernels, run on the CPU: --snapkv-gpu-emulation is the tensor-level half of the
# GPU pipeline (the same blocks and the same per-thread tiles; the thread loops run one
# after the other, as the barriers order them), so wrong tiling, indexing, masks,
# statistics, pooling borders, tie handling or gathers in the kernels show up here
# without a GPU.
GPU_CASES = 100


def test_gpu_kernels_match_reference(random_cases):
    # Every scoring: the GPU kernels are the same formulation, laid out as blocks.
    check(random_cases[:GPU_CASES], GPU_EMULATION)


def test_gpu_kernels_break_ties_to_lower_position():
    check([tie_case(n) for n in range(TIE_CASES)], GPU_EMULATION)


def test_gpu_kernels_long_prompts(long_cases):
    check(long_cases, GPU_EMULATION)


# The GPU pipeline lowers a select whole by default (pooling, selection and gather in one
# block per row); with decompose-select=true it splits it into its stage ops first, like
# the CPU pipeline, each stage its own kernels.
GPU_STAGES = ("snapkv-gpu-emulation{decompose-select=true}",)
GPU_STAGES_CASES = 50


def test_gpu_stage_kernels_match_reference(random_cases):
    check(random_cases[:GPU_STAGES_CASES], GPU_STAGES)


def test_gpu_pipeline_lowers_the_stage_ops():
    # What reaches the GPU conversion: every select whole by default; with
    # decompose-select=true a vote-scored select as its stage ops, a comparison scoring whole.
    if not snapkv_opt().is_file():
        pytest.skip(f"snapkv-opt not built ({snapkv_opt()})")

    def before_conversion(passes, scoring):
        case = random_case(0)
        case.scoring, case.sinks, case.seed = scoring, None, None
        text = subprocess.run(
            [str(snapkv_opt()), f"--pass-pipeline=builtin.module({passes})",
             "--mlir-print-ir-before=convert-snapkv-to-linalg", "-o", "/dev/null", "-"],
            input=build_module([case]), capture_output=True, text=True, check=True).stderr
        return text.count("snapkv.top_positions"), text.count("snapkv.select ")

    stages = "snapkv-gpu-emulation{decompose-select=true}"
    assert before_conversion(stages, None) == (1, 0)
    assert before_conversion(stages, "recent") == (0, 1)
    assert before_conversion("snapkv-gpu-emulation", None) == (0, 1)


# Tensor cores: with f16 or bf16 inputs, W a multiple of 8 and D of 16, each key tile's
# logits are computed by warps as m16n8k16 contractions (snapkv-gpu-distribute{tensor-cores});
# the emulation runs those same vector contractions on the CPU. Partial last tiles, dynamic
# lengths, every policy, both scorings that compute logits; L up to 4096. Cases 4-7 and
# 12-15 are bf16 (every head dim; the L = 4096 case too).
MMA_CASES = 16


def mma_config(rng, n):
    config = draw_config(rng)
    window = (8, 16, 32)[n % 3]
    length = 4096 if n == MMA_CASES - 1 else int(rng.integers(window + 1, 400))
    config.update(elem=("f16", "bf16")[n // 4 % 2], window=window, dim=(16, 32, 64, 128)[n % 4],
                  length=length,
                  capacity=window + int(rng.integers(4, 60)))
    if config["scoring"] in ("recent", "random"):  # these never compute logits
        config.update(scoring=None, sinks=None, seed=None)
    return config


@pytest.fixture(scope="module")
def mma_cases():
    return [separated_case(np.random.default_rng([SEED, 4, n]), lambda r, n=n: mma_config(r, n))
            for n in range(MMA_CASES)]


def test_mma_cases_take_the_tensor_core_form(mma_cases):
    if not snapkv_opt().is_file():
        pytest.skip(f"snapkv-opt not built ({snapkv_opt()})")
    for case in mma_cases:
        emulated = subprocess.run(
            [str(snapkv_opt()), f"--pass-pipeline=builtin.module({','.join(GPU_EMULATION)})",
             "-"], input=build_module([case]),
            capture_output=True, text=True, check=True).stdout
        elem = case.elem
        assert f"vector<16x16x{elem}>" in emulated and "#gpu.warp<linear_dim_0>" in emulated, \
            case.describe()


def test_gpu_tensor_core_form_matches_reference(mma_cases):
    check(mma_cases, GPU_EMULATION)


def test_mma_cases_compile_to_mma_sync(mma_cases):
    # The GPU-only half (snapkv-gpu-mma-sync, NVVM): every case's PTX has the instruction
    # of its type, with operands loaded from shared memory by ldmatrix.
    if not snapkv_opt().is_file():
        pytest.skip(f"snapkv-opt not built ({snapkv_opt()})")
    pipeline = "--snapkv-gpu-pipeline=chip=sm_80 features=+ptx80 format=isa"
    for case in mma_cases:
        ptx = subprocess.run([str(snapkv_opt()), pipeline, "-"], input=build_module([case]),
                             capture_output=True, text=True, check=True).stdout
        elem = case.elem
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{elem}.{elem}.f32" in ptx, case.describe()
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx, case.describe()


# Hostile values (docs/hostile-values.md) through the CPU pipeline and the GPU kernels:
# NaN in a key or a query, +inf and -inf logits (one +inf column, two sharing the mass, a
# head whose logits are all -inf), finite logits near 1e30, all-equal keys, and NaN, +-inf
# and -0 payloads in the values (gathered bit-exactly). They sit in later key tiles (L = 150:
# two tiles of 64 and a partial one), so tile statistics combine infinite maxima. The
# reference scores in float64, so every hostile logit is one that float32 produces as well
# (explicit infinities, not overflowing products).
HOSTILE_LENGTH = 150
HOSTILE_PATTERNS = ("nan-key", "nan-query", "pos-inf", "pos-inf-shared", "neg-inf",
                    "all-neg-inf", "huge", "all-equal")


def hostile_inputs(pattern, seed, elem="f32", gqa="expand", order="position",
                   dynamic=False, length=HOSTILE_LENGTH):
    """Case with `pattern` injected into random B=2, Hq=4, Hkv=2, D=4, W=4, C=12 inputs."""
    rng = np.random.default_rng([SEED, 3, seed])
    q = rng.standard_normal((2, 4, 4, 4))
    k = rng.standard_normal((2, 2, length, 4))
    v = rng.standard_normal((2, 2, length, 4))
    q[..., 0] = np.abs(q[..., 0]) + 0.1  # d = 0 positive: an infinite key element keeps its sign
    inf = np.inf
    if pattern == "nan-key":
        k[0, 0, 100, 1] = np.nan             # batch 0, kv head 0: every row of its heads NaN
    elif pattern == "nan-query":
        q[1, 3, 2, 0] = np.nan               # one window row of one query head
    elif pattern == "pos-inf":
        k[0, 1, 130, :] = [inf, 0, 0, 0]     # +inf logit in the third (partial) key tile
    elif pattern == "pos-inf-shared":
        k[1, 0, [20, 90], :] = [inf, 0, 0, 0]  # two +inf columns share each row's mass
    elif pattern == "neg-inf":
        k[0, 0, [3, 70, 140], :] = [-inf, 0, 0, 0]
    elif pattern == "all-neg-inf":
        k[1, 1, :, 0] = -inf                 # every logit of the head -inf: uniform rows
    elif pattern == "huge":
        q, k = q * 1e15, k * 1e15            # logits near 1e30, finite in float32
    elif pattern == "all-equal":
        k[0] = k[0, :, :1]                   # batch 0: all keys equal, all votes tie
    else:
        raise ValueError(pattern)
    # Payloads the gather must copy bit for bit: at the window (always kept) and at the first
    # prefix position (kept when its head's scores are NaN or tie).
    v[:, :, -1, :] = [np.nan, inf, -0.0, -inf]
    v[:, :, 0, :] = [-0.0, np.nan, -inf, inf]
    return Case(from_float32(q, elem), from_float32(k, elem), from_float32(v, elem), 4, 12,
                gqa=gqa, order=order, kernel=3, dtype="bf16" if elem == "bf16" else None,
                dynamic=dynamic)


def hostile_case(n):
    """Case n of the hostile values: every pattern with each GQA policy, orders and element
    types alternating (float32 only for "huge": 1e15 is out of f16 range), inputs redrawn
    until the decisive finite scores separate."""
    pattern = HOSTILE_PATTERNS[n % len(HOSTILE_PATTERNS)]
    gqa = POLICIES[n // len(HOSTILE_PATTERNS) % len(POLICIES)]
    elem = "f32" if pattern == "huge" else ELEMS[n % len(ELEMS)]
    order = ("position", "score")[(n + n // len(HOSTILE_PATTERNS)) % 2]
    return separated_hostile(pattern, n, elem, gqa, order, dynamic=n % 3 == 0)


def separated_hostile(pattern, seed, elem, gqa, order, dynamic):
    for attempt in range(50):
        case = hostile_inputs(pattern, 100 * seed + attempt, elem, gqa, order, dynamic)
        with np.errstate(invalid="ignore"):
            if decisive_scores_separated(case.reference(), case):
                return case
    raise AssertionError(f"no separated inputs for hostile pattern {pattern} (seed {seed})")


HOSTILE_CASES = len(HOSTILE_PATTERNS) * len(POLICIES)


@pytest.fixture(scope="module")
def hostile_cases():
    return [hostile_case(n) for n in range(HOSTILE_CASES)]


def test_hostile_cases_are_hostile(hostile_cases):
    # The patterns must reach the scores: NaN heads, one-hot rows from +inf, exact ties.
    pooled = {HOSTILE_PATTERNS[n % len(HOSTILE_PATTERNS)]: c.reference().pooled
              for n, c in enumerate(hostile_cases) if c.gqa == "expand"}
    assert np.isnan(pooled["nan-key"][0, :2]).all() and not np.isnan(pooled["nan-key"][1]).any()
    assert np.isnan(pooled["nan-query"][1, 3]).all()
    assert not np.isnan(pooled["nan-query"][1, :3]).any()
    assert (np.diff(pooled["all-neg-inf"][1, 2:, 1:-1], axis=-1) == 0).all()
    assert (np.diff(pooled["all-equal"][0, :, 1:-1], axis=-1) == 0).all()
    for pattern in ("pos-inf", "pos-inf-shared", "neg-inf", "huge"):
        assert np.isfinite(pooled[pattern]).all(), pattern


def test_hostile_values_match_reference(hostile_cases):
    check(hostile_cases)


def test_gpu_kernels_hostile_values(hostile_cases):
    check(hostile_cases, GPU_EMULATION)


# snapkv.select_adaptive (Ada-KV's shared budget, packed rows): the same inputs and options
# (no order clause; votes or prefix_votes), plus a floor, against reference.select_adaptive.
# Ties across heads go to the lower head, and the boundaries that decide each head's floor
# and the shared budget must be separated in f32 like the uniform select's.
ADAPTIVE_CASES = 120


def adaptive_separated(case):
    ref = case.reference()
    keep = case.capacity - case.window
    if ref.pooled.shape[-1] <= keep:
        return True  # bypassed, or every position of every head kept
    floor = case.floor or 0
    for scores in ref.pooled:  # [Hc, P] of one batch element
        critical, taken = [], np.zeros(scores.shape, dtype=bool)
        for h, row in enumerate(scores):
            ranked = np.sort(row)[::-1]
            if floor:
                critical += list(ranked[floor - 1:floor + 1])
                taken[h, reference.rank(row)[:floor]] = True
        rest = np.sort(scores[~taken])[::-1]
        budget = scores.shape[0] * (keep - floor)
        critical += list(rest[max(budget - 1, 0):budget + 1])
        for x in critical:
            gap = np.abs(scores - x)
            if ((gap > 0) & (gap < TOLERANCE * np.maximum(np.abs(scores), abs(x)) + 1e-30)).any():
                return False
    return True


def adaptive_config(rng):
    config = draw_config(rng)
    config.update(order=None, sinks=None, seed=None,
                  scoring=[None, None, "prefix_votes"][int(rng.integers(3))])
    keep = config["capacity"] - config["window"]
    config["floor"] = [None, 0, 1, keep // 2, keep][int(rng.integers(5))]
    return config


def tied_adaptive_config(rng):
    """A prompt just past the capacity, scored by votes (all-zero queries tie them)."""
    config = adaptive_config(rng)
    config.update(length=config["capacity"] + int(rng.integers(1, 12)), scoring=None)
    return config


def long_adaptive_config(rng):
    """L in LONG_LENGTHS, a small window and capacity, a floor of none, 1 or half."""
    config = adaptive_config(rng)
    window = int(rng.integers(1, 9))
    config.update(window=window, length=int(rng.integers(*LONG_LENGTHS)),
                  capacity=window + int(rng.integers(4, 40)))
    keep = config["capacity"] - window
    config["floor"] = [None, 1, keep // 2][int(rng.integers(3))]
    return config


def adaptive_case(n, zero_queries=False, duplicates=0, make_config=adaptive_config):
    rng = np.random.default_rng([SEED, 3, n])
    while True:
        config = make_config(rng)
        for _ in range(50):
            case = draw_case(rng, config, zero_queries=zero_queries, duplicates=duplicates)
            case.adaptive, case.floor = True, config["floor"]
            if adaptive_separated(case):
                return case


@pytest.fixture(scope="module")
def adaptive_cases():
    return [adaptive_case(n) for n in range(ADAPTIVE_CASES)]


def test_adaptive_cases_cover_every_option(adaptive_cases):
    seen = Counter()
    for case in adaptive_cases:
        keep = case.capacity - case.window
        seen.update([("elem", case.elem), ("dynamic", case.dynamic), ("gqa", case.gqa),
                     ("scoring", case.scoring), ("batch", case.q.shape[0]),
                     ("floor", "none" if not case.floor else "K" if case.floor == keep
                      else "some"),
                     ("length", "L<C" if case.k.shape[2] < case.capacity else "L>=C")])
    expected = {("elem", e) for e in ELEMS} | {("dynamic", d) for d in (True, False)} | \
        {("gqa", g) for g in (None, "expand", "mean", "max")} | \
        {("scoring", s) for s in (None, "prefix_votes")} | {("batch", b) for b in (1, 2)} | \
        {("floor", f) for f in ("none", "some", "K")} | {("length", x) for x in ("L<C", "L>=C")}
    rare = {key: seen[key] for key in expected if seen[key] < 4}
    assert not rare, f"options drawn fewer than 4 times: {rare}"
    # The budget really moves between heads: some head keeps more than C - W.
    uneven = sum(bool((np.diff(case.reference().offsets, axis=-1) > case.capacity).any())
                 for case in adaptive_cases)
    assert uneven >= ADAPTIVE_CASES // 6, f"only {uneven} cases give a head more than C"


def test_adaptive_matches_reference(adaptive_cases):
    check(adaptive_cases)


def test_adaptive_ties_go_to_lower_head():
    # All-zero queries give every head the same votes: the shared budget goes to the lowest
    # heads first (after each head's floor), and within a head to the lowest positions.
    cases = [adaptive_case(1000 + n, zero_queries=True, make_config=tied_adaptive_config)
             for n in range(12)]
    # Equal scores in every head: any difference between heads comes from the tie rule.
    uneven = sum(len(set(np.diff(c.reference().offsets[0]))) > 1 for c in cases)
    assert uneven >= len(cases) // 2, f"only {uneven} cases split the budget unevenly"
    check(cases)


def test_adaptive_floor_of_whole_budget_is_uniform_select():
    # floor = C - W leaves nothing to share: every head keeps what snapkv.select keeps.
    cases = []
    for n in range(8):
        case = adaptive_case(2000 + n)
        case.floor, case.adaptive = case.capacity - case.window, False
        uniform = copy.copy(case)
        case.adaptive = True
        cases += [case, uniform]
    outputs = run_cases(cases)
    for packed, rows in zip(outputs[::2], outputs[1::2]):
        batch, heads, kept = rows.indices.shape
        assert np.array_equal(packed.indices, rows.indices.reshape(batch, heads * kept))
        assert np.array_equal(packed.keys, rows.keys.reshape(packed.keys.shape))
        assert np.array_equal(packed.offsets[0], np.arange(heads + 1) * kept)


def test_adaptive_long_prompts():
    check([adaptive_case(3000 + n, make_config=long_adaptive_config) for n in range(6)])


# The adaptive budget as GPU kernels (convert-snapkv-to-linalg{tiling=gpu}), run on the CPU:
# the scoring's blocks, one block per (batch, head) row for the floor's top_positions, one per
# batch row for the layer-wide ranking and for the linalg ops that count and place each head's
# rows, one per row for each gather.
ADAPTIVE_GPU_CASES = 48


def test_adaptive_gpu_kernels_match_reference(adaptive_cases):
    check(adaptive_cases[:ADAPTIVE_GPU_CASES], GPU_EMULATION)


def test_adaptive_gpu_kernels_long_prompts_and_ties():
    check([adaptive_case(3000 + n, make_config=long_adaptive_config) for n in range(4)] +
          [adaptive_case(1000 + n, zero_queries=True, make_config=tied_adaptive_config)
           for n in range(6)], GPU_EMULATION)


def test_adaptive_compiles_to_gpu_kernels(adaptive_cases):
    # The whole GPU pipeline (NVVM, PTX) takes every form: static and dynamic lengths, the
    # short-prompt bypass, with and without a floor. Host code that wrote a buffer the kernels
    # use would be a compile error (snapkv-gpu-device-buffers). Kernels: the bypass's 5 (or
    # the scoring, pooling, ranking, placement and gathers: 12 or more).
    if not snapkv_opt().is_file():
        pytest.skip(f"snapkv-opt not built ({snapkv_opt()})")
    pipeline = "--snapkv-gpu-pipeline=chip=sm_80 features=+ptx80 format=isa"
    seen = set()
    for case in adaptive_cases[:24]:
        ptx = subprocess.run([str(snapkv_opt()), pipeline, "-"], input=build_module([case]),
                             capture_output=True, text=True, check=True).stdout
        short = not case.dynamic and case.k.shape[2] < case.capacity
        assert ptx.count("gpu.launch_func") >= (5 if short else 12), case.describe()
        seen.add((case.dynamic, short, bool(case.floor)))
    assert len(seen) >= 5, seen


def test_adaptive_hostile_values():
    # The hostile patterns through snapkv.select_adaptive with a floor: heads whose pooled
    # scores are all NaN (the floor's last score NaN, its ties decided by position), one-hot
    # rows from +inf, all-equal keys (ties across heads and positions), huge logits, and the
    # NaN/inf/-0 payloads gathered bit for bit into the packed rows.
    cases = []
    for n in range(HOSTILE_CASES):
        pattern = HOSTILE_PATTERNS[n % len(HOSTILE_PATTERNS)]
        gqa = POLICIES[n // len(HOSTILE_PATTERNS) % len(POLICIES)]
        elem = "f32" if pattern == "huge" else ELEMS[n % len(ELEMS)]
        for attempt in range(50):
            case = hostile_inputs(pattern, 100 * n + attempt, elem, gqa, None, n % 3 == 0)
            case.adaptive, case.floor = True, 2
            with np.errstate(invalid="ignore"):
                if adaptive_separated(case):
                    break
        else:
            raise AssertionError(f"no separated inputs for {pattern}")
        cases.append(case)
    nan_heads = sum(bool(np.isnan(c.reference().pooled).all(axis=-1).any()) for c in cases)
    assert nan_heads >= 3, f"only {nan_heads} cases have a head of NaN scores"
    check(cases)
