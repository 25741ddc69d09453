"""Milvus Lite's HNSW graphs over bf16 vectors (:mod:`index.milvus.lite.graphs`): the
saved graph holds bf16 codes, and a hit's score is still the exact inner product of the
float32 vectors, as brute force gives it; a float32 graph of an older file is searched too."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from index import MilvusStore
from index.milvus.lite import graphs as lite_graphs
from index.milvus.lite import speed as lite_speed
from index.store import Item


def _vector_graphs(path: Path) -> list[Path]:
    return sorted(g for g in path.glob("collections/c/partitions/*/indexes/*")
                  if ".vector." in g.name)


def _filled(path: Path, vectors: np.ndarray) -> MilvusStore:
    """A store on ``path`` whose one segment has its graph saved."""
    store = MilvusStore(str(path))
    store.create("c", vectors.shape[1])
    store.upsert("c", [Item(id=str(i), vector=v) for i, v in enumerate(vectors)])
    store.flush("c")
    store.search("c", vectors[:1], 1)  # loaded: the worker builds the graph
    deadline = time.monotonic() + 60
    while not _vector_graphs(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _vector_graphs(path), "no graph was saved for the segment"
    return store


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("bf16", [True, False])
def test_hits_of_a_graph_score_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       bf16: bool) -> None:
    import faiss
    from milvus_lite.server_manager import server_manager_instance

    monkeypatch.setattr(lite_speed, "HNSW_MIN_ROWS", 500)
    assert lite_speed.install()
    if not bf16:  # a graph as Lite builds it (files made before): float32
        from milvus_lite.index.faiss_hnsw import FaissHnswIndex

        monkeypatch.setattr(FaissHnswIndex, "build", lite_graphs.ORIGINAL["build"])
    path = tmp_path / "m.db"
    vectors = _unit(3000, 64, seed=3)
    store = _filled(path, vectors)
    queries = _unit(50, 64, seed=4)
    hits = store.search("c", queries, 10)
    store.close(seal=False)
    server_manager_instance.release_server(str(path))

    graph = faiss.read_index(str(_vector_graphs(path)[0]))
    if bf16:
        assert isinstance(graph, faiss.IndexHNSWSQ)
        storage = faiss.downcast_index(graph.storage)
        assert storage.sq.qtype == faiss.ScalarQuantizer.QT_bf16
        assert storage.code_size == 2 * vectors.shape[1]  # two bytes a dimension
        # what the graph alone scores: bf16 products, off by far more than float32 rounding
        sq, sq_ids = graph.search(queries, 10)
        assert np.abs(sq - np.einsum("qd,qkd->qk", queries, vectors[sq_ids])).max() > 1e-4
    else:
        assert isinstance(graph, faiss.IndexHNSWFlat)
    exact = queries @ vectors.T
    truth = np.argsort(-exact, axis=1)[:, :10]
    found = 0
    for q, row in enumerate(hits):
        assert len(row) == 10
        scores = [h.score for h in row]
        assert scores == sorted(scores, reverse=True)
        for h in row:  # the float32 product, not the graph's bf16 one
            assert abs(h.score - float(exact[q, int(h.id)])) < 1e-5
        found += len({int(h.id) for h in row} & set(truth[q].tolist()))
    assert found / truth.size >= 0.9


def test_rescored_orders_exact_distances_and_keeps_padding() -> None:
    vectors = _unit(6, 4, seed=5)
    queries = _unit(2, 4, seed=6)
    ids = np.array([[3, 1, 4, -1], [0, 5, -1, -1]], dtype=np.int64)
    dists = np.array([[-0.9, -0.8, -0.1, np.inf], [-0.5, -0.4, np.inf, np.inf]],
                     dtype=np.float32)
    got_ids, got = lite_graphs.rescored(vectors, queries, ids, dists)
    for q in range(2):
        n = int((ids[q] >= 0).sum())
        want = sorted((-(float(vectors[i] @ queries[q])), int(i)) for i in ids[q, :n])
        assert [int(i) for i in got_ids[q, :n]] == [i for _, i in want]
        assert np.allclose(got[q, :n], [d for d, _ in want], atol=1e-6)
        assert (got_ids[q, n:] == -1).all() and np.isinf(got[q, n:]).all()
