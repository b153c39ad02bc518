"""scripts/no-abort.py's own guard: the robustness run (check-sanitizers, fuzz-smoke) must
cover every registered snapkv pass and must not list a pass that does not exist (such an
entry fails on every input with exit code 1, which the run counts as "no abort")."""
import importlib.util
from pathlib import Path

import pytest

from snapkv import tools

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "no-abort.py"


@pytest.fixture
def no_abort():
    spec = importlib.util.spec_from_file_location("no_abort", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_registered_pass_is_run_or_excused(no_abort):
    registered = no_abort.registered_passes(str(tools.snapkv_opt()))
    # The parse of --help found the passes (an empty set would make the check vacuous).
    assert {"convert-snapkv-to-linalg", "snapkv-vectorize", "snapkv-gpu-launch",
            "snapkv-cpu-pipeline", "snapkv-gpu-pipeline"} <= registered
    no_abort.check_passes(str(tools.snapkv_opt()))


def test_a_pass_left_out_is_refused(no_abort, monkeypatch):
    monkeypatch.setattr(no_abort, "PASSES", [args for args in no_abort.PASSES
                                             if "snapkv-gpu-launch" not in args[0]])
    with pytest.raises(SystemExit, match="not in PASSES or NOT_RUN: snapkv-gpu-launch"):
        no_abort.check_passes(str(tools.snapkv_opt()))


def test_a_pass_that_does_not_exist_is_refused(no_abort, monkeypatch):
    monkeypatch.setattr(no_abort, "PASSES", no_abort.PASSES + [["--snapkv-vectorize-linalg"]])
    with pytest.raises(SystemExit, match="--snapkv-vectorize-linalg does not run"):
        no_abort.check_passes(str(tools.snapkv_opt()))


def test_parallel_sweep_counts_every_outcome_in_input_order(no_abort, tmp_path, monkeypatch,
                                                             capsys):
    # A stand-in tool that dies from SIGABRT on inputs named bad*, rejects the rest (exit 1).
    tool = tmp_path / "tool"
    tool.write_text('#!/bin/sh\ncase "$*" in *bad*) kill -ABRT $$;; esac\nexit 1\n')
    tool.chmod(0o755)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a", "bad1", "c", "bad2", "e"):
        (corpus / f"{name}.mlir").write_text("module {}\n")
    (corpus / "deep.mlir").write_text("(" * (no_abort.MAX_NESTING + 1))
    monkeypatch.setattr(no_abort, "PASSES", [["--x"], ["--y"]])
    monkeypatch.setattr(no_abort, "check_passes", lambda tool: None)
    monkeypatch.setenv("NO_ABORT_JOBS", "3")
    monkeypatch.setattr("sys.argv", ["no-abort.py", str(tool), str(corpus)])
    with pytest.raises(SystemExit) as exit_:
        no_abort.main()
    assert exit_.value.code == 1
    out = capsys.readouterr().out
    reported = [line.split()[-3] for line in out.splitlines() if line.startswith("ABORT")]
    assert [Path(p).name for p in reported] == ["bad1.mlir", "bad1.mlir",
                                                "bad2.mlir", "bad2.mlir"]
    assert "SKIP" in out and "deep.mlir" in out
    assert out.splitlines()[-1] == "no-abort: 6 passed, 4 failed, 1 skipped"
