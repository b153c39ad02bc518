"""The README's main job: the worked example through the compiled tools."""
import pytest

from snapkv import demo
from snapkv.tools import snapkv_opt


def test_demo_prints_compiled_table(capsys):
    if not snapkv_opt().exists():
        pytest.skip("snapkv-opt is not built")
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert out.count("kept indices (compiled):  [2, 3, 4, 6, 7]") == 2
    # Compiled votes of position 3: 8/25 + 12/26 = 0.781538... in f32.
    assert "       3    0.781539     0.781538" in out
    assert out.count("compiled and reference agree") == 2
