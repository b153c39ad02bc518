"""The compiler-to-Python contracts: ``snapkv-opt --snapkv-describe-module`` (a module's
interface as JSON, read by :mod:`snapkv.interface`), the rewrite's ``snapkv.refusal`` record
and exit status 3 (:class:`snapkv.tools.RewriteRefused`), and :mod:`snapkv.tools`' one way
of running tools."""

import sys
from pathlib import Path

import pytest

from snapkv import hf, interface, tools

REPO = Path(__file__).resolve().parents[2]
MINI = REPO / "test" / "Transforms" / "Inputs" / "compress-kv-cache-mini.mlir"
LAYERS = REPO / "test" / "Transforms" / "Inputs" / "models" / "llama_layers.mlir"


@pytest.fixture(autouse=True)
def _need_snapkv_opt():
    try:
        tools.require(tools.snapkv_opt(), "snapkv-opt")
    except tools.ToolError as error:
        pytest.skip(str(error))


def test_layers_module_interface():
    described = interface.describe(LAYERS.read_text())
    prefill = described.function("prefill")
    assert prefill.visibility == "public" and not prefill.external
    assert prefill.callees == ("embed", "prefill_layer", "head")
    assert prefill.arguments[0].type.shape == (1, None) and prefill.arguments[0].weight is None
    weights = [a.weight for a in prefill.arguments if a.weight]
    assert weights[0] == "model.embed_tokens.weight" and weights[-1] == "lm_head.weight"
    # @prefill only calls: the runner runs it step by step.
    steps = prefill.glue
    assert steps is not None and steps[-1]["op"] == "return"
    assert [s["callee"] for s in steps if s["op"] == "call"].count("prefill_layer") == 2
    # The layer function is not glue, and has no selects before the rewrite.
    layer = described.function("prefill_layer")
    assert layer.glue is None and layer.selects == () and layer.visibility == "private"
    assert described.reachable("prefill") == ["embed", "prefill_layer", "head"]
    assert described.refusal is None
    with pytest.raises(ValueError, match="no func.func @nope"):
        described.function("nope")


def test_rewritten_selects_are_described():
    rewritten = hf.rewrite(LAYERS.read_text(), hf.Compaction(window=4, capacity=8, gqa="mean"))
    described = interface.describe(rewritten)
    (select,) = described.function("prefill_layer").selects
    assert (select["window"], select["capacity"], select["gqa"]) == (4, 8, "mean")
    assert select["operands"][0]["shape"] == [1, 4, 4, 128]
    assert select["results"][2]["element"] == "i64"
    assert described.select_count() == 1


def test_refusal_is_recorded_and_strict_refusal_is_its_own_error():
    text = MINI.read_text()
    refused = hf.rewrite(text, hf.Compaction(window=16, capacity=20), strict=False)
    record = interface.describe(refused).refusal
    assert record["reason"] == "prompt-shorter-than-window" and record["layer"] == 0
    assert record["function"] == "prefill" and "fewer than window=16" in record["message"]
    with pytest.raises(tools.RewriteRefused) as caught:
        hf.rewrite(text, hf.Compaction(window=16, capacity=20))
    assert caught.value.returncode == tools.REFUSAL_EXIT
    assert "fewer than window=16" in str(caught.value)
    # A bad option is a failure, not a refusal.
    with pytest.raises(tools.ToolFailed) as caught:
        hf.rewrite(text, hf.Compaction(window=2, capacity=6, kernel=4))
    assert not isinstance(caught.value, tools.RewriteRefused)
    assert caught.value.returncode == 1 and "kernel" in caught.value.stderr


def test_invalid_module_and_unexpected_report():
    with pytest.raises(tools.ToolFailed, match="expected operation name"):
        interface.describe("module {")
    with pytest.raises(tools.ToolError, match="version 7, expected 1"):
        interface.parse('{"version": 7, "attributes": {}, "functions": []}')
    with pytest.raises(tools.ToolError, match="unexpected output"):
        interface.parse("not json")


def test_run_names_timeouts_and_missing_programs(tmp_path):
    with pytest.raises(tools.ToolError, match="sleeper timed out after 0.5 s"):
        tools.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.5,
                  what="sleeper")
    with pytest.raises(tools.ToolError, match="cannot run"):
        tools.run([str(tmp_path / "missing")], timeout=5)
    done = tools.run([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=30)
    with pytest.raises(tools.RewriteRefused):
        tools.check(done, "a tool")
