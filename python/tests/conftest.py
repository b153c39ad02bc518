import sys
from pathlib import Path

# Lets `pytest python/tests` work from a checkout without `pip install -e python`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# --strict-skips / SNAPKV_STRICT_SKIPS=1: skips without an allowed reason fail the run.
pytest_plugins = ["skip_policy"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: exports and compiles models (minutes cold); -m 'not slow' skips them")


def require_aot_tools():
    """Skip unless snapkv-opt, snapkv-translate and clang are there (the AOT runner's
    tools)."""
    import pytest

    from snapkv.mlirgen import ToolError
    from snapkv.mlirgen import tools as runner_tools

    try:
        runner_tools()
    except ToolError as error:
        pytest.skip(str(error))
