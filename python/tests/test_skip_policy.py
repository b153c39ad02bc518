"""The strict-skips plugin (tests/skip_policy.py), run on small generated test files in a
pytest subprocess: a skip fails a strict run unless its reason is allowed, whichever way the
skip happens (pytest.skip, skipif, a whole module), and a non-strict run is unchanged."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

TESTS = '''
import pytest

def test_runs():
    assert True

def test_skips():
    pytest.skip(REASON)

@pytest.mark.skipif(True, reason=REASON)
def test_marked():
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_failure():
    assert False
'''

MODULE_SKIP = '''
import pytest
pytest.importorskip("snapkv_no_such_module")

def test_never_runs():
    pass
'''


def _run(tmp_path, source, *args, env=None):
    (tmp_path / "test_generated.py").write_text(source)
    environment = {k: v for k, v in os.environ.items() if k != "SNAPKV_STRICT_SKIPS"}
    environment["PYTHONPATH"] = os.pathsep.join([str(HERE), environment.get("PYTHONPATH", "")])
    environment.update(env or {})
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "skip_policy", "-rs",
                           "-p", "no:cacheprovider", "test_generated.py", *args],
                          cwd=tmp_path, capture_output=True, text=True, env=environment,
                          timeout=120, check=False)
    return done.returncode, done.stdout + done.stderr


def _tests(reason):
    return f"REASON = {reason!r}\n" + TESTS


def test_plain_run_tolerates_skips(tmp_path):
    code, out = _run(tmp_path, _tests("torch is not installed"))
    assert code == 0, out
    assert "1 passed, 2 skipped, 1 xfailed" in out
    assert "strict skips" not in out


@pytest.mark.parametrize("how", [["--strict-skips"], []])
def test_strict_run_fails_on_a_skip_without_an_allowed_reason(tmp_path, how):
    env = {} if how else {"SNAPKV_STRICT_SKIPS": "1"}
    code, out = _run(tmp_path, _tests("torch is not installed"), *how, env=env)
    assert code == 1, out
    assert "skips without an allowed reason (strict skips)" in out
    assert "test_generated.py::test_skips: torch is not installed" in out
    assert "test_generated.py::test_marked: torch is not installed" in out
    assert "test_expected_failure" not in out.split("strict skips")[1]  # xfail is no skip
    assert "2 skip(s) without an allowed reason" in out


def test_strict_run_passes_with_allowed_reasons(tmp_path):
    code, out = _run(tmp_path, _tests("no CUDA device (libcuda.so.1 not found)"),
                     "--strict-skips")
    assert code == 0, out
    assert "1 passed, 2 skipped, 1 xfailed" in out
    assert "strict skips" not in out


def test_allow_list_matches_the_start_of_the_reason(tmp_path):
    code, out = _run(tmp_path, _tests("torch missing; no CUDA device either"), "--strict-skips")
    assert code == 1, out


def test_strict_run_fails_on_a_skipped_module(tmp_path):
    code, out = _run(tmp_path, MODULE_SKIP, "--strict-skips")
    assert code == 1, out
    assert "test_generated.py: could not import 'snapkv_no_such_module'" in out
    code, out = _run(tmp_path, MODULE_SKIP)
    assert code == pytest.ExitCode.NO_TESTS_COLLECTED, out  # pytest's own code, unchanged


def test_strict_run_keeps_a_failure_a_failure(tmp_path):
    code, out = _run(tmp_path, _tests("torch is not installed") + "\ndef test_bad():\n"
                     "    assert 1 == 2\n", "--strict-skips")
    assert code == 1, out
    assert "1 failed, 1 passed, 2 skipped, 1 xfailed" in out
