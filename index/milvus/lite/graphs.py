"""Milvus Lite's HNSW graphs built over bf16 copies of the vectors, their hits scored exactly.

Building the graphs is the largest cost of ``qkv index`` into Lite after the encoder: 15 of
the 61 s of 100,000 documents, all of it at the close (Intel Xeon, 2 cores). Most of a
build is reading vectors at random to compare them; Lite's ``IndexHNSWFlat`` keeps them as
float32 (1 KB a vector at 256 dims), ``faiss.IndexHNSWSQ`` with ``QT_bf16`` half that. On
98,000 of the workload's vectors (M 20, efConstruction 100, 2 threads; 1,000 held-out
texts as queries, ef 64, a throwaway script on the Intel Xeon): built in 9.5 s against
15.2 s, recall@10 of exact search 0.923 against 0.922, 145 against 205 µs a search.

A bf16 graph's scores are bf16 products, not the vectors': :func:`rescored` puts the exact
ones (from the segment's float32 vectors, as brute force computes them) in their place,
so a hit's distance is what it was, and what relevance and calibration read. Only the
ranking inside one segment's candidates comes from the approximate products, as the graph
already chose them approximately.

The links are chosen in fewer dimensions (:func:`link_basis`): where a segment's vectors
keep most of their energy in their top principal directions, as the shipped encoder's do
(89 % in 128 of its 256), the graph is built over their projection onto those directions
(uncentred, so inner products are kept, not distances to a mean), and its links are then
given to a graph that holds the full bf16 vectors, which every search walks and scores.
On 98,300 of ``bench/ingest.py``'s vectors (M 20, efConstruction 100, 2 threads, a
throwaway script on the AVX2-only AMD EPYC): built in 15.5 and 18.4 s against 24.2 and
22.3, recall@10 of exact search at ef 64 0.920 against 0.922; on 32,777 of them 3.8 and
4.7 s against 6.7 and 6.8, 0.9225 both. ``qkv index`` of those 100,000 documents, in turns
(the job's log): its close's graphs 8.9 and 12.7 s against 16.7 and 17.4, the job 99.3 and
92.8 s against 98.9 and 105.0 (the machine's noise is as large as the saving); recorded at
``c76456c``, 0.76 x the encoder alone (0.72 x at ``f7e2733``, the same morning). Vectors
with a flat spectrum (random ones, or an encoder whose output is whitened) keep their full
dimensions: their neighbours are not kept by a projection.

Only for qkv's own metric (inner product; any other keeps Lite's float32 graph), while the
fast search paths are installed (:mod:`index.milvus.lite.speed`, which checks
``FaissHnswIndex.build``'s source): a graph saved in a file made before stays float32, and
is searched as it always was.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ORIGINAL: dict[str, Any] = {}  # Lite's FaissHnswIndex.build, set by speed.install
# A graph's links are chosen in the fewest principal directions that hold this share of the
# vectors' energy (their summed squares), rounded up to a multiple of LINK_STEP...
LINK_ENERGY = 0.88
LINK_STEP = 16
# ...when that is at most this share of the dimensions (less saves too little to pay for
# the projection) and the segment has at least LINK_MIN_ROWS rows
LINK_MAX_SHARE = 0.6
LINK_MIN_ROWS = 4096


def build(cls: Any, vectors: np.ndarray, metric: str, params: dict | None = None) -> Any:
    """``FaissHnswIndex.build``: for inner product a graph over bf16 vectors
    (``IndexHNSWSQ``), with the same M and efConstruction; Lite's own for other metrics."""
    import faiss

    if metric != "IP" or vectors.ndim != 2:
        return ORIGINAL["build"].__get__(None, cls)(vectors, metric, params)
    n, dim = int(vectors.shape[0]), int(vectors.shape[1])
    params = params or {}
    bf16 = faiss.ScalarQuantizer.QT_bf16  # an enum value; faiss's stubs want the class
    m = int(params.get("M", 16))
    index = faiss.IndexHNSWSQ(dim, bf16, m, faiss.METRIC_INNER_PRODUCT)  # type: ignore[arg-type]
    index.hnsw.efConstruction = int(params.get("efConstruction", 200))
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if n > 0:
        basis = link_basis(vectors)
        if basis is not None:  # links chosen in fewer dimensions, then given to `index`
            links = faiss.IndexHNSWSQ(basis.shape[1], bf16, m,  # type: ignore[arg-type]
                                      faiss.METRIC_INNER_PRODUCT)
            links.hnsw.efConstruction = index.hnsw.efConstruction
            links.add(np.ascontiguousarray(vectors @ basis))
            index.hnsw = links.hnsw  # a copy of the graph: its levels, links, entry point
            index.storage.add(vectors)
            index.ntotal = index.storage.ntotal
        else:
            index.add(vectors)  # bf16 needs no training
    return cls(index, metric, n, dim)


def link_basis(vectors: np.ndarray) -> np.ndarray | None:
    """The (dim, d) orthonormal basis a graph's links are chosen in: the top ``d`` principal
    directions of ``vectors`` (uncentred: of their second moments, so the projections'
    inner products approximate theirs), from every fourth row; None: the full dimensions,
    where :data:`LINK_ENERGY` of their energy needs more than :data:`LINK_MAX_SHARE` of
    them, or the segment is smaller than :data:`LINK_MIN_ROWS`."""
    n, dim = int(vectors.shape[0]), int(vectors.shape[1])
    if n < LINK_MIN_ROWS:
        return None
    sample = vectors[::4].astype(np.float64)
    energy, directions = np.linalg.eigh(sample.T @ sample)  # ascending
    energy, directions = energy[::-1].clip(min=0.0), directions[:, ::-1]
    total = float(energy.sum())
    if total <= 0.0:
        return None
    held = np.cumsum(energy) / total
    d = int(np.searchsorted(held, LINK_ENERGY)) + 1
    d = min(dim, -(-d // LINK_STEP) * LINK_STEP)
    if d > LINK_MAX_SHARE * dim:
        return None
    return np.ascontiguousarray(directions[:, :d], dtype=np.float32)


def approximate(index: Any) -> bool:
    """Whether a segment's index scores with bf16 copies of the vectors (built here)."""
    import faiss

    inner = getattr(index, "_index", None)
    return isinstance(inner, faiss.IndexHNSWSQ) and getattr(index, "metric", None) == "IP"


def search(index: Any, vectors: np.ndarray, queries: np.ndarray, k: int,
           valid: np.ndarray | None, params: dict | None) -> tuple[np.ndarray, np.ndarray]:
    """A bf16 graph's ``k`` nearest rows to each query (only ``valid`` ones where given),
    :func:`rescored`: Lite's ``FaissHnswIndex.search`` without its loop over every hit in
    Python (whose distances the exact ones replace anyway), and with the rows in scope
    given to faiss as a bitmap rather than a set of their ids (built anew at every search)."""
    import faiss

    nq = len(queries)
    ids = np.full((nq, k), -1, dtype=np.int64)
    dists = np.full((nq, k), np.inf, dtype=np.float32)
    if index.num_vectors == 0 or k <= 0:
        return ids, dists
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    sp = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # not in the stubs
    sp.efSearch = int((params or {}).get("ef", 64))  # Lite's default
    bits = None
    if valid is not None:
        if valid.shape[0] != index.num_vectors:
            raise ValueError(f"valid_mask length {valid.shape[0]} != num_vectors "
                             f"{index.num_vectors}")
        if not valid.any():
            return ids, dists
        bits = np.packbits(valid, bitorder="little")  # kept alive through the search
        sel = faiss.IDSelectorBitmap(len(valid), faiss.swig_ptr(bits))
        sp.sel = sel
    _, found = index._index.search(queries, k, params=sp)
    return rescored(vectors, queries, found, dists)


def rescored(vectors: np.ndarray, queries: np.ndarray, ids: np.ndarray, dists: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The hits ``ids`` (−1 padding) of each query with their exact distances (−⟨q, x⟩,
    as Lite's brute force gives them), in ascending order, padding last."""
    ids, dists = ids.copy(), dists.copy()
    for q in range(len(queries)):
        found = ids[q] >= 0
        n = int(found.sum())
        if n == 0:
            continue
        hit = ids[q][found]
        exact = -(vectors[hit] @ queries[q]).astype(np.float32)
        order = np.argsort(exact, kind="stable")
        ids[q, :n], dists[q, :n] = hit[order], exact[order]
        ids[q, n:], dists[q, n:] = -1, np.inf
    return ids, dists
