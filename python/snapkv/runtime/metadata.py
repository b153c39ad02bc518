"""What the JSON files next to an exported module say about it: the checkpoint its weights
come from (:func:`checkpoint_of`), the architecture it was exported from
(:func:`check_checkpoint`) and its ``max_position_embeddings`` (:func:`max_positions_of`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Tuple


def check_checkpoint(model_path: os.PathLike, weights):
    """When `weights` is a Checkpoint and ``<stem>.json`` next to the module records the
    architecture it was exported from, a CheckpointError unless they are the same."""
    from ..frontend.checkpoint import Checkpoint

    if not isinstance(weights, Checkpoint):
        return
    try:
        expected = json.loads(Path(model_path).with_suffix(".json").read_text())["architecture"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    weights.check_architecture(expected, Path(model_path).name)


def checkpoint_of(model_path: os.PathLike):
    """The :class:`~snapkv.frontend.checkpoint.Checkpoint` that ``<stem>.json`` next to an
    exported module names (``snapkv export --hf`` writes it); ValueError if there is none."""
    from ..frontend.checkpoint import Checkpoint

    path = Path(model_path)
    meta = path.with_suffix(".json")
    try:
        data = json.loads(meta.read_text())
        directory = data["checkpoint"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{path} takes weights (snapkv.weight arguments), and {meta.name} "
                         f"next to it does not name the checkpoint they come from: pass the "
                         f"checkpoint directory") from None
    return Checkpoint(directory)


def max_positions_of(model_path: os.PathLike) -> Optional[Tuple[int, Path]]:
    """(max_position_embeddings, file it came from) for an exported model, from the JSON the
    exporter writes next to it (``tiny_llama.json`` lists the modules it describes under
    "files" and the config under "spec"), or from ``<stem>.json`` / ``config.json`` there (a
    HuggingFace config). None if no such file names it."""
    path = Path(model_path)
    candidates = [path.with_suffix(".json"), path.parent / "config.json",
                  *sorted(path.parent.glob("*.json"))]
    for candidate in candidates:
        try:
            data = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        files = data.get("files")
        describes = isinstance(files, dict) and path.name in files
        if candidate.name == "config.json" or candidate == path.with_suffix(".json") or \
                describes:
            for config in (data.get("spec"), data):
                if isinstance(config, dict) and \
                        isinstance(config.get("max_position_embeddings"), int):
                    return config["max_position_embeddings"], candidate
    return None
