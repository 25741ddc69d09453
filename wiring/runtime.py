"""Process-wide settings: torch's CPU runtime, applied before torch is imported
(:func:`configure`), and the process's defaults from its settings (:func:`use`).

Long-running processes (``qkv index``, ``qkv serve``) encode batches of many shapes while
other threads (the store writer, the HTTP server) need the cores too:
- ``OMP_WAIT_POLICY=PASSIVE``: idle OpenMP workers sleep instead of spinning; with
  spinning workers the writer thread and Milvus Lite fought torch for the 2 cores here and
  encoding slowed ~10x.
- ``ONEDNN_PRIMITIVE_CACHE_CAPACITY=64``: oneDNN caches compiled kernels per shape (1024 by
  default); with the encoder's varying batch shapes that cache grew RSS by hundreds of MB
  over a 100k-doc job. 64 kept RSS flat here (≈670 MB after 60k docs, against ≈690 MB and
  still growing after 30k with the default) at the same speed.

A server (``qkv serve``) encodes batches of every size from 1 to 64 texts, so it keeps
oneDNN's default cache of 1024 kernels instead: with 64 it re-created kernels all the time
(10-s trial runs of /v1/embeddings with 32 clients here, not a recorded benchmark: 116
requests/s with 64 against 205 with 1024, at ~160 MB less RSS).

Values already in the environment win.
"""

from __future__ import annotations

import os
from typing import Any

DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64"}


SERVING = {**DEFAULTS, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"}


def configure(serving: bool = False) -> None:
    """Set the defaults above unless already set. Call before the first ``import torch``."""
    for key, value in (SERVING if serving else DEFAULTS).items():
        os.environ.setdefault(key, value)


def use(device: str | None = None, encoder_backend: str | None = None, no_bf16: bool = False,
        onnx_activations: str = "static", lite_fast_search: bool = True,
        graph_cache: str | None = None) -> None:
    """The process's defaults from its settings (``QKV_DEVICE``, ``QKV_ENCODER_BACKEND``,
    ``QKV_NO_BF16``, ``QKV_ONNX_ACTIVATIONS``, ``QKV_LITE_FAST_SEARCH``,
    ``QKV_GRAPH_CACHE``: fields of
    ``api.settings.Runtime``), handed to the rooms that use them, once, at the process's
    edge (the service's start, the ``qkv`` command). Nothing below reads the environment
    for them; an argument given to a function there still wins."""
    from encoder import graph_cache as graphs
    from encoder.device import Defaults as DeviceDefaults
    from encoder.onnx_graph import Defaults as BackendDefaults
    from encoder.onnx_graph import use_activations
    from index.milvus.lite import speed

    use_activations(onnx_activations)  # checked first: a refused value changes nothing
    DeviceDefaults.device, DeviceDefaults.bf16 = device or None, not no_bf16
    BackendDefaults.backend = encoder_backend or None
    speed.use(lite_fast_search)
    graphs.use(graph_cache)


def current() -> dict[str, Any]:
    """This process's defaults as :func:`use` takes them: what a worker process started
    elsewhere (a Ray actor) is handed, so it runs as the command that started it."""
    from encoder import graph_cache as graphs
    from encoder.device import Defaults as DeviceDefaults
    from encoder.onnx_graph import Defaults as BackendDefaults
    from index.milvus.lite import speed

    cache = graphs.Defaults.directory
    return {"device": DeviceDefaults.device, "encoder_backend": BackendDefaults.backend,
            "no_bf16": not DeviceDefaults.bf16,
            "onnx_activations": BackendDefaults.activations,
            "lite_fast_search": speed.wanted(),
            "graph_cache": str(cache) if cache is not None else None}
