"""Results: the cache of per-prompt results (one JSON file per cell), and the Wilson interval
of a cell's accuracy."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Dict, Optional

import numpy as np


def wilson(correct: int, n: int, z: float = 1.959964) -> tuple:
    """The 95 % Wilson score interval of `correct` successes in `n` trials."""
    if n == 0:
        return (None, None)
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, float(centre - half)), min(1.0, float(centre + half)))


def default_cache_dir() -> Path:
    if os.environ.get("SNAPKV_EVAL_CACHE"):
        return Path(os.environ["SNAPKV_EVAL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "snapkv" / "eval"


class ResultCache:
    """One JSON file per (model, method options, length, capacity, seed, variant, window,
    generator, compiler): {"key": ..., "samples": {index: result}, "decode_ms": ...}."""

    def __init__(self, directory: Optional[Path], enabled: bool = True):
        self.directory = Path(directory) if directory else default_cache_dir()
        self.enabled = enabled
        self._files: Dict[str, dict] = {}

    def _name(self, key: dict) -> str:
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]

    def entry(self, key: dict) -> dict:
        name = self._name(key)
        if name not in self._files:
            data = {"key": key, "samples": {}, "decode_ms": None}
            path = self.directory / f"{name}.json"
            if self.enabled and path.is_file():
                try:
                    loaded = json.loads(path.read_text())
                    if loaded.get("key") == key:
                        data = loaded
                except (OSError, ValueError):
                    pass  # unreadable: recomputed and rewritten
            self._files[name] = data
        return self._files[name]

    def save(self, key: dict):
        if not self.enabled:
            return
        name = self._name(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            staged = self.directory / f".{name}.{os.getpid()}"
            staged.write_text(json.dumps(self._files[name]))
            os.replace(staged, self.directory / f"{name}.json")
        except OSError:
            pass  # a cache that cannot be written only costs time
