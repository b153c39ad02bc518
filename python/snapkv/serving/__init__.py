"""Serving many sequences with one compiled model (docs/serving.md).

* :mod:`.engine` -- :class:`Engine`: continuous batching under a K/V cache budget,
  ``generate(prompts)``, ``stream(prompt)``, sampling (:class:`SamplingParams`);
* :mod:`.loading` -- :func:`load_engine`: a known model, checkpoint directory or module,
  rewritten with SnapKV settings and compiled once; per-request settings (:class:`ModelSet`);
* :mod:`.text` -- prompts as text or chat messages, stop strings;
* :mod:`.openai_server` -- ``snapkv serve``: the OpenAI HTTP API over an engine.

    from snapkv import Engine
    engine = Engine.load("smollm2-135m-instruct", capacity=256)
    for done in engine.generate(["The capital of France is", "Name three colours."]):
        print(done.text)
"""

from .engine import (
    Completion,
    Delta,
    Engine,
    EngineStopped,
    QueueFull,
    Request,
    RequestError,
    SamplingParams,
    Served,
    Stats,
)
from .loading import LoadError, ModelSet, load_engine

__all__ = ["Completion", "Delta", "Engine", "EngineStopped", "LoadError", "ModelSet",
           "QueueFull", "Request", "RequestError", "SamplingParams", "Served", "Stats",
           "load_engine"]
