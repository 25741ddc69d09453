"""Milvus Lite's HNSW graphs over bf16 vectors (:mod:`index.milvus.lite.graphs`): the
saved graph holds bf16 codes, and a hit's score is still the exact inner product of the
float32 vectors, as brute force gives it; a float32 graph of an older file is searched too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from lite_graph_files import unit_vectors, wait_for_graphs

from index import MilvusStore
from index.milvus.lite import graphs as lite_graphs
from index.milvus.lite import speed as lite_speed
from index.store import Item


def _filled(path: Path, vectors: np.ndarray) -> MilvusStore:
    """A store on ``path`` whose one segment has its graph saved."""
    store = MilvusStore(str(path))
    store.create("c", vectors.shape[1])
    store.upsert("c", [Item(id=str(i), vector=v) for i, v in enumerate(vectors)])
    store.flush("c")
    store.search("c", vectors[:1], 1)  # loaded: the worker builds the graph
    assert wait_for_graphs(path, vector_only=True), "no graph was saved for the segment"
    return store


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
    vectors = unit_vectors(3000, seed=3, dim=64)
    store = _filled(path, vectors)
    queries = unit_vectors(50, seed=4, dim=64)
    hits = store.search("c", queries, 10)
    store.close(seal=False)
    server_manager_instance.release_server(str(path))

    graph = faiss.read_index(str(wait_for_graphs(path, vector_only=True)[0]))
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
    vectors = unit_vectors(6, seed=5, dim=4)
    queries = unit_vectors(2, seed=6, dim=4)
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


def test_a_graph_search_in_a_bitmap_of_rows_finds_what_lites_does() -> None:
    """:func:`lite_graphs.search` (the rows in scope as a bitmap, faiss searched directly)
    finds the hits Lite's own ``FaissHnswIndex.search`` (a set of their ids) finds on the
    same graph, only rows in scope, scored exactly; none in scope, none found."""
    from milvus_lite.index.faiss_hnsw import FaissHnswIndex

    vectors = unit_vectors(3000, seed=7, dim=32)
    index = lite_graphs.build(FaissHnswIndex, vectors, "IP", {"M": 12, "efConstruction": 40})
    assert lite_graphs.approximate(index)
    queries = unit_vectors(20, seed=8, dim=32)
    valid = np.random.default_rng(9).random(len(vectors)) < 0.3
    for mask in (valid, None):
        ids, dists = lite_graphs.search(index, vectors, queries, 10, mask, {"ef": 48})
        want, _ = index.search(queries, 10, valid_mask=mask, params={"ef": 48})
        assert np.array_equal(np.sort(ids, axis=1), np.sort(want, axis=1))
        assert (ids >= 0).all()
        if mask is not None:
            assert mask[ids].all()
        exact = -np.einsum("qd,qkd->qk", queries, vectors[ids])
        np.testing.assert_allclose(dists, exact, atol=1e-6)
        assert (np.diff(dists, axis=1) >= 0).all()
    ids, dists = lite_graphs.search(index, vectors, queries, 10, np.zeros(3000, bool), None)
    assert (ids == -1).all() and np.isinf(dists).all()
    with pytest.raises(ValueError, match="valid_mask length"):
        lite_graphs.search(index, vectors, queries, 10, np.ones(5, bool), None)


def _low_rank(n: int, seed: int, dim: int = 64, rank: int = 16) -> np.ndarray:
    """``n`` unit vectors whose energy lies mostly in ``rank`` of their ``dim`` directions
    (as an encoder's does), with a little in every other."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((dim, dim)))[0][:, :rank]
    x = rng.standard_normal((n, rank)) @ basis.T + 0.08 * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _link_dims(vectors: np.ndarray) -> int:
    """How many dimensions a graph of ``vectors`` chooses its links in."""
    basis = lite_graphs.link_basis(vectors)
    return int(vectors.shape[1]) if basis is None else int(basis.shape[1])


def test_a_graphs_links_are_chosen_in_fewer_dimensions_only_where_its_energy_lies() -> None:
    structured = _low_rank(6000, seed=10)
    assert _link_dims(structured) <= 0.6 * 64  # 16 directions hold most of it
    assert _link_dims(unit_vectors(6000, seed=11, dim=64)) == 64  # flat spectrum
    assert _link_dims(structured[:1000]) == 64  # too few rows to pay
    basis = lite_graphs.link_basis(structured)
    assert basis is not None
    np.testing.assert_allclose(basis.T @ basis, np.eye(basis.shape[1]), atol=1e-5)


def test_a_graph_linked_in_fewer_dimensions_finds_what_a_full_one_finds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Links chosen over the projection, the graph holds and walks the full bf16 vectors:
    the same kind of index as before (saved and read back unchanged), hits scored exactly,
    as many of the exact top 10 found as a graph linked in every dimension finds."""
    import faiss
    from milvus_lite.index.faiss_hnsw import FaissHnswIndex

    both = _low_rank(6050, seed=12)
    vectors, queries = both[:6000], both[6000:]
    truth = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    params = {"M": 12, "efConstruction": 60}

    def recall(index: object) -> float:
        ids, dists = lite_graphs.search(index, vectors, queries, 10, None, {"ef": 48})
        np.testing.assert_allclose(dists, -np.einsum("qd,qkd->qk", queries, vectors[ids]),
                                   atol=1e-6)
        return float(np.mean([len(set(ids[q]) & set(truth[q])) / 10
                              for q in range(len(queries))]))

    linked = lite_graphs.build(FaissHnswIndex, vectors, "IP", params)
    graph = linked._index
    assert isinstance(graph, faiss.IndexHNSWSQ) and graph.ntotal == len(vectors)
    assert faiss.downcast_index(graph.storage).code_size == 2 * 64  # full bf16 vectors
    path = tmp_path / "g.idx"
    faiss.write_index(graph, str(path))
    sp = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
    sp.efSearch = 48
    assert np.array_equal(faiss.read_index(str(path)).search(queries, 10, params=sp)[1],
                          graph.search(queries, 10, params=sp)[1])
    monkeypatch.setattr(lite_graphs, "LINK_ENERGY", 2.0)  # every dimension
    full = lite_graphs.build(FaissHnswIndex, vectors, "IP", params)
    found = recall(linked)
    assert found >= 0.9
    assert found >= recall(full) - 0.02
