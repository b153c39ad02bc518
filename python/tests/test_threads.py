"""The compiled model gives the same bits on any number of OpenMP threads.

``--snapkv-cpu-pipeline`` splits a model's matmuls and attention over OpenMP threads
(``snapkv-parallelize``) as well as the select's tiles; only parallel loops are split and the
reduction blocks run in order, so the thread count must not change a single bit of the
logits or of the compacted caches.
"""

import ctypes
import os
from pathlib import Path

import numpy as np
from conftest import require_aot_tools

from snapkv import hf, runtime

MODEL = Path(__file__).resolve().parents[2] / "models" / "retrieval-llama"


def test_prefill_and_decode_are_bit_identical_on_one_and_two_threads():
    require_aot_tools()
    checkpoint = hf.Checkpoint(MODEL)
    exported = hf.export(checkpoint)
    # hidden 256: the projections go to the threads in four blocks of 64 columns.
    text = hf.rewrite(exported.text, hf.Compaction(window=16, capacity=64))
    model = runtime.CompiledModel(text, weights=checkpoint,
                                  max_positions=exported.meta["max_position_embeddings"])
    # The libomp the compiled library uses (already loaded with it).
    omp = ctypes.CDLL("libomp.so.5", mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    vocab = exported.meta["config"]["vocab_size"]
    ids = np.random.default_rng(3).integers(0, vocab, (1, 333))
    results = {}
    try:
        for threads in (2, 1):
            omp.omp_set_num_threads(threads)
            assert omp.omp_get_max_threads() == threads
            logits, caches = model.prefill(ids)
            step, _ = model.decode(int(np.argmax(logits[0, -1])), ids.shape[1], caches)
            results[threads] = [logits, *caches, step]
    finally:
        omp.omp_set_num_threads(os.cpu_count() or 1)
    assert results[2][1].shape[2] == 64  # the compacted cache
    for two, one in zip(results[2], results[1]):
        assert two.tobytes() == one.tobytes()
