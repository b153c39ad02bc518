"""snapkv.serving.Engine: many sequences on one compiled model, admitted by a cache budget.

* Every sequence's tokens are exactly its single-sequence run's (CompiledModel.generate, and
  `snapkv generate` for one of them), whatever runs beside it;
* the budget bounds the sequences running at once, a new prompt is prefilled while others
  decode, and a finished or cancelled sequence gives its rows back;
* text, chat messages, stop strings, seeded sampling, streaming and `snapkv batch`.

The retrieval model (2 layers) with W=16, C=64: compiled once (shared with test_threads.py
through the runner's cache); each decode step takes about a millisecond.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import require_aot_tools
from serving_inputs import (
    CAPACITY,
    MODEL,
    WINDOW,
    load_engine,
    said,
    words,
    write_tokenizer,
)

from snapkv.serving import Engine, QueueFull, RequestError, SamplingParams
from snapkv.tasks import retrieval

# K/V bytes of one cache row of every head: 2 layers x (K, V) x 2 kv heads (gqa mean) x 64 x f32.
ROW = 2 * 2 * 2 * 64 * 4


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def engine(tokenizer_dir):
    require_aot_tools()
    return load_engine(tokenizer=tokenizer_dir, cache_budget_mb=1)


def prompts(n, seed=7):
    """`n` retrieval prompts of 40 to 300 tokens (some shorter than C, all longer than W)."""
    lengths = np.linspace(40, 300, n).astype(int)
    return [retrieval.generate(int(L), seed, "multitoken", i).ids for i, L in enumerate(lengths)]


def test_each_sequence_gets_exactly_its_single_sequence_tokens(engine):
    engine.reset_stats()
    asks = prompts(8)
    limits = [3, 9, 5, 12, 7, 4, 10, 6]
    # ~88 KiB of cache per sequence at most: a 300 KiB budget runs three or four at once.
    engine.cache_budget = 300 * 1024
    try:
        params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in limits]
        done = engine.generate(asks, params)
    finally:
        engine.cache_budget = 2 ** 20
    model = engine.model
    for ids, m, got in zip(asks, limits, done):
        alone = model.generate(np.asarray(ids)[None], m - 1)
        assert got.tokens == alone["tokens"]
        assert got.finish_reason == "length"
        # Rows after the run: min(L, C) kept plus m - 1 appended, per head and layer.
        assert got.cache_bytes == ROW * (min(len(ids), CAPACITY) + m - 1)
        assert got.text == said(got.tokens)
    stats = engine.stats.to_json()
    assert 2 <= stats["peak_concurrent_sequences"] < 8  # the budget, not the batch, decides
    assert stats["peak_cache_bytes"] <= 300 * 1024
    assert stats["generated_tokens"] == sum(limits)
    # One compiled call advanced all the running sequences (@decode_batch).
    assert stats["decode_calls"] < stats["decode_tokens"] == sum(limits) - len(limits)
    assert engine.running == engine.waiting == engine.reserved == 0


def test_per_sequence_decode_gives_the_same_tokens(engine):
    """batched=False: one @decode call per sequence and step, on the same compiled model."""
    asks, params = prompts(5), SamplingParams(max_tokens=6, ignore_eos=True)
    batched = engine.generate(asks, params)
    alone = Engine(engine.served, batched=False)
    done = alone.generate(asks, params)
    assert [d.tokens for d in done] == [b.tokens for b in batched]
    assert [d.cache_bytes for d in done] == [b.cache_bytes for b in batched]
    stats = alone.stats.to_json()
    assert stats["decode_calls"] == stats["decode_tokens"] == 5 * 5


def test_a_new_prompt_is_prefilled_while_others_decode(engine):
    long = engine.submit(prompts(1)[0], SamplingParams(max_tokens=30, ignore_eos=True))
    engine.step()  # prefills `long`
    late = engine.submit(prompts(2)[1], SamplingParams(max_tokens=2, ignore_eos=True))
    engine.result(late)
    assert late.completion.finish_reason == "length"
    assert not long.done.is_set()  # still decoding when the later one finished
    assert len(long.tokens) > 1
    alone = engine.model.generate(np.asarray(prompts(1)[0])[None], 29)["tokens"]
    assert engine.result(long).tokens == alone
    assert engine.reserved == 0


def test_eos_ends_a_sequence_and_the_answer_is_the_needle(engine):
    sample = retrieval.generate(200, 3, "multitoken", 0)
    done = engine.generate([sample.ids], SamplingParams(max_tokens=8))[0]
    alone = engine.model.generate(np.asarray(sample.ids)[None], 7)["tokens"]
    assert done.finish_reason == "stop"
    assert alone[len(done.tokens)] == retrieval.END
    assert done.tokens == alone[:len(done.tokens)]
    assert done.tokens == sample.answer.tolist()


def test_budget_refusals_and_the_queue_bound(engine):
    with pytest.raises(RequestError, match="more than the whole cache budget"):
        engine.submit(prompts(1)[0], SamplingParams(max_tokens=4000))
    with pytest.raises(RequestError, match="max_position_embeddings"):
        engine.submit(list(range(16, 80)) * 70, SamplingParams(max_tokens=2))
    with pytest.raises(RequestError, match=r"token ids must be in \[0, 256\)"):
        engine.submit([5, 300] * 10)
    with pytest.raises(RequestError, match="max_tokens"):
        engine.submit([5] * 20, SamplingParams(max_tokens=0))
    saved, engine.max_queue = engine.max_queue, 1
    try:
        first = engine.submit(prompts(1)[0], SamplingParams(max_tokens=2))
        with pytest.raises(QueueFull):
            engine.submit(prompts(1)[0], SamplingParams(max_tokens=2))
    finally:
        engine.max_queue = saved
    engine.result(first)


def test_cancel_frees_the_rows(engine):
    seq = engine.submit(prompts(1)[0], SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    engine.step()
    assert engine.reserved > 0 and engine.held_bytes() > 0
    engine.cancel(seq)
    engine.step()
    assert seq.completion.finish_reason == "cancelled"
    assert engine.reserved == 0 and engine.held_bytes() == 0 and engine.running == 0


def test_prompts_shorter_than_the_window_run_on_the_full_cache(engine):
    ids = [1, 20, 30, 40, 50]
    done = engine.generate([ids], SamplingParams(max_tokens=4, ignore_eos=True))[0]
    full = engine.catalogue.get(None).model
    assert done.tokens == full.generate(np.array([ids]), 3)["tokens"]
    assert "full cache" in done.model


def test_text_chat_stop_and_streaming(engine, tokenizer_dir):
    ids = prompts(2)[1]
    greedy = engine.generate([words(ids)], SamplingParams(max_tokens=6, ignore_eos=True))[0]
    assert greedy.tokens == engine.generate([ids], SamplingParams(
        max_tokens=6, ignore_eos=True))[0].tokens
    # A stop string: the text ends before it, nothing after it is sent.
    stop = words(greedy.tokens[2:3])
    cut = engine.generate([words(ids)], SamplingParams(max_tokens=6, ignore_eos=True,
                                                       stop=(stop,)))[0]
    assert cut.finish_reason == "stop"
    assert cut.text == words(greedy.tokens[:2]) + " "
    streamed = list(engine.stream(words(ids), SamplingParams(max_tokens=6, ignore_eos=True,
                                                             stop=(stop,))))
    assert "".join(d.text for d in streamed) == cut.text
    assert streamed[-1].finish_reason == "stop"
    # Chat: the checkpoint's template around the turn (<4> content <2>).
    chat = engine.generate([[{"role": "user", "content": words(ids[1:])}]],
                           SamplingParams(max_tokens=3, ignore_eos=True))[0]
    templated = [4, *ids[1:], 2]
    assert chat.tokens == engine.model.generate(np.array([templated]), 2)["tokens"]
    assert chat.prompt_tokens == len(templated)


def test_seeded_sampling_does_not_depend_on_what_runs_beside_it(engine):
    ids = prompts(3)[2]
    params = SamplingParams(max_tokens=12, temperature=1.5, top_p=0.9, seed=11,
                            ignore_eos=True)
    alone = engine.generate([ids], params)[0].tokens
    crowd = engine.generate([prompts(3)[0], ids, prompts(3)[1]],
                            [SamplingParams(max_tokens=9, temperature=1.0, seed=1,
                                            ignore_eos=True), params,
                             SamplingParams(max_tokens=5, ignore_eos=True)])
    assert crowd[1].tokens == alone
    other = engine.generate([ids], SamplingParams(max_tokens=12, temperature=1.5, top_p=0.9,
                                                  seed=12, ignore_eos=True))[0].tokens
    greedy = engine.generate([ids], SamplingParams(max_tokens=12, ignore_eos=True))[0].tokens
    assert len({tuple(alone), tuple(other), tuple(greedy)}) > 1


def test_snapkv_generate_gives_the_same_tokens(engine):
    ids = prompts(4)[3]
    steps = 6
    out = subprocess.run(
        [sys.executable, "-m", "snapkv.cli", "generate", str(MODEL), "--prompt",
         " ".join(map(str, ids)), "--window", str(WINDOW), "--capacity", str(CAPACITY),
         "--steps", str(steps), "--json", "-q"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    expected = json.loads(out.stdout)["tokens"]
    done = engine.generate([ids], SamplingParams(max_tokens=steps + 1, ignore_eos=True))[0]
    assert done.tokens == expected["compacted"]


def test_snapkv_batch(tmp_path, engine):
    asks = prompts(3)
    lines = [dict(prompt=[int(t) for t in asks[0]], max_tokens=4, id="a"),
             dict(prompt=[int(t) for t in asks[1]], max_tokens=2, ignore_eos=True),
             dict(prompt=[int(t) for t in asks[2]])]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    out = tmp_path / "out.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "snapkv.cli", "batch", str(MODEL), "--prompts", str(source),
         "--window", str(WINDOW), "--capacity", str(CAPACITY), "--max-tokens", "3",
         "--cache-budget", "0.2", "--out", str(out), "--json", "-q"],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in results] == ["a", 2, 3]
    expected = engine.generate(asks, [SamplingParams(max_tokens=4), SamplingParams(
        max_tokens=2, ignore_eos=True), SamplingParams(max_tokens=3)])
    for got, want in zip(results, expected):
        assert got["tokens"] == want.tokens
        assert got["cache_bytes"] == want.cache_bytes > 0
        assert got["finish_reason"] == want.finish_reason
    assert summary["sequences"] == 3
    assert 1 <= summary["peak_concurrent_sequences"] <= 3
    assert summary["peak_cache_bytes"] <= 0.2 * 2 ** 20
    assert summary["peak_rss_bytes"] > 0 and summary["tokens_per_s"] > 0


@pytest.mark.parametrize("line, message", [
    ("{not json", "not JSON"),
    ('{"prompt": "x", "colour": 1}', "unknown field 'colour'"),
    ('{"max_tokens": 3}', 'give "prompt" or "messages"'),
    ('{"prompt": [1, 2], "max_tokens": 0}', "max_tokens must be an integer >= 1"),
    ('{"prompt": [1, 999]}', r"token ids must be in \[0, 256\)"),
])
def test_snapkv_batch_bad_lines(tmp_path, engine, line, message):
    source = tmp_path / "in.jsonl"
    source.write_text('{"prompt": [1, 20, 30]}\n' + line + "\n")
    run = subprocess.run(
        [sys.executable, "-m", "snapkv.cli", "batch", str(MODEL), "--prompts", str(source),
         "--window", str(WINDOW), "--capacity", str(CAPACITY), "-q"],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    assert f"{source}:2: " in run.stderr
    import re

    assert re.search(message, run.stderr), run.stderr


@pytest.mark.parametrize("command", ["batch", "serve"])
def test_help_explains_every_option(command):
    from snapkv import cli

    done = subprocess.run([sys.executable, "-m", "snapkv.cli", command, "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(f"usage: snapkv {command}")
    assert "example" in done.stdout
    subparsers = next(a for a in cli.build_parser()._actions
                      if isinstance(a, cli.argparse._SubParsersAction))
    for action in subparsers.choices[command]._actions:
        assert action.help, f"{command}: {action.option_strings or action.dest} has no help"
        for option in action.option_strings:
            assert option in done.stdout, option


def test_engine_load_takes_the_settings_as_keywords(engine, tokenizer_dir):
    import snapkv

    ids = prompts(2)[0]
    again = snapkv.Engine.load(MODEL, window=WINDOW, capacity=CAPACITY, cache_budget_mb=1,
                               tokenizer=tokenizer_dir)
    params = snapkv.SamplingParams(max_tokens=5, ignore_eos=True)
    assert again.generate([ids], params)[0].tokens == engine.generate([ids], params)[0].tokens
    assert again.served.capacity == CAPACITY and again.served.window == WINDOW
    with pytest.raises(ValueError, match="full_cache takes no SnapKV settings"):
        snapkv.Engine.load(MODEL, full_cache=True, capacity=64)


def test_bf16_engine_gives_each_sequence_its_single_run(engine):
    """--dtype bf16: the checkpoint exported in bf16 (its K/V rows half the bytes), decoded
    batched; each sequence's tokens are its single-sequence run's in bf16."""
    from snapkv.serving import LoadError

    half = load_engine(cache_budget_mb=1, dtype="bf16")
    asks, limits = prompts(5), [6, 3, 6, 5, 6]
    done = half.generate(asks, [SamplingParams(max_tokens=m, ignore_eos=True) for m in limits])
    model = half.model
    assert model.batch_sizes == (1, 2, 4, 8)
    for ids, m, got in zip(asks, limits, done):
        assert got.tokens == model.generate(np.asarray(ids)[None], m - 1)["tokens"]
        assert got.cache_bytes == ROW // 2 * (min(len(ids), CAPACITY) + m - 1)
    stats = half.stats.to_json()
    assert stats["decode_calls"] < stats["decode_tokens"]
    with pytest.raises(LoadError, match="computes in f32 .* not bf16; give the checkpoint"):
        from snapkv.serving import load_engine as load

        load(None, None, dtype="bf16")
