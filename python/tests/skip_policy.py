"""Strict skips: with ``--strict-skips`` (or SNAPKV_STRICT_SKIPS=1) a run fails if any test or
test module was skipped for a reason that is not on ``ALLOWED_SKIPS``.

`make test` and CI run strict, so a missing package or tool, which would otherwise only turn
a check into an "s" in the progress line, fails the run and names what is missing. The only
reason allowed today is the one thing `make test` cannot install: a GPU. A test that needs a
CUDA device skips with a reason starting "no CUDA device".

Loaded from conftest.py (``pytest_plugins``); tests/test_skip_policy.py runs it on small
generated test files in a subprocess.
"""

import os
import re

import pytest

# Regular expressions (re.match against the skip reason) and why each is acceptable.
ALLOWED_SKIPS = {
    r"no CUDA device\b": "a GPU cannot be installed; these tests run where one is lent",
}

ENV = "SNAPKV_STRICT_SKIPS"


def pytest_addoption(parser):
    parser.addoption(
        "--strict-skips", action="store_true", default=False,
        help=f"fail the run if a test skips for a reason not in {__name__}.ALLOWED_SKIPS "
             f"(also enabled by {ENV}=1)")


def pytest_configure(config):
    if config.getoption("--strict-skips") or os.environ.get(ENV, "") not in ("", "0"):
        config.pluginmanager.register(StrictSkips(), "snapkv-strict-skips")


def allowed(reason):
    return any(re.match(pattern, reason) for pattern in ALLOWED_SKIPS)


def _reason(report):
    """The text of a skip report (pytest stores (path, line, "Skipped: reason"))."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


class StrictSkips:
    def __init__(self):
        self.bad = []  # (node id, reason) of each skip without an allowed reason

    def _record(self, report):
        # xfail/xpass reports are "skipped" too, but carry `wasxfail`: they are not skips.
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = _reason(report)
            if not allowed(reason):
                self.bad.append((report.nodeid, reason))

    def pytest_runtest_logreport(self, report):
        self._record(report)

    def pytest_collectreport(self, report):
        # A whole module skipped (pytest.importorskip, pytest.skip(allow_module_level=True)).
        self._record(report)

    def pytest_sessionfinish(self, session, exitstatus):
        if self.bad and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.bad:
            return
        terminalreporter.section("skips without an allowed reason (strict skips)", red=True)
        for node, reason in self.bad:
            terminalreporter.line(f"{node}: {reason}")
        allowed_text = "; ".join(f"{p} ({why})" for p, why in ALLOWED_SKIPS.items())
        terminalreporter.line(
            f"{len(self.bad)} skip(s) without an allowed reason fail this run (allowed: "
            f"{allowed_text}). Install what is missing (scripts/install-deps.sh) or make the "
            "test run.", red=True)
