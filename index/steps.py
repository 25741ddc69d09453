"""The steps every backend takes around its own work, written once (issue 69, item 3): the
checks that open a create, a write and a search, and hybrid's two searches, each
``candidates(k)`` deep, fused. A backend (:mod:`index.milvus.store`, :mod:`index.faiss.store`)
keeps what is its own: where a collection lives, how it searches one side, how it stores
rows."""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace

import numpy as np

from index.aliases import check_create
from index.hybrid.fusion import candidates, check_fusion, fuse
from index.hybrid.relevance import MEET_DEPTH, distinct_terms, scattered
from index.store import (
    CollectionInfo,
    EncoderInfo,
    Hit,
    Item,
    as_matrix,
    check_collection_name,
    check_encoder,
    check_item,
    check_search_args,
    dedupe_last,
    resolve_mode,
)
from index.tenancy import check_tenant

Dense = Callable[[np.ndarray, int], list[list[Hit]]]  # (queries (nq, d), depth) -> hits
# The query vectors (nq, d), or a function that waits for them while they are being encoded
Vectors = np.ndarray | Callable[[], np.ndarray]
Sparse = Callable[[Sequence[str], int], list[list[Hit]]]  # (query texts, depth) -> hits
# hybrid's BM25 side runs here while the caller's thread runs the dense side
_SIDES = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="qkv-bm25")


def check_new(collection: str, dim: int, encoder: EncoderInfo | None,
              aliases: dict[str, str]) -> None:
    """Before a collection is made: a valid name that no alias holds, a dimension, and an
    encoder (when named) that makes it."""
    check_collection_name(collection)
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if encoder is not None and encoder.dim != dim:
        raise ValueError(f"encoder {encoder.name!r} makes dim {encoder.dim}, not {dim}")
    check_create(aliases, collection)


def writable(info: CollectionInfo, items: Sequence[Item], encoder: EncoderInfo | None
             ) -> tuple[list[Item], np.ndarray]:
    """Before a write: the collection's encoder, the last of duplicate ids, each item's
    sizes and tenant checked; the items to write and their vectors as one float32 matrix
    (``ValueError`` for a wrong dimension or a vector that is not finite)."""
    check_encoder(info, encoder)
    kept = dedupe_last(items)
    for it in kept:
        check_item(it)
        check_tenant(info, it.tenant)
    if not kept:
        return [], np.zeros((0, info.dim), np.float32)
    return kept, as_matrix(np.stack([it.vector for it in kept]), info.dim)


def check_search(k: int, consistency: str, fusion: str, dense_weight: float) -> None:
    """The arguments of a search that need no collection: checked before it is opened."""
    check_search_args(k, consistency)
    check_fusion(fusion, dense_weight)


def search(info: CollectionInfo, xq: Vectors, k: int, *, encoder: EncoderInfo | None,
           tenant: str | None, mode: str | None, query_text: Sequence[str] | None,
           fusion: str, dense_weight: float, dense: Dense, bm25: Sparse,
           together: bool = True) -> list[list[Hit]]:
    """A search's shared steps (after :func:`check_search`): the collection's encoder and
    tenant, the query matrix, the mode (:func:`index.store.resolve_mode`), then the
    backend's ``dense`` and ``bm25`` searches, ``k`` deep for one side alone and
    ``candidates(k)`` deep each for hybrid, fused per query (:func:`index.hybrid.fusion.
    fuse`). ``xq`` given as a function that waits for the vectors (with ``query_text``,
    one per query): the BM25 side starts before them, while the queries are encoded.

    ``together``: hybrid's two sides at once, BM25 on a thread of its own (a server's
    answers leave the GIL); else one after the other in this thread, BM25 first (still while
    the queries are encoded), for an in-process store whose sides are mostly Python and
    short calls that leave the GIL (faiss, numpy): there, two threads taking the GIL from
    each other were slower than one after the other. At 522,000 documents in Lite, through
    ``qkv serve`` (the search alone then in turns, bench/scale.py's queries, Intel Xeon,
    throwaway runs): hybrid p50 12.2, 12.7 ms one after the other against 14.4, 14.0 at once."""
    check_encoder(info, encoder)
    check_tenant(info, tenant)
    if callable(xq) and query_text is None:
        xq = xq()  # no BM25 side to start meanwhile
    pending = xq if callable(xq) else None
    matrix = as_matrix(xq, info.dim) if not callable(xq) else None

    def vectors() -> np.ndarray:
        if pending is not None:
            return as_matrix(pending(), info.dim)
        assert matrix is not None
        return matrix

    nq = len(matrix) if matrix is not None else len(query_text or ())
    mode = resolve_mode(info, mode, query_text, nq)
    if nq == 0:
        return []
    if mode == "dense":
        return dense(vectors(), k)
    assert query_text is not None  # resolve_mode checked it
    if mode == "bm25":
        return bm25(query_text, k)
    depth = candidates(k)
    if together:  # BM25 on a thread of its own, with the caller's context
        sparse = _SIDES.submit(contextvars.copy_context().run, bm25, query_text, depth)
        try:
            near = dense(vectors(), depth)
        except BaseException:
            wait([sparse])  # no search left running behind the dense side's error
            raise
        far = sparse.result()
    else:
        far = bm25(query_text, depth)
        near = dense(vectors(), depth)
    return [_scattered(fuse(d, b, k, fusion, dense_weight), text, b)
            for d, b, text in zip(near, far, query_text, strict=True)]


def _scattered(hits: list[Hit], query: str, bm25: Sequence[Hit]) -> list[Hit]:
    """Fused ``hits`` with whether the BM25 side's best texts hold the query's terms only
    apart, never two in one (:func:`index.hybrid.relevance.scattered`): what its hits'
    relevance asks of the query."""
    apart = scattered(distinct_terms(query), (h.text for h in bm25[:MEET_DEPTH]))
    return [replace(h, scattered=apart) for h in hits]
