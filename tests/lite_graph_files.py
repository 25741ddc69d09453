"""Milvus Lite's saved HNSW graph files, and the unit vectors that fill them, for the tests
of qkv's mends to Lite (``tests/index/test_lite_*.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def unit_vectors(n: int, seed: int, dim: int = 8) -> np.ndarray:
    """``n`` random unit vectors of ``dim`` dimensions."""
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def graph_files(path: Path, vector_only: bool = False) -> list[Path]:
    """The index files saved for collection ``c`` of the Lite file ``path`` (only its
    vector field's HNSW graphs, not BM25's, with ``vector_only``)."""
    files = sorted(path.glob("collections/c/partitions/*/indexes/*"))
    return [g for g in files if ".vector." in g.name] if vector_only else files


def wait_for_graphs(path: Path, vector_only: bool = False, timeout: float = 60.0
                    ) -> list[Path]:
    """:func:`graph_files` once there is one (Lite's worker saves them after a load or a
    flush), or none after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (files := graph_files(path, vector_only)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return files
