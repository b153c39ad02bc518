"""The commands the docs show, run as written on the built tree.

* Every ```sh block in README.md and docs/*.md that the line before it marks with
  `<!-- docs-test ... -->` runs with bash (-e, -o pipefail) from the repository root, with
  this checkout's python/ first on PYTHONPATH (as `make` sets it), and must exit 0. The
  marked blocks of one file run in order, each in a fresh shell from the repository root, as a
  reader follows the page (a block may use a file an earlier one wrote, e.g. under /tmp); a
  failure names the file and line of the block and of the command that failed. Mark a block
  only when it runs in seconds to tens of seconds on a built tree, without a GPU, downloads
  or installs, and without files the reader must bring (a placeholder like `file.mlir` is not
  runnable as written) or writing into the checkout. A marker must stand right above a ```sh
  fence.
* The command in the header of every examples/*.mlir ("From the repository root ...", up to
  the next empty comment line) runs the same way, and what the header says it prints must be
  in its output (the numbers of each expected line, in order).

An mlir-runner line without libomp in -shared-libs, for example, fails here (the CPU
pipeline's parallel loops call libomp).
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

from snapkv import tools

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# One line of marker (re.S: `.` would run on to a later marker), then the ```sh block.
MARKER = re.compile(r"^<!-- docs-test\b[^\n]*-->\n```sh\n(.*?)^```", re.M | re.S)
ANY_MARKER = re.compile(r"^<!-- docs-test\b", re.M)
TIMEOUT = 600
# Prepended to each block: on a failing command, says at which line of the block it ended.
TRAP = "trap 'echo \"docs-test: failed at block line $((LINENO - 1))\" >&2' ERR\n"


def marked_blocks(path: Path):
    """[(line of the block's first command, block text)] of the marked ```sh blocks."""
    text = path.read_text()
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1))
            for match in MARKER.finditer(text)]


def marked_files():
    return [pytest.param(path, id=str(path.relative_to(ROOT)))
            for path in DOCS if marked_blocks(path)]


def run_blocks(path: Path):
    """Run the marked blocks of `path` in order; stop at the first that fails and return
    what to report (file:line, exit status, output), or None when all exit 0."""
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for line, block in marked_blocks(path):
        done = run(TRAP + block)
        if done.returncode != 0:
            at = re.search(r"docs-test: failed at block line (\d+)", done.stderr)
            where = f", the command ending at {name}:{line + int(at.group(1)) - 1}" if at else ""
            return (f"{name}:{line}: the block exits {done.returncode}{where}\n{block}\n"
                    f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}")
    return None


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
    python = os.pathsep.join([str(ROOT / "python"),
                              *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=python),
                          capture_output=True, text=True, timeout=TIMEOUT)


def numbers(text: str):
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)]


@pytest.fixture(scope="module", autouse=True)
def built_tools():
    tools.require(tools.snapkv_opt(), "snapkv-opt")


def test_some_blocks_are_marked():
    assert marked_files(), "no ```sh block is marked <!-- docs-test --> in README.md/docs"
    assert example_headers(), "no examples/*.mlir header command found"


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_marker_stands_above_a_sh_block(path):
    text = path.read_text()
    markers = [text.count("\n", 0, m.start()) + 1 for m in ANY_MARKER.finditer(text)]
    blocks = [line - 2 for line, _ in marked_blocks(path)]
    stray = [line for line in markers if line not in blocks]
    assert not stray, (f"{path.relative_to(ROOT)}: line {stray}: a docs-test marker not "
                       "followed by a ```sh block (it would run nothing)")


@pytest.mark.parametrize("path", marked_files())
def test_marked_blocks_run(path):
    failure = run_blocks(path)
    assert failure is None, failure


def test_a_failing_marked_block_fails_and_says_where(tmp_path):
    """A marked block that fails is reported with its file and line and the line of the
    command that failed; the blocks after it do not run; an unmarked block never runs."""
    page = tmp_path / "page.md"
    ran = tmp_path / "ran"
    page.write_text(f"""# A page

```sh
touch {ran}.unmarked
```

<!-- docs-test -->
```sh
touch {ran}.first
```

<!-- docs-test -->
```sh
echo one
ls {tmp_path}/no-such-file \\
  | cat
echo not reached
```

<!-- docs-test -->
```sh
touch {ran}.after
```
""")
    assert [line for line, _ in marked_blocks(page)] == [9, 14, 22]
    failure = run_blocks(page)
    assert failure is not None
    assert failure.startswith(f"{page}:14: the block exits 2, the command ending at {page}:16\n")
    assert "no-such-file" in failure
    assert Path(f"{ran}.first").exists()
    assert not Path(f"{ran}.after").exists()
    assert not Path(f"{ran}.unmarked").exists()

    page.write_text("<!-- docs-test -->\n```sh\ntrue\n```\n")
    assert run_blocks(page) is None


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
