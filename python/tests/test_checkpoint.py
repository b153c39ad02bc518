"""Reading a local checkpoint and binding its weights (numpy only, no torch, nothing compiled):

* snapkv.frontend.checkpoint.Checkpoint refuses, with the reason, every directory it cannot use
  (no config, another architecture, custom code, quantized, pickled weights only, broken
  safetensors headers, missing shards) and maps tensors from the files without copying;
* f16/bf16 tensors widen exactly to f32 where the module takes f32; nothing else converts;
* the runner reads which arguments are weights (`snapkv.weight`) and refuses weights that are
  missing or do not fit the module's signature, before anything is compiled;
* the CLI reports an unusable checkpoint directory in one line.

The safetensors files are written here byte by byte (the format is an 8-byte header length, a
JSON header and the data), so malformed ones can be made too.
"""

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snapkv import hf, runtime
from snapkv.frontend.checkpoint import (
    Checkpoint,
    CheckpointError,
    WeightRef,
    to_dtype,
    weight_arrays,
)

REPO = Path(__file__).resolve().parents[2]
LAYERS = REPO / "test" / "Transforms" / "Inputs" / "models" / "llama_layers.mlir"
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
          "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
          "vocab_size": 16, "max_position_embeddings": 64}


def bf16_bits(values):
    """float32 -> bf16 bits (values chosen exactly representable)."""
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def safetensors_bytes(tensors, header_extra=None, pad=True):
    """{name: (dtype, array)} -> the bytes of a safetensors file."""
    header, data = {}, b""
    for name, (dtype, array) in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(np.shape(array)),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header.update(header_extra or {})
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def make_checkpoint(folder: Path, tensors=None, config=None, **files):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or CONFIG))
    if tensors is None:
        tensors = {"model.embed_tokens.weight": ("F32", np.arange(128, dtype=np.float32)
                                                 .reshape(16, 8)),
                   "model.norm.weight": ("BF16", bf16_bits([1, 2, 0.5, -1, 3, 4, 0.25, 8]))}
    if tensors is not False:
        (folder / "model.safetensors").write_bytes(safetensors_bytes(tensors))
    for name, data in files.items():
        (folder / name.replace("__", ".")).write_bytes(data if isinstance(data, bytes)
                                                       else data.encode())
    return folder


def refused(folder, match):
    with pytest.raises(CheckpointError, match=match):
        Checkpoint(folder)


def test_reads_config_and_maps_tensors_without_copying(tmp_path):
    ckpt = Checkpoint(make_checkpoint(tmp_path / "m"))
    assert ckpt.family == "Llama" and ckpt.num_layers == 1
    assert ckpt.tensors["model.embed_tokens.weight"].shape == (16, 8)
    embed = ckpt.array("model.embed_tokens.weight")
    assert np.array_equal(embed, np.arange(128, dtype=np.float32).reshape(16, 8))
    assert not embed.flags.writeable and not embed.flags.owndata  # a view of the mapped file
    assert ckpt.fingerprint() == Checkpoint(tmp_path / "m").fingerprint()
    with pytest.raises(CheckpointError, match="no tensor 'nope'"):
        ckpt.array("nope")


def test_widening_is_exact_and_narrowing_rounds(tmp_path):
    """Widening to an f32 module is exact; a bf16/f16 module (--dtype) takes f32, f16 and bf16
    tensors rounded to nearest even (ties to even, as torch's .to(dtype)); anything else is
    refused."""
    ckpt = Checkpoint(make_checkpoint(tmp_path / "m"))
    norm = ckpt.array("model.norm.weight")
    assert norm.dtype == np.uint16  # bf16 bits
    assert np.array_equal(to_dtype(norm, "BF16", "f32"),
                          np.array([1, 2, 0.5, -1, 3, 4, 0.25, 8], dtype=np.float32))
    half = np.array([1.5, -2.25], dtype=np.float16)
    assert np.array_equal(to_dtype(half, "F16", "f32"), [1.5, -2.25])
    assert to_dtype(norm, "BF16", "bf16") is norm
    # 1 + 2^-8 is halfway between two bf16 values: to the even one (1.0); 1 + 3 * 2^-8 up.
    wide = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.0, 65520.0], dtype=np.float32)
    assert to_dtype(wide, "F32", "bf16").tolist() == [0x3F80, 0x3F82, 0xC000, 0x4780]
    assert to_dtype(wide, "F32", "f16").tolist() == [1.00390625, 1.01171875, -2.0, np.inf]
    assert np.array_equal(to_dtype(half, "F16", "bf16"), [0x3FC0, 0xC010])
    assert np.array_equal(to_dtype(norm, "BF16", "f16"), [1, 2, 0.5, -1, 3, 4, 0.25, 8])
    with pytest.raises(ValueError, match="I64 tensor cannot be given to a bf16 argument"):
        to_dtype(np.zeros(2, np.int64), "I64", "bf16")
    with pytest.raises(ValueError, match="F64 tensor cannot be given to a f16 argument"):
        to_dtype(np.zeros(2, np.float64), "F64", "f16")
    arrays, notes = weight_arrays(ckpt, {"model.norm.weight": ((8,), "f32"),
                                         "model.embed_tokens.weight": ((16, 8), "f32")})
    assert arrays["model.norm.weight"].dtype == np.float32
    assert not arrays["model.embed_tokens.weight"].flags.owndata  # f32: still mapped
    assert notes == ["1 BF16 tensors converted to f32 (copies; the others are mapped from the "
                     "files)"]


def test_weights_that_do_not_fit_are_named(tmp_path):
    ckpt = Checkpoint(make_checkpoint(tmp_path / "m"))
    norm = {"model.norm.weight": ((8,), "f32")}
    with pytest.raises(CheckpointError, match=r"model.embed_tokens.weight: the checkpoint holds "
                                              r"\[16, 8\], the module takes \[8, 16\]"):
        weight_arrays(ckpt, {"model.embed_tokens.weight": ((8, 16), "f32"), **norm})
    with pytest.raises(CheckpointError, match="1 tensor.s. the module needs are not in the "
                                              "checkpoint: lm_head.weight"):
        weight_arrays(ckpt, {"lm_head.weight": ((16, 8), "f32")})
    # A tensor the module does not take (e.g. Qwen2's q/k/v biases given to a Llama module)
    # means another architecture: refused, not ignored.
    with pytest.raises(CheckpointError, match=r"holds 1 tensor.s. the module does not take "
                                              r"\(model.embed_tokens.weight\): it is not the "
                                              r"architecture"):
        weight_arrays(ckpt, norm)


def test_architecture_ignores_what_the_module_does_not_depend_on(tmp_path):
    ckpt = Checkpoint(make_checkpoint(tmp_path / "a"))
    tuned = Checkpoint(make_checkpoint(tmp_path / "b", config={
        **CONFIG, "_name_or_path": "x", "dtype": "bfloat16", "eos_token_id": 7}))
    tuned.check_architecture(ckpt.architecture())
    other = Checkpoint(make_checkpoint(tmp_path / "c", config={**CONFIG, "rope_theta": 5e5}))
    with pytest.raises(CheckpointError, match="is not the architecture model.mlir was exported "
                                              "from .rope_theta: None there, 500000.0 here"):
        other.check_architecture(ckpt.architecture(), "model.mlir")


@pytest.mark.parametrize("edit, match", [
    (dict(config={**CONFIG, "model_type": "gpt2"}),
     "model_type 'gpt2' is not a Llama-family model this exporter supports"),
    (dict(config={**CONFIG, "model_type": "gemma2"}), "soft-caps its attention logits"),
    (dict(config={**CONFIG, "auto_map": {"AutoModel": "x.Y"}}), "custom modelling code"),
    (dict(config={**CONFIG, "quantization_config": {"bits": 4}}), "quantized"),
    (dict(config={**CONFIG, "architectures": ["LlamaModel"]}), "no \\*ForCausalLM"),
    (dict(config={**CONFIG, "num_hidden_layers": 0}), "num_hidden_layers must be a positive"),
    (dict(tensors=False, pytorch_model__bin=b"\x80\x02"),
     "pytorch_model.bin .pickled PyTorch. is not read"),
    (dict(tensors={"a": ("F32", np.zeros(4, np.float32))},
          config={k: v for k, v in CONFIG.items() if k != "model_type"}), "has no model_type"),
])
def test_unusable_checkpoints_are_refused(tmp_path, edit, match):
    refused(make_checkpoint(tmp_path / "m", **edit), match)


def test_broken_safetensors_are_refused(tmp_path):
    folder = make_checkpoint(tmp_path / "m", tensors=False)
    (folder / "model.safetensors").write_bytes(b"\x01\x02")
    refused(folder, "shorter than 8 bytes")
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 10 ** 6) + b"{}")
    refused(folder, "header length 1,000,000 does not fit")
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 4) + b"{]]]")
    refused(folder, "header is not JSON")
    good = safetensors_bytes({"a": ("F32", np.zeros(4, np.float32))})
    (folder / "model.safetensors").write_bytes(good[:-4])  # the data cut short
    refused(folder, r"tensor 'a' \(F32 \[4\]\) does not fit its byte range")
    (folder / "model.safetensors").write_bytes(
        safetensors_bytes({"a": ("F32", np.zeros(4, np.float32))}).replace(b'"F32"', b'"X99"'))
    refused(folder, "dtype X99, which is not read here")


def test_sharded_checkpoints(tmp_path):
    folder = make_checkpoint(tmp_path / "m", tensors=False)
    (folder / "model-1.safetensors").write_bytes(
        safetensors_bytes({"a": ("F32", np.ones(3, np.float32))}))
    (folder / "model-2.safetensors").write_bytes(
        safetensors_bytes({"b": ("F16", np.ones(2, np.float16))}))
    index = {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt = Checkpoint(folder)
    assert np.array_equal(ckpt.array("a"), [1, 1, 1]) and ckpt.array("b").dtype == np.float16
    index["weight_map"]["c"] = "model-3.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(folder, "shard 'model-3.safetensors' is missing")
    index["weight_map"] = {"a": "model-1.safetensors", "b": "model-1.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(folder, r"lists \['b'\] but the shards do not hold them")


def test_not_a_directory(tmp_path):
    refused(tmp_path / "nothing", "no such directory")
    (tmp_path / "file").write_text("x")
    refused(tmp_path / "file", "not a directory")
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", "no config.json")
    (tmp_path / "empty" / "config.json").write_text("{not json")
    refused(tmp_path / "empty", "not valid JSON")


def test_runner_reads_and_checks_weight_arguments():
    """The exported module's weights are its trailing arguments, named by checkpoint key;
    weights that are missing or do not fit are refused before anything is compiled."""
    text = LAYERS.read_text()
    prefill = runtime.signature(text, "prefill")
    decode = runtime.signature(text, "decode")
    names = [ref.name for ref, _ in prefill.weight_args]
    assert names[0] == "model.embed_tokens.weight" and names[-1] == "lm_head.weight"
    assert len(names) == 2 + 2 * 9 + 1
    assert [ref.name for ref, _ in decode.weight_args] == names
    assert [str(t) for t in prefill.inputs] == ["tensor<1x?xi64>"]
    assert len(decode.inputs) == 2 + 4  # id, position, 2 layers x (K, V)
    assert hf.layer_functions(text) == ("prefill_layer", "decode_layer")
    assert hf.layer_functions(text.replace("@decode_layer", "@other")) is None
    assert runtime.callees(text, "prefill") == ["embed", "prefill_layer", "head"]
    # The memory estimate reads the layer function, where the [B, H, L, L] scores are.
    assert max(runtime.growth(text, "prefill")) == 2
    with pytest.raises(ValueError, match="takes 21 weights .* but none were given"):
        runtime.CompiledModel(text)
    # Transposed weights ([in, out] arguments) are given in checkpoint shape, [out, in].
    shapes = {ref.name: np.zeros(t.shape[::-1] if ref.transposed else t.shape, np.float32)
              for ref, t in prefill.weight_args}
    shapes["model.norm.weight"] = np.zeros(5, np.float32)
    with pytest.raises(ValueError, match=r"model.norm.weight: float32 \[5\] given, the module "
                                         r"takes tensor<32xf32>"):
        runtime.CompiledModel(text, weights=shapes)
    del shapes["model.norm.weight"]
    with pytest.raises(ValueError, match="model.norm.weight: missing"):
        runtime.CompiledModel(text, weights=shapes)
    with pytest.raises(ValueError, match="takes no weights"):
        runtime.CompiledModel((REPO / "test" / "Models" / "tiny_llama_dynamic.mlir").read_text(),
                              weights={})


def test_cli_reports_unusable_checkpoints(tmp_path):
    folder = make_checkpoint(tmp_path / "gpt", config={**CONFIG, "model_type": "gpt2"})
    for command in (["generate", folder], ["ledger", folder], ["compile", folder, "-o", "-"],
                    ["export", "--hf", folder]):
        done = subprocess.run([sys.executable, "-m", "snapkv.cli", *map(str, command)],
                              capture_output=True, text=True, cwd=REPO, timeout=120,
                              env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 1, (command, done.stderr)
        assert "Traceback" not in done.stderr
        assert "model_type 'gpt2' is not a Llama-family model" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) <= 2, done.stderr


def test_transposed_weights_are_bound_transposed(tmp_path):
    """`snapkv.transposed` arguments: parsed from the signature, bound as a contiguous
    transposed copy of the checkpoint tensor (the plain one stays mapped), and refused with the
    tensor's name when the shape does not fit or the tensor is not 2-D."""
    text = ('func.func @prefill(%ids: tensor<1x?xi64>, %w: tensor<8x16xf32> {snapkv.weight = '
            '"model.embed_tokens.weight", snapkv.transposed}, %e: tensor<16x8xf32> '
            '{snapkv.weight = "model.embed_tokens.weight"}) -> tensor<1xf32> {\n'
            '  %c = arith.constant dense<0.0> : tensor<1xf32>\n'
            '  return %c : tensor<1xf32>\n}')
    refs = [ref for ref, _ in runtime.signature(text, "prefill").weight_args]
    assert refs == [WeightRef("model.embed_tokens.weight", True),
                    WeightRef("model.embed_tokens.weight", False)]
    ckpt = Checkpoint(make_checkpoint(tmp_path / "m"))
    name = "model.embed_tokens.weight"
    arrays, _ = weight_arrays(ckpt, {WeightRef(name, True): ((8, 16), "f32"),
                                     WeightRef(name): ((16, 8), "f32"),
                                     "model.norm.weight": ((8,), "f32")})
    stored = ckpt.array(name)
    transposed = arrays[WeightRef(name, True)]
    assert transposed.flags["C_CONTIGUOUS"] and np.array_equal(transposed, stored.T)
    assert np.shares_memory(arrays[WeightRef(name)], stored)
    with pytest.raises(CheckpointError, match=r"model.embed_tokens.weight \(transposed\): the "
                                              r"checkpoint holds \[16, 8\], the module takes "
                                              r"\[16, 8\]"):
        weight_arrays(ckpt, {WeightRef(name, True): ((16, 8), "f32"),
                             "model.norm.weight": ((8,), "f32")})
    with pytest.raises(CheckpointError, match="takes it transposed, but the checkpoint holds "
                                              r"\[8\] \(not 2-D\)"):
        weight_arrays(ckpt, {name: ((16, 8), "f32"),
                             WeightRef("model.norm.weight", True): ((8,), "f32")})


def _resident_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_a_copied_weight_releases_its_mapped_pages(tmp_path):
    """A transposed weight is a copy: weight_arrays drops the mapped pages it was read from
    (Checkpoint.release), so the weight is resident once, not twice; a view of the same
    tensor still reads the right values (the pages come back from the file)."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc/self/status (Linux) to read the resident set")
    rows, cols = 2048, 4096  # 32 MiB of f32
    big = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    name = "model.embed_tokens.weight"
    ckpt = Checkpoint(make_checkpoint(tmp_path / "m", tensors={name: ("F32", big)},
                                      config={**CONFIG, "vocab_size": rows,
                                              "hidden_size": cols}))
    del big
    view = ckpt.array(name)
    assert float(view.sum(dtype=np.float64)) > 0  # every page of the mapping resident
    before = _resident_kib()
    arrays, _ = weight_arrays(ckpt, {WeightRef(name, True): ((cols, rows), "f32")})
    after = _resident_kib()
    # The transposed copy (32 MiB) came in and the mapped pages (32 MiB) went out.
    assert after - before < 8 * 1024, (before, after)
    assert np.array_equal(arrays[WeightRef(name, True)][:, 5], view[5])
