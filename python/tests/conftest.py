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
    """Skip unless snapkv-opt, mlir-runner, mlir-translate and clang are there (the AOT
    runner's tools)."""
    import shutil

    import pytest
    from snapkv.frontend import runner
    from snapkv.mlirgen import ToolError, tools

    try:
        tools()
        for tool in (runner.mlir_translate_path(), runner.clang_path()):
            if not tool.is_file() and shutil.which(str(tool)) is None:
                raise ToolError(f"{tool} not found")
    except ToolError as error:
        pytest.skip(str(error))
