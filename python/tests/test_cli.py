"""The `snapkv` command line (python/snapkv/cli/, one module per subcommand).

* every command's --help explains every option;
* bad arguments, missing files, invalid IR, refusals and unrunnable inputs give one clear
  message and a non-zero exit, never a traceback;
* `snapkv ledger` prints the docs/semantics.md ledger numbers for the bundled model;
* `snapkv compile` rewrites (and with --lower lowers) the bundled model;
* `snapkv generate` runs end to end: logical vs physical lengths, exact agreement when
  nothing is dropped, the ledger equal to the bytes the run held;
* `snapkv visualize` writes small PNGs whose scores match the numpy reference.

The commands run as `python -m snapkv.cli` in a subprocess, as a user runs them. Compiled
libraries are cached (~/.cache/snapkv/runner or $SNAPKV_RUNNER_CACHE): the generate tests use
window 8 / capacity 16 like test_runtime_model.py, so they share its libraries; the visualize test
compiles one instrumented prefill (about 20 s the first time).
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snapkv import cli, hf, interface, runtime
from snapkv.cli import locate
from snapkv.cli.compaction import describe_options, pass_options
from snapkv.cli.locate import FIXTURE, models_dir
from snapkv.cli.opt import run_opt
from snapkv.tools import snapkv_opt

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
    if not snapkv_opt().is_file():
        pytest.skip("snapkv-opt is not built")


def needs_runner():
    needs_opt()
    from conftest import require_aot_tools

    require_aot_tools()


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
    (["generate", "--window", "8", "--capacity", "30", "--block", "4"], 1,
     "--block (4) must divide --capacity - --window (22 = 30 - 8)"),
    (["generate", "--block", "2", "--budget", "pyramid"], 1, "--block needs --budget uniform"),
    (["generate", "--block", "0"], 2, "--block must be >= 1"),
    (["ledger", "--prompt-length", "zero"], 2, "the prompt length must be an integer"),
    (["visualize"], 2, "the following arguments are required: --out"),
    (["visualize", "--out", "/tmp/x", "--layers", "a"], 2, "--layers takes layer numbers"),
    (["compile"], 2, "the following arguments are required: MODEL"),
    (["compile", "no/such/model.mlir", "-o", "/dev/null"], 1, "no/such/model.mlir: no such file"),
    # A directory is read as a checkpoint (`snapkv generate my-model/`).
    (["generate", "test"], 1, "test: no config.json (not a HuggingFace checkpoint"),
    (["visualize", "--out", "/tmp/x", "test"], 1, "test: a directory; this command takes a "
                                                  "MODEL.mlir file"),
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
    assert ("/nonexistent/snapkv-opt not found (run `make build` in the repository or set "
            "SNAPKV_OPT)") in done.stderr


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
    path.write_text("\n".join(line for line in first.splitlines() if "expected-" not in line)
                    + "\n")
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
    done = snapkv("generate", "--prompt-len", "5", "--window", "8", "--capacity", "24")
    assert done.returncode == 1
    assert "the prompt has 5 tokens, fewer than the window (8)" in done.stderr
    done = snapkv("generate", STATIC)
    assert done.returncode == 1
    assert "@prefill takes exactly 64 tokens (static shapes)" in done.stderr
    done = snapkv("generate", STATIC, "--prompt-len", "64")
    assert done.returncode == 1
    assert "@decode takes a cache of exactly 64 rows (static shapes)" in done.stderr


@pytest.mark.parametrize("args, message", [
    (["generat"], "snapkv: error: argument COMMAND: invalid choice: 'generat'; did you mean "
                  "'generate'?"),
    (["generate", "--promt-length", "40"], "snapkv generate: error: unrecognized arguments: "
                                           "--promt-length (--promt-length: did you mean "
                                           "--prompt-length?)"),
    (["ledger", "--windw", "4"], "did you mean --window?"),
    (["generate", "--gqa", "maen"], "invalid choice: 'maen'; did you mean 'mean'?"),
    (["generate", "--seed", "-1"], "snapkv generate: error: argument --seed: the seed must be "
                                   ">= 0, got -1"),
    (["ledger", "--prompt-length", "9223372036854775808"],
     "the prompt length must be <= 9223372036854775807, got 9223372036854775808"),
])
def test_usage_errors_are_one_line_with_suggestions(args, message):
    done = snapkv(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert "internal error" not in done.stderr and done.stdout == ""


def test_old_option_spellings_still_work():
    needs_opt()
    done = snapkv("ledger", "--prompt-len", 48, "--kernel-size", 3, "--window", 8,
                  "--capacity", 24, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["prompt_length"] == 48 and out["compaction"]["kernel"] == 3


def test_pyramid_budget_reaches_the_rewrite():
    """--budget pyramid: each layer keeps its own capacity (the bundled model's 2 layers: K =
    16, beta 20 -> 1 + 8 and 31 + 8), what `snapkv.reference.layer_capacities` says, and the
    ledger counts each layer's; uniform is the default. A bad beta is a one-line error."""
    needs_opt()
    from snapkv.reference import layer_capacities

    common_args = ("ledger", "--prompt-length", 64, "--window", 8, "--capacity", 24, "--json")
    pyramid = json.loads(snapkv(*common_args, "--budget", "pyramid").stdout)
    assert pyramid["compaction"]["budget"] == "pyramid"
    kept = [layer["kept"] for layer in pyramid["layers"]]
    assert kept == layer_capacities("pyramid", 8, 24, 2) == [39, 9]
    uniform = json.loads(snapkv(*common_args).stdout)
    assert [layer["kept"] for layer in uniform["layers"]] == [24, 24]
    assert pyramid["total"]["compacted"] == uniform["total"]["compacted"]  # 48 rows either way
    done = snapkv(*common_args, "--budget", "pyramid", "--pyramid-beta", 0)
    assert done.returncode == 2 and "--pyramid-beta" in done.stderr


def test_cli_defaults_are_the_pass_defaults():
    args = cli.build_parser().parse_args(["generate"])
    chosen = dict(window=args.window, capacity=args.capacity, kernel=args.kernel,
                  pooling=args.pooling, gqa=args.gqa, order=args.order)
    # docs/eval.md, "The defaults": kernel 15 and gqa mean, not the published 5 and expand.
    assert chosen == dict(window=32, capacity=1024, kernel=15, pooling="avg", gqa="mean",
                          order="position")
    # The pass's budget defaults (Passes.td): uniform, and beta 20 for pyramid.
    assert (args.budget, args.pyramid_beta) == ("uniform", 20)
    assert (hf.Compaction().budget, hf.Compaction().pyramid_beta) == ("uniform", 20)
    assert hf.Compaction().pass_options() == pass_options(args, False, "")
    if snapkv_opt().is_file():
        # What the pass does when given no option: every select it writes carries the CLI's.
        fixture = models_dir() / FIXTURE
        rewritten = subprocess.run([str(snapkv_opt()), str(fixture),
                                    "--snapkv-compress-kv-cache"], capture_output=True,
                                   text=True, check=True).stdout
        selects = [s for f in interface.describe(rewritten).functions.values()
                   for s in f.selects]
        assert selects and all({k: s[k] for k in chosen} == chosen for s in selects), selects
    help_text = subprocess.run([str(snapkv_opt()), "--help"], capture_output=True,
                               text=True).stdout if snapkv_opt().is_file() else ""
    if help_text:
        section = help_text.split("--snapkv-compress-kv-cache")[1][:8000]
        assert re.search(r"--window=<long>\s+- Observation window", section)


def test_block_reaches_the_rewrite():
    """--block B: the pass option, and so `block B` on every select the rewrite writes."""
    args = cli.build_parser().parse_args(["generate", "--window", "8", "--capacity", "24",
                                          "--block", "4"])
    options = pass_options(args, False, "")
    assert " block=4" in options and "whole blocks of 4" in describe_options(args)
    assert " block=" not in pass_options(cli.build_parser().parse_args(["generate"]),
                                         False, "")
    needs_opt()
    fixture = models_dir() / FIXTURE
    rewritten = subprocess.run([str(snapkv_opt()), str(fixture),
                                f"--snapkv-compress-kv-cache={options}"], capture_output=True,
                               text=True, check=True).stdout
    selects = [s for f in interface.describe(rewritten).functions.values() for s in f.selects]
    assert selects and all(s["block"] == 4 for s in selects), selects


@pytest.mark.parametrize("command, length, extra, message", [
    ("generate", 100000, [], "the prompt (100,000 tokens) and 16 generated tokens reach "
                             "position 100,015, past the model's max_position_embeddings "
                             "(4,096, from "),
    ("generate", 1000000000, [], "reach position 1,000,000,015, past the model's "
                                 "max_position_embeddings"),
    ("visualize", 100000, [], "the prompt (100,000 tokens) reaches position 99,999, past the "
                              "model's max_position_embeddings (4,096"),
    ("generate", 1000000, ["--max-positions", "2000000"],
     "@prefill on a 1,000,000-token prompt needs at least 16,000.0 GB for one "
     "tensor<4x?x?xf32> alone (each ? is 1,000,000);"),
])
def test_long_prompts_are_refused_before_anything_is_allocated(command, length, extra,
                                                               message, tmp_path):
    """Once a SIGSEGV (the compiled prefill's malloc of L*L floats returned NULL), or 8 GB of
    random ids and then the same: now one line, within seconds."""
    needs_opt()
    out = ["--out", tmp_path / "plots"] if command == "visualize" else []
    start = time.perf_counter()
    done = snapkv(command, "--prompt-length", length, *extra, *out)
    assert done.returncode == 1, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert time.perf_counter() - start < 60
    assert not (tmp_path / "plots").exists()


def test_a_failed_check_of_the_compiled_model_is_one_line(monkeypatch, capsys):
    """With the CLI's own pre-check out of the way, the compiled prefill's run-time check
    (prompt shorter than the window) reaches the CLI as an exception: one line, exit 1."""
    needs_runner()
    from snapkv.cli import generate

    monkeypatch.setattr(generate, "check_runnable", lambda *a, **k: None)
    status = cli.main(["generate", "--prompt", "1 2 3 4", "--window", "8", "--capacity", "16",
                       "--steps", "1", "--quiet"])
    err = capsys.readouterr().err
    assert status == 1
    assert err == ("snapkv generate: error: the compiled model stopped: @prefill stopped on a "
                   "failed run-time check: snapkv: the prompt is shorter than the observation "
                   "window\n")


# --- ledger ---------------------------------------------------------------------------------

def _row(layer, gqa, hkv, hc, kept, full, compacted, peak, dim=16):
    """A ledger row; the decode peak (the last column) is the compacted cache's bytes without
    decode-time compression."""
    return re.compile(rf"^{layer}\s+{gqa}\s+1\s+{hkv}\s+{hc}\s+{dim}\s+4\s+{kept}\s+"
                      rf"{full:,}\s+{compacted:,}\s+{peak:,}\s+{compacted:,}$", re.M)


@pytest.mark.parametrize("gqa", ["expand", "mean", "max"])
def test_ledger_numbers_of_the_bundled_model(gqa):
    """docs/semantics.md: full 2*B*Hkv*(L+g)*D*e per layer, compacted 2*B*Hc*(min(L,C)+g)*D*e,
    with the model's dimensions as the exporter recorded them (f32: e = 4)."""
    needs_opt()
    spec = json.loads((MODELS / "tiny_llama.json").read_text())["spec"]
    hkv, dim, layers = spec["num_key_value_heads"], spec["head_dim"], spec["num_hidden_layers"]
    heads = spec["num_attention_heads"] if gqa == "expand" else hkv
    length, generated, capacity = 96, 16, 24
    done = snapkv("ledger", "--prompt-length", length, "--generated", generated,
                  "--window", 8, "--capacity", capacity, "--gqa", gqa)
    assert done.returncode == 0, done.stderr
    full = 2 * 1 * hkv * (length + generated) * dim * 4
    compacted = 2 * 1 * heads * (min(length, capacity) + generated) * dim * 4
    peak = 2 * 1 * hkv * length * dim * 4  # one-shot: the layer's whole prompt before its select
    for layer in range(layers):
        assert _row(layer, gqa, hkv, heads, capacity, full, compacted, peak,
                    dim).search(done.stdout), done.stdout
    assert f"total: {layers} layers, full {layers * full:,} B, compacted " \
           f"{layers * compacted:,} B ({compacted / full:.4f} of full); prefill peak " \
           f"{layers * peak:,} B (every layer at its peak at once); decode peak " \
           f"{layers * compacted:,} B" in done.stdout
    assert "note:" not in done.stdout


def test_ledger_explains_when_expand_does_not_save():
    needs_opt()
    done = snapkv("ledger", "--prompt-length", 48, "--generated", 16, "--window", 8,
                  "--capacity", 24, "--gqa", "expand")
    assert done.returncode == 0, done.stderr
    assert "full 32,768 B, compacted 40,960 B (1.2500 of full)" in done.stdout
    assert "note: the compacted cache is not smaller here. With gqa expand" in done.stdout


def test_ledger_of_an_already_rewritten_module(tmp_path):
    needs_opt()
    out = tmp_path / "compact.mlir"
    done = snapkv("compile", DYNAMIC, "-o", out, "--window", 8, "--capacity", 32, "--gqa", "mean",
                  "--strict")
    assert done.returncode == 0, done.stderr
    assert "2 snapkv.select inserted" in done.stderr
    text = out.read_text()
    # The CLI's default kernel (15) reaches the op; 5 would be omitted as the op's default.
    assert text.count("snapkv.select") == 2 and "capacity 32 kernel 15 gqa mean" in text
    done = snapkv("ledger", out, "--prompt-length", 100, "--generated", 0)
    assert done.returncode == 0, done.stderr
    assert "already holds snapkv.select" in done.stderr
    assert _row(0, "mean", 2, 2, 32, 2 * 2 * 100 * 16 * 4, 2 * 2 * 32 * 16 * 4,
                2 * 2 * 100 * 16 * 4).search(
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
    done = snapkv("generate", "--prompt-length", length, "--window", 8, "--capacity", capacity,
                  "--steps", steps, "--gqa", "expand")
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
    done = snapkv("generate", "--prompt", "3 1 4 1 5 9 2 6 5 3 5 8", "--window", 8,
                  "--capacity", 16, "--steps", 4, "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "prompt: 12 tokens (given): 3 1 4 1 5 9 2 6 5 3 5 8" in done.stdout
    assert "greedy agreement: 5 of 5 tokens (identical sequences)" in done.stdout
    assert "same next token at 4 of 4 decode steps, max |logit difference| 0" in done.stdout
    rows = _table(done.stdout)
    assert all(r[4] == r[5] == 12 + g for g, r in rows.items())
    assert "nothing is dropped" in done.stdout


def test_generate_with_pyramid_budget_decodes_ragged_layers():
    """`generate --budget pyramid`: the layers keep different lengths (K = 16: 8 + 31 and
    8 + 1 of 40 prompt positions), decode writes each layer's own rows in place, and the
    physical rows of layer 0 grow by one per step."""
    needs_runner()
    done = snapkv("generate", "--prompt-length", 40, "--window", 8, "--capacity", 24,
                  "--budget", "pyramid", "--steps", 3, "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["kept_per_head"] == [39, 9]
    assert [layer["kept"] for layer in out["ledger"]["layers"]] == [39, 9]
    assert [s["physical_rows"]["compacted"] for s in out["steps"]] == [39, 40, 41, 42]
    assert len(out["tokens"]["compacted"]) == 4


def test_generate_with_adaptive_budget_decodes_a_ragged_cache():
    """`generate --budget adaptive --floor 2`: Ada-KV's heads share each layer's budget (the
    ledger's bytes are the uniform cache's, and the runner measured exactly them), decode
    appends each head's row in place (rows per head grow by one per step). --floor without
    --budget adaptive, or above C - W, is a one-line error."""
    needs_runner()
    args = ("generate", "--prompt-length", 40, "--window", 8, "--capacity", 16, "--steps", 3,
            "--json", "--quiet")
    done = snapkv(*args, "--budget", "adaptive", "--floor", 2)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["compaction"]["budget"] == "adaptive" and out["compaction"]["floor"] == 2
    assert [s["physical_rows"]["compacted"] for s in out["steps"]] == [16, 17, 18, 19]
    # What the runner allocated (room for the 3 steps per head) is what the ledger counts
    # after them, and what the uniform cache's ledger counts: nothing padded.
    measured = out["measured"]
    assert measured["compacted_allocated_bytes"] == measured["compacted_bytes"] == \
        out["ledger"]["total"]["compacted"] == \
        json.loads(snapkv(*args).stdout)["ledger"]["total"]["compacted"]
    for bad, message in ((("--floor", 2), "--floor is the per-head minimum"),
                         (("--budget", "adaptive", "--floor", 9), "at most --capacity")):
        done = snapkv(*args, *bad)
        assert done.returncode != 0 and message in done.stderr, done.stderr


def test_generate_json():
    needs_runner()
    done = snapkv("generate", "--prompt", "3 1 4 1 5 9 2 6 5 3 5 8 7 9", "--window", 8,
                  "--capacity", 10, "--steps", 2, "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = json.loads(done.stdout)
    assert out["prompt"] == dict(length=14, source="given",
                                 ids=[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 7, 9])
    assert out["compaction"] == dict(window=8, capacity=10, kernel=15, pooling="avg",
                                     gqa="mean", order="position", budget="uniform",
                                     pyramid_beta=20, floor=0, chunk=0, decode_interval=0,
                                     decode_capacity=0, block=1, kv_dtype="same", staging=0,
                                     staging_scoring="sum")
    assert out["kept_per_head"] == 10
    assert len(out["tokens"]["full"]) == len(out["tokens"]["compacted"]) == 3
    assert [s["logical_length"] for s in out["steps"]] == [14, 15, 16]
    assert [s["physical_rows"] for s in out["steps"]] == [
        dict(full=14 + g, compacted=10 + g) for g in range(3)]
    assert [s["fed_at"] for s in out["steps"]] == [None, 14, 15]
    assert out["agreement"]["of"] == 3 and out["teacher_forced"]["of"] == 2
    # The ledger (snapkv-report-cache) equals the bytes the runs held.
    assert (out["ledger"]["total"]["full"], out["ledger"]["total"]["compacted"]) == \
        (out["measured"]["full_bytes"], out["measured"]["compacted_bytes"])
    assert out["ledger"]["layers"][0]["kept"] == 10


# --- visualize ------------------------------------------------------------------------------

def test_visualize_writes_one_png_per_layer(tmp_path):
    needs_runner()
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots"
    done = snapkv("visualize", "--out", out, "--prompt-length", 40, "--window", 8,
                  "--capacity", 16, "--gqa", "expand")
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


def test_exposed_scores_of_a_select(tmp_path):
    """What `visualize` compiles: snapkv-opt --snapkv-expose-scores adds a snapkv.score beside
    each snapkv.select and five more results; the CLI reads the clauses it records."""
    needs_opt()
    from snapkv.cli import visualize

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
    done = run_opt(["--snapkv-expose-scores=functions=prefill"], text=source)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert visualize.exposed_layers(text) == [dict(
        window="2", capacity="4", kernel="3", pooling="max", gqa="mean", order="score",
        scale="5.000000e-01")]
    assert "snapkv.score %arg0, %arg1 window 2 kernel 3 pooling max gqa mean scale " \
           "5.000000e-01 outs(" in text
    assert ": (tensor<1x4x2x2xf32>, tensor<1x2x?x2xf32>) -> " \
           "(tensor<1x2x?xf32>, tensor<1x2x?xf32>)" in text
    sig = runtime.signature(text, "prefill")
    assert [str(t) for t in sig.results[2:]] == [
        "tensor<1x4x2x2xf32>", "tensor<1x2x?x2xf32>", "tensor<1x2x?xi64>",
        "tensor<1x2x?xf32>", "tensor<1x2x?xf32>"]


# --- export without torch, examples -----------------------------------------------------------

def test_export_without_torch_says_what_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(locate, "missing_frontend_packages", lambda: ["torch", "torch-mlir"])
    assert cli.main(["export", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "snapkv export: error: `snapkv export` cannot run here: it needs torch, " \
           "torch-mlir: pip install torch transformers torch-mlir" in err
    assert list(tmp_path.iterdir()) == []


def test_missing_bundled_model_without_torch_is_explained(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(locate, "missing_frontend_packages", lambda: ["torch"])
    monkeypatch.setattr(locate, "models_dir", lambda: tmp_path)
    assert cli.main(["ledger"]) == 1
    err = capsys.readouterr().err
    assert f"the bundled model {tmp_path / FIXTURE} is missing" in err
    assert "exported from PyTorch by `snapkv export`" in err and "pip install torch" in err


def test_example_select_mlir_prints_the_worked_example():
    """The header's command (snapkv-opt | mlir-runner) prints the numbers the header shows."""
    needs_opt()
    from snapkv import tools

    runner = tools.mlir_runner()
    if not runner.is_file():
        pytest.skip(f"mlir-runner not installed ({runner})")
    text = (REPO / "examples" / "select.mlir").read_text()
    assert "build/bin/snapkv-opt examples/select.mlir --snapkv-cpu-pipeline" in text
    lowered = subprocess.run([str(snapkv_opt()), "--snapkv-cpu-pipeline", "-"], input=text,
                             capture_output=True, text=True, check=True).stdout
    printed = subprocess.run(
        [str(runner), "-e", "main", "-entry-point-result=void",
         "-shared-libs=" + ",".join(map(str, tools.runner_libs()))],
        input=lowered, capture_output=True, text=True, check=True, timeout=300).stdout
    # printMemref's rows: "data =" then the numbers of one nested [...] block.
    blocks = [re.findall(r"-?\d+(?:\.\d+)?", block.split("data =", 1)[1])
              for block in printed.split("Unranked Memref")[1:]]
    votes, pooled, indices, values = [[float(x) for x in b] for b in blocks]
    assert indices == [2, 3, 4, 6, 7]
    assert values == [2, -2, 3, -3, 4, -4, 6, -6, 7, -7]
    assert pooled == [0.065641, 0.301538, 0.535897, 0.522564, 0.312821, 0.0523077]
    assert round(votes[3], 5) == round(8 / 25 + 12 / 26, 5)
    for row in ("[0.065641, 0.301538, 0.535897, 0.522564, 0.312821, 0.0523077]",
                "[2, 3, 4, 6, 7]"):
        assert row in text  # the header shows what is printed


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
