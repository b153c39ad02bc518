"""The ahead-of-time runtime for exported model modules (``@prefill`` + ``@decode``):
:class:`CompiledModel` compiles a module's text once into a shared library and calls it in
process with ctypes, so a generation loop does not pay ``mlir-runner``'s JIT per call.
Errors are exceptions, never a dead process. Needs numpy and the tools only (no torch).

One concern per module:

* :mod:`.signatures` -- everything read from a module's text: argument and result types,
  callees, tensor types, entry points that only call (:func:`signature`,
  :class:`TensorType`, :class:`Signature`, :class:`GlueFunction`);
* :mod:`.cache` -- the compile cache: where it is, what names a library, LRU eviction;
* :mod:`.build` -- compiling a module into a cached ``.so`` with snapkv-opt,
  snapkv-translate and clang (:func:`compile_library`);
* :mod:`.limits` -- memory checks before a call (:class:`ResourceLimitError`);
* :mod:`.metadata` -- what the JSON next to an exported module says (its checkpoint,
  ``max_position_embeddings``);
* :mod:`.memref` -- the ctypes memref ABI: one compiled function called on numpy arrays
  (:class:`CompiledFunction`, :class:`CompiledCheckError`);
* :mod:`.glue` -- entry points that only call, run from Python (:class:`GlueRunner`);
* :mod:`.kvcache` -- caches a decode step writes in place (:class:`KVCache`; ragged,
  ``budget=adaptive``: :class:`RaggedKVCache`; many sequences' caches for one batched
  decode step: :class:`KVPool`);
* :mod:`.model` -- a prefill/decode model and greedy generation (:class:`CompiledModel`);
* :mod:`.__main__` -- the command line, ``python -m snapkv.runtime MODULE.mlir``.
"""

from .build import DEFAULT_CFLAGS, PIPELINE, RUNNER_VERSION, Library, compile_library
from .cache import cache_limit_bytes, default_cache_dir, evict
from .glue import GlueRunner
from .kvcache import KVCache, KVPool, RaggedKVCache
from .limits import (
    ResourceLimitError,
    available_memory,
    check_memory,
    growth,
    largest_tensor,
)
from .memref import CompiledCheckError, CompiledFunction, descriptor_type
from .metadata import check_checkpoint, checkpoint_of, max_positions_of
from .model import CompiledModel, bind_weights, check_token_ids
from .signatures import (
    GlueFunction,
    Signature,
    TensorType,
    callees,
    glue_function,
    signature,
    tensor_types,
    without_glue,
)

__all__ = [
    "DEFAULT_CFLAGS", "PIPELINE", "RUNNER_VERSION", "CompiledCheckError", "CompiledFunction",
    "CompiledModel", "GlueFunction", "GlueRunner", "KVCache", "KVPool", "Library", "RaggedKVCache",
    "bind_weights",
    "ResourceLimitError",
    "Signature", "TensorType", "available_memory", "cache_limit_bytes", "callees",
    "check_checkpoint", "check_memory", "check_token_ids", "checkpoint_of", "compile_library",
    "default_cache_dir", "descriptor_type", "evict", "glue_function",
    "growth", "largest_tensor", "max_positions_of", "signature", "tensor_types",
    "without_glue",
]
