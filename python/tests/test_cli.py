"""The `snapkv` command line (python/snapkv/cli.py).

* every command's --help explains every option;
* bad arguments, missing files, invalid IR, refusals and unrunnable inputs give one clear
  message and a non-zero exit, never a traceback;
* `snapkv ledger` prints the SPEC section 4 numbers for the bundled model;
* `snapkv compile` rewrites (and with --lower lowers) the bundled model;
* `snapkv generate` runs end to end: logical vs physical lengths, exact agreement when
  nothing is dropped, the ledger equal to the bytes the run held;
* `snapkv visualize` writes small PNGs whose scores match the numpy reference.

The commands run as `python -m snapkv.cli` in a subprocess, as a user runs them. Compiled
libraries are cached (~/.cache/snapkv/runner or $SNAPKV_RUNNER_CACHE): the generate tests use
window 8 / capacity 16 like test_runner.py, so they share its libraries; the visualize test
compiles one instrumented prefill (about 20 s the first time).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from snapkv import cli
from snapkv.frontend import runner
from snapkv.mlirgen import snapkv_opt_path

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "test" / "Models"
DYNAMIC = MODELS / "tiny_llama_dynamic.mlir"
STATIC = MODELS / "tiny_llama.mlir"
REFUSALS = REPO / "test" / "Transforms" / "compress-kv-cache-refusals.mlir"
COMMANDS = ("export", "compile", "generate", "ledger", "visualize")


def snapkv(*args, env=None, cwd=REPO, timeout=600):
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "python"), environment.get("PYTHONPATH", "")])
    environment.update(env or {})
    done = subprocess.run([sys.executable, "-m", "snapkv.cli", *map(str, args)],
                          capture_output=True, text=True, env=environment, cwd=cwd,
                          timeout=timeout)
    assert "Traceback" not in done.stderr, done.stderr
    assert "Traceback" not in done.stdout, done.stdout
    return done


def needs_opt():
    if not snapkv_opt_path().is_file():
        pytest.skip("snapkv-opt is not built")


def needs_runner():
    needs_opt()
    for tool in (runner.mlir_translate_path(), runner.clang_path()):
        if not tool.is_file() and __import__("shutil").which(str(tool)) is None:
            pytest.skip(f"{tool} not found")


# --- help -----------------------------------------------------------------------------------

def test_top_level_help_lists_every_command():
    done = snapkv("--help")
    assert done.returncode == 0
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\s", done.stdout, re.M), command


@pytest.mark.parametrize("command", COMMANDS)
def test_help_explains_every_option(command):
    done = snapkv(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: snapkv {command}")
    assert "example" in done.stdout
    subparsers = next(a for a in cli.build_parser()._actions
                      if isinstance(a, cli.argparse._SubParsersAction))
    for action in subparsers.choices[command]._actions:
        assert action.help, f"{command}: {action.option_strings or action.dest} has no help"
        for option in action.option_strings:
            assert option in done.stdout, option


def test_no_command_prints_usage():
    done = snapkv()
    assert done.returncode == 2
    assert "usage: snapkv" in done.stderr


# --- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("args, status, message", [
    (["generate", "--kernel-size", "4"], 2, "the kernel size must be odd, got 4"),
    (["generate", "--window", "0"], 2, "the window must be >= 1"),
    (["generate", "--pooling", "median"], 2, "invalid choice: 'median'"),
    (["generate", "--steps", "-1"], 2, "the number of steps must be >= 0"),
    (["generate", "--prompt", "1 2 x"], 2, "the prompt must be token ids"),
    (["generate", "--prompt", "1 2", "--prompt-len", "4"], 2, "not allowed with argument"),
    (["generate", "--window", "8", "--capacity", "8"], 1,
     "--capacity (8) must be greater than --window (8)"),
    (["ledger", "--prompt-length", "zero"], 2, "the prompt length must be an integer"),
    (["visualize"], 2, "the following arguments are required: --out"),
    (["visualize", "--out", "/tmp/x", "--layers", "a"], 2, "--layers takes layer numbers"),
    (["compile"], 2, "the following arguments are required: MODEL.mlir"),
    (["compile", "no/such/model.mlir", "-o", "/dev/null"], 1, "no/such/model.mlir: no such file"),
    (["generate", "test"], 1, "test: not a file"),
    (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
])
def test_bad_arguments(args, status, message):
    done = snapkv(*args)
    assert done.returncode == status, done.stderr
    assert message in done.stderr
    assert done.stdout == ""


def test_missing_snapkv_opt_is_explained():
    done = snapkv("ledger", env={"SNAPKV_OPT": "/nonexistent/snapkv-opt"})
    assert done.returncode == 1
    assert "snapkv-opt not found at /nonexistent/snapkv-opt: run `make build`" in done.stderr


@pytest.fixture()
def bad_ir(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @prefill(%a: tensor<1x?xi64> {\n}\n")
    return path


@pytest.mark.parametrize("command", ["compile", "generate", "ledger", "visualize"])
def test_invalid_ir_shows_snapkv_opt_diagnostics(command, bad_ir, tmp_path):
    needs_opt()
    extra = {"compile": ["-o", tmp_path / "out.mlir"], "visualize": ["--out", tmp_path / "v"]}
    done = snapkv(command, bad_ir, *extra.get(command, []))
    assert done.returncode == 1
    assert "bad.mlir:2:2: error: expected ')'" in done.stderr
    assert f"snapkv {command}: error:" in done.stderr
    assert not (tmp_path / "out.mlir").exists()
    assert not (tmp_path / "v").exists()


@pytest.fixture()
def refused(tmp_path):
    """The first near miss of the refusal tests (attention without a softmax)."""
    first = REFUSALS.read_text().split("// -----")[0]
    path = tmp_path / "refused.mlir"
    path.write_text("\n".join(l for l in first.splitlines() if "expected-" not in l) + "\n")
    return path


def test_compile_refusal_is_a_warning_or_with_strict_an_error(refused, tmp_path):
    needs_opt()
    out = tmp_path / "out.mlir"
    options = ["--window", "2", "--capacity", "6", "--kernel-size", "3"]
    done = snapkv("compile", refused, "-o", out, *options)
    assert done.returncode == 0, done.stderr
    assert "warning: snapkv-compress-kv-cache left the module unchanged: @prefill" in done.stderr
    assert "attention probabilities are not a softmax" in done.stderr
    assert "--strict makes that an error" in done.stderr
    assert "snapkv.select" not in out.read_text()
    out.unlink()
    done = snapkv("compile", refused, "-o", out, "--strict", *options)
    assert done.returncode == 1
    assert "error: snapkv-compress-kv-cache left the module unchanged" in done.stderr
    assert "refused.mlir and --strict was given; nothing was written" in done.stderr
    assert not out.exists()


def test_ledger_and_generate_refuse_what_the_rewrite_refuses(refused):
    needs_opt()
    for command in ("ledger", "generate"):
        done = snapkv(command, refused, "--window", "2", "--capacity", "6")
        assert done.returncode == 1
        assert "not a softmax" in done.stderr or "not a prefill/decode model" in done.stderr


def test_generate_checks_what_the_compiled_code_would_abort_on():
    needs_opt()
    done = snapkv("generate", "--prompt", "1 2 3 4 5 6 7 8 256")
    assert done.returncode == 1
    assert "token ids must be in [0, 256) for this model; got [256]" in done.stderr
    done = snapkv("generate", "--prompt-len", "5")
    assert done.returncode == 1
    assert "the prompt has 5 tokens, fewer than the window (8)" in done.stderr
    done = snapkv("generate", STATIC)
    assert done.returncode == 1
    assert "@prefill takes exactly 64 tokens (static shapes)" in done.stderr
    done = snapkv("generate", STATIC, "--prompt-len", "64")
    assert done.returncode == 1
    assert "@decode takes a cache of exactly 64 rows (static shapes)" in done.stderr


# --- ledger ---------------------------------------------------------------------------------

def _row(layer, gqa, hkv, hc, kept, full, compacted, dim=16):
    return re.compile(rf"^{layer}\s+{gqa}\s+1\s+{hkv}\s+{hc}\s+{dim}\s+4\s+{kept}\s+"
                      rf"{full:,}\s+{compacted:,}$", re.M)


@pytest.mark.parametrize("gqa", ["expand", "mean", "max"])
def test_ledger_numbers_of_the_bundled_model(gqa):
    """SPEC section 4: full 2*B*Hkv*(L+g)*D*e per layer, compacted 2*B*Hc*(min(L,C)+g)*D*e,
    with the model's dimensions as the exporter recorded them (f32: e = 4)."""
    needs_opt()
    spec = json.loads((MODELS / "tiny_llama.json").read_text())["spec"]
    hkv, dim, layers = spec["num_key_value_heads"], spec["head_dim"], spec["num_hidden_layers"]
    heads = spec["num_attention_heads"] if gqa == "expand" else hkv
    length, generated, capacity = 96, 16, 24
    done = snapkv("ledger", "--prompt-length", length, "--generated", generated,
                  "--capacity", capacity, "--gqa", gqa)
    assert done.returncode == 0, done.stderr
    full = 2 * 1 * hkv * (length + generated) * dim * 4
    compacted = 2 * 1 * heads * (min(length, capacity) + generated) * dim * 4
    for layer in range(layers):
        assert _row(layer, gqa, hkv, heads, capacity, full, compacted, dim).search(done.stdout), \
            done.stdout
    assert f"total: {layers} layers, full {layers * full:,} B, compacted " \
           f"{layers * compacted:,} B ({compacted / full:.4f} of full)" in done.stdout
    assert "note:" not in done.stdout


def test_ledger_explains_when_expand_does_not_save():
    needs_opt()
    done = snapkv("ledger", "--prompt-length", 48, "--generated", 16)
    assert done.returncode == 0, done.stderr
    assert "full 32,768 B, compacted 40,960 B (1.2500 of full)" in done.stdout
    assert "note: the compacted cache is not smaller here. With gqa expand" in done.stdout


def test_ledger_of_an_already_rewritten_module(tmp_path):
    needs_opt()
    out = tmp_path / "compact.mlir"
    done = snapkv("compile", DYNAMIC, "-o", out, "--capacity", 32, "--gqa", "mean", "--strict")
    assert done.returncode == 0, done.stderr
    assert "2 snapkv.select inserted" in done.stderr
    text = out.read_text()
    assert text.count("snapkv.select") == 2 and "capacity 32 gqa mean" in text
    done = snapkv("ledger", out, "--prompt-length", 100, "--generated", 0)
    assert done.returncode == 0, done.stderr
    assert "already holds snapkv.select" in done.stderr
    assert _row(0, "mean", 2, 2, 32, 2 * 2 * 100 * 16 * 4, 2 * 2 * 32 * 16 * 4).search(
        done.stdout), done.stdout


def test_compile_lower_gives_the_llvm_dialect(tmp_path):
    needs_opt()
    out = tmp_path / "lowered.mlir"
    done = snapkv("compile", DYNAMIC, "-o", out, "--lower", "--quiet")
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "llvm.func @prefill" in text and "llvm.func @decode" in text
    assert not re.search(r"= snapkv\.select|linalg\.(generic|batch_matmul)", text)
    assert done.stderr == ""


# --- generate -------------------------------------------------------------------------------

def _table(stdout):
    """{step: (full token, compacted token, same, logical, physical full, physical compacted)}"""
    rows = {}
    for m in re.finditer(r"^\s*(\d+)\s+(?:prefill|\d+)\s+(\d+)\s+(\d+)\s+(yes|NO)\s+(\d+)\s+"
                         r"(\d+) / (\d+)$", stdout, re.M):
        step, *rest = m.groups()
        rows[int(step)] = (int(rest[0]), int(rest[1]), rest[2], *map(int, rest[3:]))
    return rows


def test_generate_end_to_end_with_compaction():
    needs_runner()
    length, capacity, steps = 40, 16, 3
    done = snapkv("generate", "--prompt-len", length, "--capacity", capacity, "--steps", steps)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    rows = _table(out)
    assert sorted(rows) == list(range(steps + 1))
    for g, (full, compact, same, logical, phys_full, phys_compact) in rows.items():
        assert logical == length + g
        assert phys_full == length + g            # the full cache holds every token
        assert phys_compact == capacity + g       # the compacted one min(L, C) + g rows
        assert same == ("yes" if full == compact else "NO")
    assert rows[0][0] == rows[0][1]  # prefill's logits are not touched by the rewrite
    tokens = re.search(r"^full-cache tokens:\s+([\d ]+)$", out, re.M).group(1).split()
    assert [int(t) for t in tokens] == [rows[g][0] for g in range(steps + 1)]
    assert "greedy agreement:" in out and "teacher-forced" in out
    # The ledger (snapkv-opt --snapkv-report-cache) equals what the runs held.
    total = re.search(r"^total: 2 layers, full ([\d,]+) B, compacted ([\d,]+) B", out, re.M)
    held = re.search(r"^measured after the runs: full cache ([\d,]+) B .* compacted ([\d,]+) B",
                     out, re.M)
    assert total and held, out
    assert total.groups() == held.groups()
    assert int(total.group(1).replace(",", "")) == 2 * 2 * 2 * (length + steps) * 16 * 4
    assert int(total.group(2).replace(",", "")) == 2 * 2 * 4 * (capacity + steps) * 16 * 4
    assert re.search(r"^times: rewrite [\d.]+ s; compile compacted", out, re.M)
    assert "compiling the compacted-cache model" in done.stderr  # progress on stderr


def test_generate_keeps_everything_when_the_prompt_fits():
    """L < C: the compacted model keeps every position and decodes exactly the same."""
    needs_runner()
    done = snapkv("generate", "--prompt", "3 1 4 1 5 9 2 6 5 3 5 8", "--capacity", 16,
                  "--steps", 4, "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "prompt: 12 tokens (given): 3 1 4 1 5 9 2 6 5 3 5 8" in done.stdout
    assert "greedy agreement: 5 of 5 tokens (identical sequences)" in done.stdout
    assert "same next token at 4 of 4 decode steps, max |logit difference| 0" in done.stdout
    rows = _table(done.stdout)
    assert all(r[4] == r[5] == 12 + g for g, r in rows.items())
    assert "nothing is dropped" in done.stdout


# --- visualize ------------------------------------------------------------------------------

def test_visualize_writes_one_png_per_layer(tmp_path):
    needs_runner()
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots"
    done = snapkv("visualize", "--out", out, "--prompt-len", 40, "--capacity", 16)
    assert done.returncode == 0, done.stderr
    for layer in (0, 1):
        png = out / f"layer{layer}.png"
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert 5_000 < len(data) < 200_000
        line = re.search(rf"^layer {layer}: wrote .*$", done.stdout, re.M).group(0)
        assert "numpy reference on the compiled Q/K: same kept positions" in line
        diff = float(re.search(r"max \|votes diff\| (\S+),", line).group(1))
        assert diff < 1e-5
    heads = re.findall(r"^  head (\d): kept prefix positions \[([\d, ]*)\] \+ window 32\.\.39$",
                       done.stdout, re.M)
    assert len(heads) == 8  # 2 layers x 4 query heads (gqa expand)
    assert all(len(kept.split(",")) == 16 - 8 for _, kept in heads)


def test_instrumented_prefill_verifies(tmp_path):
    """The text-level edit `visualize` makes: a snapkv.score beside each snapkv.select and
    five more results; snapkv-opt must accept it."""
    needs_opt()
    source = """
func.func @prefill(%q: tensor<1x4x2x2xf32>, %k: tensor<1x2x?x2xf32>, %v: tensor<1x2x?x2xf32>)
    -> (tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>) attributes {foo} {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 4 kernel 3 pooling max
      gqa mean order score scale 0.5
      : (tensor<1x4x2x2xf32>, tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>)
      -> (tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>, tensor<1x2x?xi64>)
  return %ko, %vo : tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>
}
"""
    printed = cli.run_opt([], text=source)
    assert printed.returncode == 0, printed.stderr
    text, layers, base = cli.instrument_scores(printed.stdout)
    assert base == 2
    assert layers == [dict(window="2", capacity="4", kernel="3", pooling="max", gqa="mean",
                           order="score", scale="5.000000e-01")]
    assert "snapkv.score %arg0, %arg1 window 2 kernel 3 pooling max gqa mean scale " \
           "5.000000e-01 : (tensor<1x4x2x2xf32>, tensor<1x2x?x2xf32>) -> " \
           "(tensor<1x2x?xf32>, tensor<1x2x?xf32>)" in text
    checked = cli.run_opt([], text=text)
    assert checked.returncode == 0, checked.stderr
    sig = runner.signature(checked.stdout, "prefill")
    assert [str(t) for t in sig.results[2:]] == [
        "tensor<1x4x2x2xf32>", "tensor<1x2x?x2xf32>", "tensor<1x2x?xi64>",
        "tensor<1x2x?xf32>", "tensor<1x2x?xf32>"]


# --- export without torch, examples -----------------------------------------------------------

def test_export_without_torch_says_what_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "_missing_frontend_packages", lambda: ["torch", "torch-mlir"])
    assert cli.main(["export", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "snapkv export: error: `snapkv export` cannot run here: it needs torch, " \
           "torch-mlir: pip install torch transformers torch-mlir" in err
    assert list(tmp_path.iterdir()) == []


def test_missing_bundled_model_without_torch_is_explained(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "_missing_frontend_packages", lambda: ["torch"])
    monkeypatch.setattr(cli, "models_dir", lambda: tmp_path)
    assert cli.main(["ledger"]) == 1
    err = capsys.readouterr().err
    assert f"the bundled model {tmp_path / cli.FIXTURE} is missing" in err
    assert "exported from PyTorch by `snapkv export`" in err and "pip install torch" in err


def test_example_select_mlir_prints_the_worked_example():
    needs_runner()
    from snapkv.mlirgen import parse_memrefs, run_module

    text = (REPO / "examples" / "select.mlir").read_text()
    assert "build/bin/snapkv-opt examples/select.mlir --snapkv-cpu-pipeline" in text
    votes, pooled, indices, values = parse_memrefs(run_module(text))
    assert indices.tolist() == [[[2, 3, 4, 6, 7]]]
    assert values[0, 0, :, 0].tolist() == [2, 3, 4, 6, 7]
    assert [round(x, 6) for x in pooled[0, 0]] == \
        [0.065641, 0.301538, 0.535897, 0.522564, 0.312821, 0.052308]
    assert round(float(votes[0, 0, 3]), 5) == round(8 / 25 + 12 / 26, 5)


def test_example_python_api_and_cli_tour(tmp_path):
    needs_runner()
    pytest.importorskip("matplotlib")
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), PYTHON=sys.executable)
    done = subprocess.run([sys.executable, "examples/python_api.py"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "physical lengths: [16, 17, 18, 19, 20, 21, 22, 23, 24]" in done.stdout
    assert "logical lengths:  [64, 65, 66, 67, 68, 69, 70, 71, 72]" in done.stdout
    done = subprocess.run(["bash", "examples/generate.sh", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "total: 2 layers, full 36,864 B, compacted 24,576 B (0.6667 of full)" in done.stdout
    assert (tmp_path / "compact.mlir").is_file()
    assert sorted(p.name for p in tmp_path.glob("layer*.png")) == ["layer0.png", "layer1.png"]
