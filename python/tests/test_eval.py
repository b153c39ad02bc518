"""`snapkv eval` and `snapkv needle` (python/snapkv/evaluation/, cli/eval.py, cli/needle.py).

The model is a small random-weight Llama of the shipped model's family (4 query / 2 kv heads,
vocabulary 256), written once by `save_pretrained`: nothing here depends on a model that can
solve the task, only on what the pipeline must do whatever the weights:

* the composition the eval runs (one shared compiled prefill, each method's compiled select,
  the rewritten decode) gives, bit for bit, the caches and the tokens of that method's
  rewritten model compiled whole;
* the JSON has the documented fields and the numbers are consistent (capacities, n, bytes);
* a second run takes everything from the results cache (no prefill runs);
* bad options are one line on stderr and a non-zero exit;
* the needle demo answers one prompt with each method and compares them.

Marked `slow`: the first run exports the checkpoint (torch-mlir) and compiles the pieces
(minutes on a loaded machine); later runs take them from the caches.
"""

import dataclasses
import json
import shutil

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import hf, reference, runtime
from snapkv.cli import main
from snapkv.evaluation import DEFAULT_WINDOW
from snapkv.evaluation.methods import METHODS, PUBLISHED, method_named
from snapkv.evaluation.pipeline import Pipeline
from snapkv.evaluation.suite import answer_prompt
from snapkv.tasks import retrieval

LENGTH = 256
CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              max_position_embeddings=1024, initializer_range=0.3, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def model_dir():
    """A random-weight Llama checkpoint (seed 0), written once under the runner's cache."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch_mlir")
    require_aot_tools()
    folder = runtime.default_cache_dir().parent / "test-checkpoints" / "eval-llama"
    config = transformers.LlamaConfig(**CONFIG)
    wanted = {k: v for k, v in json.loads(config.to_json_string()).items()
              if k != "transformers_version"}
    try:
        have = json.loads((folder / "config.json").read_text())
        have.pop("transformers_version", None)
        same = have == wanted and (folder / "model.safetensors").is_file()
    except (OSError, ValueError):
        same = False
    if not same:
        shutil.rmtree(folder, ignore_errors=True)
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config)
        staged = folder.with_name(".eval-llama.tmp")
        shutil.rmtree(staged, ignore_errors=True)
        model.save_pretrained(staged)
        staged.replace(folder)
    return folder


@pytest.fixture(scope="module")
def pipeline(model_dir):
    return Pipeline(model_dir)


def run_cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------
# Options (no model needed for most)

@pytest.mark.parametrize("argv, message", [
    (["--methods", "snapkv-maxpol"], "did you mean 'snapkv-maxpool'?"),
    (["--methods", "stremaing"], "did you mean 'streaming'?"),
    (["--methods", "chunked-0"], "chunked-N for any chunk N >= 1"),
    (["--methods", "chunked-1k"], "chunked-N for any chunk N >= 1"),
    (["--methods", "block-x"], "block-N for any block N >= 1"),
    (["--budgets", "2"], "not a fraction of the prompt in (0, 1)"),
    (["--budgets", "1/x"], "fractions like 1/8"),
    (["--lengths", "abc"], "integers like 512,1024"),
    (["--samples", "0"], "--samples must be >= 1"),
    (["--variant", "mutli"], "did you mean 'multi'?"),
    (["--lenghts", "512"], "did you mean --lengths?"),
])
def test_bad_options_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_missing_model_is_one_line(tmp_path, capsys):
    code, out, err = run_cli(["eval", "--model", str(tmp_path / "none"), "--lengths", "512",
                              "-q"], capsys)
    assert code == 1 and out == ""
    assert err.startswith("snapkv eval: error: no model at") and len(err.splitlines()) == 1


def test_methods_all_and_budget_parsing():
    from snapkv.cli import eval as cli_eval

    assert [m.name for m in cli_eval.method_list("all")] == list(METHODS)
    assert [str(b) for b in cli_eval.budget_list("0.125,1/2,1/8")] == ["1/2", "1/8"]
    # Every method's options are real pass options (the key is what results are cached by).
    keys = {m.key(16, 0) for m in METHODS.values()}
    assert len(keys) == len(METHODS)
    # Chunked prefill with any chunk, beside the three that `all` runs.
    picked = cli_eval.method_list("full,chunked-4096,chunked-512,chunked-4096")
    assert [m.name for m in picked] == ["full", "chunked-4096", "chunked-512"]
    assert picked[1].chunk == 4096 and picked[2] is METHODS["chunked-512"]
    assert picked[1].compaction(16, 64, 0) == \
        dataclasses.replace(METHODS["chunked-512"].compaction(16, 64, 0), chunk=4096)
    assert "chunked-4096" not in METHODS
    assert [method_named(n) for n in ("chunked-", "chunked--1", "chunked-٣", "x")] == [None] * 4


def test_block_methods():
    from snapkv.cli import eval as cli_eval

    picked = cli_eval.method_list("block-32,block-16")
    assert picked[1] is METHODS["block-16"] and "block-32" not in METHODS
    assert picked[0].block == 32 and method_named("block-0") is None
    # The select gets `block`; whole blocks fill at most the budget: C = 130 with W = 16
    # keeps 16 + 3 * 32 = 112 positions (block 32), 16 + 7 * 16 = 128 (block 16).
    compaction = picked[0].compaction(16, 130, 0)
    assert compaction.block == 32 and compaction.capacity == 112
    assert " block=32" in compaction.pass_options()
    assert picked[1].compaction(16, 130, 0).capacity == 128
    # `all` at the default budgets: L = 512, 1/16 leaves C - W = 16, one block of 16.
    assert picked[1].capacity(16, 32) == 32
    assert picked[0].key(16, 0) != METHODS["snapkv-gqa-mean-k15"].key(16, 0)
    assert picked[0].key(16, 0).replace(" block=32", "") == \
        METHODS["snapkv-gqa-mean-k15"].key(16, 0)


def test_staged_methods():
    """chunked-N-mKc: two-level chunked prefill staged at K x C rows, by sum (default),
    norm_sum (-norm) or the window's votes (-votes)."""
    staged = method_named("chunked-512-m4c")
    assert staged.name == "chunked-512-m4c" and staged.chunk == 512
    compaction = staged.compaction(32, 500, 0)
    assert (compaction.staging, compaction.staging_scoring, compaction.capacity) == \
        (2000, "sum", 500)
    assert " chunk=512 staging=2000 staging-scoring=sum" in compaction.pass_options()
    assert method_named("chunked-64-m2c-norm").compaction(16, 64, 0).staging_scoring == "norm_sum"
    assert method_named("chunked-64-m2c-votes").compaction(16, 64, 0).staging == 128
    # -carry / -carry-norm: the staged rows' scores carried from chunk to chunk.
    carried = method_named("chunked-512-m2c-carry").compaction(32, 500, 0)
    assert carried.staging_scoring == "carried-sum"
    assert " staging=1000 staging-scoring=sum staging-carry=true" in carried.pass_options()
    assert " staging-scoring=norm_sum staging-carry=true" in \
        method_named("chunked-512-m2c-carry-norm").compaction(32, 500, 0).pass_options()
    assert method_named("chunked-512-m2c-carry-max") is None
    # -keydiff: the staged rows ranked by their keys' distinctness (KeyDiff).
    assert " staging=2000 staging-scoring=keydiff" in \
        method_named("chunked-1000-m4c-keydiff").compaction(32, 500, 0).pass_options()
    # Results are keyed by the factor and the scoring (capacity aside), apart from chunked-N's.
    keys = {method_named(n).key(32, 0) for n in ("chunked-512", "chunked-512-m4c",
                                               "chunked-512-m2c", "chunked-512-m4c-norm",
                                               "chunked-512-m4c-carry",
                                               "chunked-512-m4c-keydiff")}
    assert len(keys) == 6
    for bad in ("chunked-512-m0c", "chunked-512-mxc", "chunked-512-m4", "chunked-512-m4c-max",
                "chunked-0-m4c"):
        assert method_named(bad) is None, bad


def test_a_chunk_the_pass_refuses_names_the_reason(model_dir, capsys):
    """A chunk below the window (the pass's option error) reaches the user as the pass's own
    diagnostic, not only as the command that failed."""
    code, out, err = run_cli(["eval", "--model", str(model_dir), "--lengths", "512",
                              "--samples", "1", "--budgets", "1/4", "--methods", "chunked-8",
                              "-q"], capsys)
    assert code == 1 and out == ""
    assert "chunk must be at least the window" in err and len(err.splitlines()) == 1, err


# ---------------------------------------------------------------------------------------------
# The pipeline

@pytest.mark.slow
@pytest.mark.parametrize("name", ["snapkv", "snapkv-gqa-mean", "snapkv-order-score",
                                  "streaming", "snapkv-w64", "pyramid-gqa-mean-k15",
                                  "block-16"])
def test_composition_is_the_rewritten_model(pipeline, name):
    """Shared prefill + the method's select + the rewritten decode == the method's rewritten
    model compiled whole: the same caches (bit for bit) and the same greedy tokens. The
    shared prefill exposes the widest window's query rows (64 with snapkv-w64); a narrower
    window's select takes the last rows of those."""
    method, capacity, steps = METHODS[name], LENGTH // 3, 3
    sample = retrieval.generate(LENGTH, 5, "multitoken", 0)
    pipeline.need_rows([METHODS["snapkv-w64"]])
    assert pipeline.query_rows == 64
    logits, caches, queries = pipeline.prefill(sample.ids)
    assert all(q.shape[2] == 64 for q in queries)
    compacted, kept = pipeline.compact(method, capacity, 5, caches, queries)
    tokens = pipeline.answer(method, int(np.argmax(logits)), LENGTH, steps, compacted)

    whole = runtime.CompiledModel(
        hf.rewrite(pipeline.exported.text, method.compaction(DEFAULT_WINDOW, capacity, 5)),
        weights=pipeline.checkpoint)
    direct_logits, direct_caches = whole.prefill(sample.ids[None])
    assert np.array_equal(direct_logits[0, -1], logits)
    assert len(direct_caches) == len(compacted)
    for got, want in zip(compacted, direct_caches):
        assert got.shape == want.shape and np.array_equal(got, want)
    assert tokens == whole.generate(sample.ids[None], steps)["tokens"]
    heads = 4 if method.options.get("gqa", "expand") == "expand" else 2
    compaction = method.compaction(DEFAULT_WINDOW, capacity, 5)
    # block-16 keeps 16 + 4 x 16 = 80 of the budget's 85 (whole blocks only).
    capacities = reference.layer_capacities(compaction.budget, compaction.window,
                                            compaction.capacity, len(kept),
                                            compaction.pyramid_beta)
    assert [k.shape for k in kept] == [(1, heads, min(c, LENGTH)) for c in capacities]
    window = np.arange(LENGTH - DEFAULT_WINDOW, LENGTH)
    assert all(np.isin(window, row).all() for k in kept for row in k[0])
    if method.block > 1:  # P = 240 is whole blocks: each is kept entirely or not at all
        for row in (row for k in kept for row in k[0]):
            counts = np.bincount(row[row < LENGTH - DEFAULT_WINDOW] // method.block)
            assert set(counts.tolist()) <= {0, method.block}, row


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ada-snapkv", "ada-snapkv-gqa-mean-k15"])
def test_adaptive_composition(pipeline, name):
    """An adaptive method: the rewrite's selects as snapkv.select_adaptive (floor 20 % of
    C - W), compiled, equal reference.select_adaptive on the same arrays (indices exactly,
    rows bit for bit); the layer holds Hc x C rows like the uniform method, split unevenly;
    the ragged caches are decoded by the model compiled with budget=adaptive, which gives
    the tokens of the PyTorch reference decoding them head by head."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from snapkv.frontend import reference_decode

    method, capacity, steps = METHODS[name], LENGTH // 4, 3
    uniform = METHODS[name.replace("ada-", "")]
    sample = retrieval.generate(LENGTH, 7, "multitoken", 0)
    logits, caches, queries = pipeline.prefill(sample.ids)
    packed, kept = pipeline.compact(method, capacity, 5, caches, queries)
    rows, _ = pipeline.compact(uniform, capacity, 5, caches, queries)
    assert len(packed) == 3 * len(kept) and len(rows) == 2 * len(kept)
    assert pipeline.cache_bytes(method, packed) == pipeline.cache_bytes(uniform, rows) == \
        sum(c.nbytes for c in rows)
    options = {**PUBLISHED, **method.options}
    floor = method.floor(DEFAULT_WINDOW, capacity)
    assert floor == int(0.2 * (capacity - DEFAULT_WINDOW))
    uneven = 0
    for layer, heads in enumerate(kept):
        q = queries[layer][:, :, -DEFAULT_WINDOW:]
        want = reference.select_adaptive(q, caches[2 * layer], caches[2 * layer + 1],
                                         DEFAULT_WINDOW, capacity, floor,
                                         kernel=options["kernel"], gqa=options["gqa"])
        got = np.concatenate(heads[0])
        assert np.array_equal(got, want.indices[0])
        assert np.array_equal(packed[3 * layer + 2], want.offsets)
        assert np.array_equal(packed[3 * layer], want.keys)
        assert np.array_equal(packed[3 * layer + 1], want.values)
        uneven += len({len(h) for h in heads[0]}) > 1
    assert uneven > 0
    tokens = pipeline.answer(method, int(np.argmax(logits)), LENGTH, steps, packed)
    assert pipeline.decoder(method).ragged
    # The same ragged caches decoded directly by the reference give the same tokens.
    model = AutoModelForCausalLM.from_pretrained(pipeline.model_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    keys = [reference_decode.ragged_heads(packed[i], packed[i + 2])
            for i in range(0, len(packed), 3)]
    values = [reference_decode.ragged_heads(packed[i + 1], packed[i + 2])
              for i in range(0, len(packed), 3)]
    direct = [int(np.argmax(logits))]
    for g in range(steps):
        row = reference_decode.decode_step(model, direct[-1], LENGTH + g, keys, values,
                                           options["gqa"] == "expand")
        direct.append(int(row.argmax()))
    assert tokens == direct and len(tokens) == steps + 1
    assert pipeline.decode_ms(method, direct[-1], LENGTH, packed) > 0
    # And the composition is the model rewritten with budget=adaptive, compiled whole.
    compaction = method.compaction(DEFAULT_WINDOW, capacity, 5)
    assert (compaction.budget, compaction.floor) == ("adaptive", floor)
    whole = runtime.CompiledModel(hf.rewrite(pipeline.exported.text, compaction),
                                  weights=pipeline.checkpoint)
    direct_logits, direct_caches = whole.prefill(sample.ids[None])
    assert np.array_equal(direct_logits[0, -1], logits)
    assert all(np.array_equal(a, b) for a, b in zip(direct_caches, packed, strict=True))
    assert whole.generate(sample.ids[None], steps)["tokens"] == tokens


@pytest.mark.slow
def test_full_is_the_original_model(pipeline):
    sample = retrieval.generate(LENGTH, 6, "multitoken", 0)
    logits, caches, _ = pipeline.prefill(sample.ids)
    original = runtime.CompiledModel(pipeline.exported.text, weights=pipeline.checkpoint)
    want_logits, want_caches = original.prefill(sample.ids[None])
    assert np.array_equal(want_logits[0, -1], logits)
    assert all(np.array_equal(a, b) for a, b in zip(caches, want_caches))


@pytest.mark.slow
def test_small_eval_json_plots_and_cache(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SNAPKV_EVAL_CACHE", str(tmp_path / "cache"))
    target, plots = tmp_path / "eval.json", tmp_path / "plots"
    argv = ["eval", "--model", str(model_dir), "--lengths", str(LENGTH), "--samples", "2",
            "--methods", "full,snapkv,streaming", "--budgets", "1/4,1/8", "--json",
            str(target), "--plots", str(plots)]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    document = json.loads(target.read_text())
    rows = document["results"]
    assert {(r["method"], r["capacity"]) for r in rows} == {
        ("full", LENGTH), ("snapkv", 64), ("snapkv", 32), ("streaming", 64),
        ("streaming", 32)}
    for r in rows:
        assert {"method", "length", "budget", "capacity", "accuracy", "n"} <= set(r)
        assert r["length"] == LENGTH and r["n"] == 2
        assert 0 <= r["accuracy"] <= 1 and r["correct"] == round(r["accuracy"] * 2)
        assert r["decode_ms"] > 0
    full = next(r for r in rows if r["method"] == "full")
    assert full["budget"] == 1.0 and full["answer_kept"] == 1.0
    # The compacted caches hold C of L rows, with Hq = 2 Hkv heads (gqa expand).
    for r in rows:
        if r["method"] != "full":
            assert r["kept_bytes"] * LENGTH == full["kept_bytes"] * 2 * r["capacity"]
    # Streaming keeps the 4 sinks and the last C - 4 positions in every head: the answer is
    # kept everywhere or nowhere, as the needle's position says.
    for r in rows:
        if r["method"] == "streaming":
            recent = np.arange(LENGTH - (r["capacity"] - 4), LENGTH)
            want = np.mean([np.isin(retrieval.generate(LENGTH, 0, "multitoken", i)
                                    .value_positions, recent).all() for i in range(2)])
            assert r["answer_kept"] == want
    assert "snapkv eval:" in out and "accuracy" in out and "streaming" in out
    assert (plots / "accuracy.png").stat().st_size > 5000
    assert (plots / "kept-positions.png").stat().st_size > 5000
    assert "eval [" in err  # the progress bar

    # Again: everything from the results cache, no prefill runs.
    def no_prefill(*args, **kwargs):
        raise AssertionError("prefill ran although the results were cached")

    monkeypatch.setattr(Pipeline, "prefill", no_prefill)
    argv2 = [a for a in argv if a not in ("--plots", str(plots))]
    code, out, err = run_cli(argv2 + ["-q"], capsys)
    assert code == 0, err
    assert json.loads(target.read_text())["results"] == rows


@pytest.mark.slow
def test_needle_demo(model_dir, capsys):
    code, out, err = run_cli(["needle", "--model", str(model_dir), "--length", str(LENGTH),
                              "--json", "-q"], capsys)
    assert code == 0, err
    document = json.loads(out)
    assert document["capacity"] == LENGTH // 8 and len(document["answer"]) == 3
    results = {r["method"]: r for r in document["results"]}
    assert list(results) == ["full", "snapkv", "streaming"]
    assert results["full"]["capacity"] == LENGTH
    for r in results.values():
        assert len(r["tokens"]) == 3 and r["correct"] == (r["tokens"] == document["answer"])
    assert results["snapkv"]["kept_bytes"] * 4 == results["full"]["kept_bytes"]
    assert len(document["verdict"]) == 3
    code, out, err = run_cli(["needle", "--model", str(model_dir), "--length", str(LENGTH),
                              "-q"], capsys)
    assert code == 0 and "expected answer:" in out and "asked needle at" in out


def test_needle_bad_budget_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["needle", "--budget", "3/2"])
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_methods_are_defined_against_the_published_method():
    """A method's options override the published SnapKV (kernel 5, gqa expand), not the
    rewrite's defaults (kernel 15, gqa mean): `snapkv` must stay the published method."""
    options = {name: METHODS[name].compaction(32, 64, 0) for name in
               ("snapkv", "snapkv-gqa-mean", "snapkv-k15", "snapkv-gqa-mean-k15", "streaming")}
    assert (options["snapkv"].kernel, options["snapkv"].gqa) == (5, "expand")
    assert (options["snapkv-gqa-mean"].kernel, options["snapkv-gqa-mean"].gqa) == (5, "mean")
    assert (options["snapkv-k15"].kernel, options["snapkv-k15"].gqa) == (15, "expand")
    assert (options["snapkv-gqa-mean-k15"].kernel,
            options["snapkv-gqa-mean-k15"].gqa) == (15, "mean")
    assert options["streaming"].gqa == "expand"  # baselines hold SnapKV's bytes
    assert (hf.Compaction().kernel, hf.Compaction().gqa) == (15, "mean")


@pytest.mark.slow
def test_chunked_method_answers_with_its_own_model(pipeline):
    """A chunked method (chunked prefill, docs/semantics.md) does not use the shared prefill:
    it answers with its own compiled model, whose prefill is measured on every prompt; the
    tokens are that model's own greedy tokens."""
    method = method_named("chunked-64")
    capacity, sample = LENGTH // 4, retrieval.generate(LENGTH, 5, "multitoken", 0)
    (out,) = answer_prompt(pipeline, sample, [(method, capacity)], seed=5)
    model = pipeline.own_model(method, capacity, 5)
    want = model.generate(sample.ids[None], len(out["tokens"]) - 1)
    assert out["tokens"] == want["tokens"]
    assert model.last_prefill["chunks"] == [(0, 64), (64, 128), (128, 192), (192, 256)]
    held = out["prefill"]
    assert held["chunks"] == 4 and held["cache"] > 0 and held["heap"] > 0
    assert held["total"] >= max(held["cache"], held["heap"]) and held["seconds"] > 0
    assert out["answer_kept"] is None  # kept rows are not prompt positions
    _, caches = model.prefill(sample.ids[None])
    assert out["kept_bytes"] == sum(c.nbytes for c in caches)  # C rows of every layer
    # One-shot cells are measured only when asked.
    (plain,) = answer_prompt(pipeline, sample, [(METHODS["snapkv"], capacity)], seed=5)
    assert plain["prefill"] is None
