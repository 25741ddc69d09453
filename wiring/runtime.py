"""Process-wide settings for torch's CPU runtime, applied before torch is imported.

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

DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64"}


SERVING = {**DEFAULTS, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"}


def configure(serving: bool = False) -> None:
    """Set the defaults above unless already set. Call before the first ``import torch``."""
    for key, value in (SERVING if serving else DEFAULTS).items():
        os.environ.setdefault(key, value)
