"""snapkv.runtime.cache: LRU eviction, and libraries named by what is compiled (not by when
snapkv-opt was built)."""

import os
import shutil

from conftest import require_aot_tools
from runtime_inputs import OWNERSHIP

from snapkv import runtime
from snapkv.mlirgen import tools


def test_lru_eviction(tmp_path):
    """Oldest first until the libraries fit; the one just built stays; index files of deleted
    libraries go too."""
    sizes = {"a": 400, "b": 300, "c": 200, "d": 100}
    for age, (name, size) in enumerate(sizes.items()):
        (tmp_path / f"{name}.so").write_bytes(b"x" * size)
        (tmp_path / f"{name}.json").write_text("{}")
        (tmp_path / f"key-{name}.key").write_text(f"{name}.so")
        os.utime(tmp_path / f"{name}.so", (1000 + age, 1000 + age))  # a is the oldest
    deleted = runtime.evict(tmp_path, 500, keep=[tmp_path / "a.so"])
    assert sorted(p.name for p in tmp_path.glob("*.so")) == ["a.so", "d.so"]
    assert {p.name for p in deleted} == {"b.so", "b.json", "c.so", "c.json", "key-b.key",
                                         "key-c.key"}
    assert sorted(p.name for p in tmp_path.glob("*.key")) == ["key-a.key", "key-d.key"]


def test_cache_key_is_what_is_compiled_not_when_snapkv_opt_was_built(tmp_path, monkeypatch):
    """A copy of snapkv-opt (new path and mtime, same bytes) finds the library through the
    index; a different snapkv-opt binary that lowers to the same LLVM IR reuses the library
    without running clang."""
    require_aot_tools()
    cache = tmp_path / "cache"
    first = runtime.compile_library(OWNERSHIP, cache_dir=cache)
    assert not first.from_cache
    copy = tmp_path / "snapkv-opt"
    shutil.copy2(tools()[0], copy)
    os.utime(copy, (1, 1))
    monkeypatch.setenv("SNAPKV_OPT", str(copy))
    again = runtime.compile_library(OWNERSHIP, cache_dir=cache)
    assert again.from_cache and again.path == first.path
    with open(copy, "ab") as handle:
        handle.write(b"\0")  # other bytes, same behaviour
    os.utime(copy, (2, 2))
    rebuilt = runtime.compile_library(OWNERSHIP, cache_dir=cache, verbose=True)
    assert rebuilt.from_cache and rebuilt.path == first.path
    assert len(list(cache.glob("*.key"))) == 2 and len(list(cache.glob("*.so"))) == 1
