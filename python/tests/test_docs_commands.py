"""The commands the docs show, run as written on the built tree.

* Every ```sh block in README.md and docs/*.md that the line before it marks with
  `<!-- docs-test ... -->` runs with bash (-e, -o pipefail) from the repository root and must
  exit 0. Mark a block only when it runs in seconds on a built tree without files the reader
  must bring (a placeholder like `file.mlir` is not runnable as written).
* The command in the header of every examples/*.mlir ("From the repository root ...", up to
  the next empty comment line) runs the same way, and what the header says it prints must be
  in its output (the numbers of each expected line, in order).

An mlir-runner line without libomp in -shared-libs, for example, fails here (the CPU
pipeline's parallel loops call libomp).
"""

import re
import subprocess
from pathlib import Path

import pytest

from snapkv import tools

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- docs-test\b.*-->\n```sh\n(.*?)^```", re.M | re.S)
TIMEOUT = 600


def marked_blocks():
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, match in enumerate(MARKER.finditer(path.read_text())):
            found.append(pytest.param(match.group(1), id=f"{path.name}#{i}"))
    return found


def example_headers():
    found = []
    for path in sorted((ROOT / "examples").glob("*.mlir")):
        lines = path.read_text().splitlines()
        start = next((i for i, line in enumerate(lines) if "From the repository root" in line),
                     None)
        if start is None:
            continue
        command = []
        for line in lines[start + 1:]:
            text = line[2:].strip() if line.startswith("//") else None
            if text is None or (not text and command):
                break
            if text:
                command.append(text)
        # What it prints: the first run of "//   [...]" lines after the command.
        expected = []
        for line in lines[start + 1:]:
            if line.startswith("//   ["):
                expected.append(line[2:].split("]")[0] + "]")
            elif expected:
                break
        found.append(pytest.param(path, "\n".join(command), expected, id=path.name))
    return found


def run(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)


def numbers(text: str):
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)]


@pytest.fixture(scope="module", autouse=True)
def built_tools():
    tools.require(tools.snapkv_opt(), "snapkv-opt")


def test_some_blocks_are_marked():
    assert marked_blocks(), "no ```sh block is marked <!-- docs-test --> in README.md/docs"
    assert example_headers(), "no examples/*.mlir header command found"


@pytest.mark.parametrize("block", marked_blocks())
def test_marked_block_runs(block):
    done = run(block)
    assert done.returncode == 0, f"{block}\nexit {done.returncode}:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("path, command, expected", example_headers())
def test_example_header_command_runs_and_prints_what_it_says(path, command, expected):
    assert command, f"{path}: no command after 'From the repository root'"
    assert expected, f"{path}: the header does not show what the command prints"
    done = run(command)
    assert done.returncode == 0, f"{command}\nexit {done.returncode}:\n{done.stderr[-3000:]}"
    printed = numbers(done.stdout)
    at = 0
    for line in expected:
        want = numbers(line)
        while at < len(printed) and printed[at:at + len(want)] != pytest.approx(want, rel=1e-5):
            at += 1
        assert at < len(printed), f"{path}: the output lacks {line}:\n{done.stdout[:3000]}"
        at += len(want)
