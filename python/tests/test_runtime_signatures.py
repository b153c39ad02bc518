"""snapkv.runtime.signatures: what the runtime reads from a module's text (types, callees,
tensor types, entry points that only call). No tools needed."""

import pytest
from runtime_inputs import DYNAMIC, layers_text

from snapkv import runtime
from snapkv.frontend import harness


def test_signature_of_the_fixture():
    text = DYNAMIC.read_text()
    for name in ("prefill", "decode"):
        sig = runtime.signature(text, name)
        assert ([str(t) for t in sig.args], [str(t) for t in sig.results]) == \
            harness.signature(text, name)


def test_signatures_with_attributes():
    text = ("func.func @decode(%a: tensor<2xf32> {llvm.noalias}) -> tensor<?xf32> {\n}\n"
            "func.func @prefill(%a: tensor<1x?xi64>) -> (tensor<1xf32>, tensor<1xi1>) "
            "attributes {foo = \"}\"} {\n}\n")
    sig = runtime.signature(text, "prefill")
    assert sig.args == (runtime.TensorType((1, None), "i64"),)
    assert [str(t) for t in sig.results] == ["tensor<1xf32>", "tensor<1xi1>"]
    assert runtime.signature(text, "decode").results == (runtime.TensorType((None,), "f32"),)


def test_bracket_matching_skips_strings_and_arrows():
    """Brackets inside string literals (escaped quotes too) and the `->` of a function type
    do not count; an unbalanced bracket is an error, not a wrong offset."""
    text = 'f(a<"x>)\\"(", (i32) -> i32>, {b = "}"}) tail'
    assert runtime.signatures._close(text, 1) == text.index(") tail")
    assert runtime.signatures._close(text, 3) == text.index(">, {b")
    with pytest.raises(ValueError, match="unbalanced"):
        runtime.signatures._close("f(a<b", 1)


def test_tensor_types_of_a_function_and_its_callees():
    text = ("func.func @g(%a: tensor<3x?xindex>) -> tensor<3x?xindex> {\n"
            "  return %a : tensor<3x?xindex>\n}\n"
            "func.func @f(%a: tensor<?x4xf32>, %i: tensor<3x?xindex>) -> tensor<?x4xf32> {\n"
            "  %b = call @g(%i) : (tensor<3x?xindex>) -> tensor<3x?xindex>\n"
            "  return %a : tensor<?x4xf32>\n}\n")
    found = runtime.tensor_types(text, "f")
    assert found[0] == ((None, 4), "f32", "tensor<?x4xf32>")
    assert found[-1] == ((3, None), "index", "tensor<3x?xindex>")
    assert {t for _, _, t in found} == {"tensor<?x4xf32>", "tensor<3x?xindex>"}


def test_entry_points_that_only_call_are_recognised():
    """@prefill/@decode whose bodies are only call / tensor.cast / return are glue (run from
    Python, snapkv.runtime.glue); anything else keeps the entry point compiled."""
    text = layers_text()
    glue = runtime.glue_function(text, "prefill")
    assert glue.callees == ["embed", "prefill_layer", "head"]
    assert [op[0] for op in glue.ops] == ["call", "call", "call", "call", "return"]
    assert runtime.glue_function(text, "decode").callees == ["embed", "decode_layer", "head"]
    other = text.replace("%logits = call @head(", "%unused = arith.constant 0 : i64\n"
                         "    %logits = call @head(", 1)
    assert runtime.glue_function(other, "prefill") is None
    assert runtime.glue_function(text, "no_such_function") is None
