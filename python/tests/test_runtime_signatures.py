"""snapkv.runtime.signatures: what the runtime knows of a module (types, callees, tensor
types, entry points that only call), from snapkv-opt's description of it."""

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
    text = ("func.func @decode(%a: tensor<2xf32> {llvm.noalias}) -> tensor<?xf32> {\n"
            "  %c = tensor.cast %a : tensor<2xf32> to tensor<?xf32>\n"
            "  return %c : tensor<?xf32>\n}\n"
            "func.func @prefill(%a: tensor<1x?xi64>, %w: tensor<4x3xf32> {snapkv.weight = "
            "\"lm_head.weight\", snapkv.transposed}) -> (tensor<1xf32>, tensor<1xi1>) "
            "attributes {foo = \"}\"} {\n"
            "  %f = arith.constant dense<1.0> : tensor<1xf32>\n"
            "  %b = arith.constant dense<true> : tensor<1xi1>\n"
            "  return %f, %b : tensor<1xf32>, tensor<1xi1>\n}\n"
            "func.func private @declared(%a: tensor<2xf32>)\n")
    sig = runtime.signature(text, "prefill")
    assert sig.args == (runtime.TensorType((1, None), "i64"), runtime.TensorType((4, 3), "f32"))
    assert [str(t) for t in sig.results] == ["tensor<1xf32>", "tensor<1xi1>"]
    assert sig.weights[0] is None
    assert (sig.weights[1].name, sig.weights[1].transposed) == ("lm_head.weight", True)
    assert runtime.signature(text, "decode").results == (runtime.TensorType((None,), "f32"),)
    with pytest.raises(ValueError, match="no func.func @nope"):
        runtime.signature(text, "nope")
    with pytest.raises(ValueError, match="@declared has no body"):
        runtime.signature(text, "declared")


def test_unsupported_types_are_named():
    text = ("func.func @f(%a: memref<2xf32, strided<[2]>>) -> tensor<2xcomplex<f32>> {\n"
            "  %c = tensor.empty() : tensor<2xcomplex<f32>>\n"
            "  return %c : tensor<2xcomplex<f32>>\n}\n")
    with pytest.raises(ValueError, match=r"unsupported type 'memref<2xf32, strided<\[2\]>>'"):
        runtime.signature(text, "f")
    text = ("func.func @f(%a: memref<2xf32>) -> tensor<2xcomplex<f32>> {\n"
            "  %c = tensor.empty() : tensor<2xcomplex<f32>>\n"
            "  return %c : tensor<2xcomplex<f32>>\n}\n")
    with pytest.raises(ValueError, match="unsupported element type 'complex<f32>'"):
        runtime.signature(text, "f")


def test_memref_arguments_are_buffers():
    text = ("func.func @f(%a: memref<2x?xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {\n"
            "  return %b : tensor<2xf32>\n}\n")
    sig = runtime.signature(text, "f")
    assert sig.args == (runtime.TensorType((2, None), "f32", buffer=True),
                        runtime.TensorType((2,), "f32"))
    assert str(sig.args[0]) == "memref<2x?xf32>"


def test_tensor_types_of_a_function_and_its_callees():
    text = ("func.func @g(%a: tensor<3x?xindex>) -> tensor<3x?xindex> {\n"
            "  return %a : tensor<3x?xindex>\n}\n"
            "func.func @f(%a: tensor<?x4xf32>, %i: tensor<3x?xindex>) -> tensor<?x4xf32> {\n"
            "  %b = call @g(%i) : (tensor<3x?xindex>) -> tensor<3x?xindex>\n"
            "  return %a : tensor<?x4xf32>\n}\n")
    found = runtime.tensor_types(text, "f")
    assert sorted(found, key=lambda t: t[2]) == [((3, None), "index", "tensor<3x?xindex>"),
                             ((None, 4), "f32", "tensor<?x4xf32>")]
    assert runtime.callees(text, "f") == ["g"] and runtime.callees(text, "g") == []


def test_entry_points_that_only_call_are_recognised():
    """@prefill/@decode whose bodies are only call / tensor.cast / return are glue (run from
    Python, snapkv.runtime.glue); anything else keeps the entry point compiled."""
    text = layers_text()
    glue = runtime.glue_function(text, "prefill")
    assert glue.callees == ["embed", "prefill_layer", "head"]
    assert [step["op"] for step in glue.steps] == ["call", "call", "call", "call", "return"]
    assert glue.arguments == len(runtime.signature(text, "prefill").args)
    assert runtime.glue_function(text, "decode").callees == ["embed", "decode_layer", "head"]
    other = text.replace("%logits = call @head(", "%unused = arith.constant 0 : i64\n"
                         "    %logits = call @head(", 1)
    assert runtime.glue_function(other, "prefill") is None
    assert runtime.glue_function(text, "no_such_function") is None
