"""``python -m snapkv.runtime`` (snapkv.runtime.__main__): compile a model module, generate
greedily, print tokens and cache lengths; errors are one line and exit status 1."""

import os
import subprocess
import sys

from conftest import require_aot_tools
from runtime_inputs import DYNAMIC, REPO

from snapkv.runtime.__main__ import main


def test_the_command_generates_from_random_ids(capsys):
    require_aot_tools()
    assert main([str(DYNAMIC), "--prompt-length", "16", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "logical lengths:  [16, 17, 18]" in out
    assert "physical lengths: [16, 17, 18]" in out  # an unmodified module keeps every row


def test_python_dash_m_runs_it_and_errors_are_one_line(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "snapkv.runtime", str(tmp_path / "none.mlir")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1
    assert done.stderr.startswith("python -m snapkv.runtime: error: "), done.stderr
    assert "Traceback" not in done.stderr
