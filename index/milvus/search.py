"""The two searches a :class:`index.milvus.store.MilvusStore` sends Milvus: nearest vectors
(``dense``) and BM25 over the analysed text; each returns every query's hits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from index.hybrid.analysis import analyzed
from index.milvus.schema import SPARSE_FIELD, bm25_query, hit
from index.store import Hit


def dense_search(client: Any, collection: str, xq: np.ndarray, k: int, expr: str,
                 fields: list[str], consistency: str, timeout: float, ef: int | None,
                 hybrid: bool, with_vectors: bool, multi_tenant: bool = False
                 ) -> list[list[Hit]]:
    """The ``k`` nearest of each row of ``xq``; ``ef`` for an HNSW index."""
    params: dict[str, Any] = {"metric_type": "IP"}
    if ef is not None:
        params["params"] = {"ef": ef}
    # a hybrid collection has two vector fields, so the search must name its own
    field = {"anns_field": "vector"} if hybrid else {}
    res = client.search(collection, data=[row.tolist() for row in xq], limit=k, filter=expr,
                        output_fields=fields, search_params=params,
                        consistency_level=consistency, timeout=timeout, **field)
    return [[hit(h, with_vectors, "dense", multi_tenant) for h in row] for row in res]


def bm25_search(client: Any, collection: str, query_text: Sequence[str], analysed: bool,
                k: int, expr: str, fields: list[str], consistency: str, timeout: float,
                with_vectors: bool, multi_tenant: bool = False) -> list[list[Hit]]:
    """Each query's BM25 hits; a query with no term left after analysis has none.
    ``analysed``: the collection has the stemmed copy of its text (queries are analysed
    the same way), else its queries only lose their stop words."""
    queries = ([analyzed(t) for t in query_text] if analysed
               else [bm25_query(t) for t in query_text])
    asked = [i for i, q in enumerate(queries) if q.strip()]
    out: list[list[Hit]] = [[] for _ in queries]
    if not asked:
        return out
    res = client.search(collection, data=[queries[i] for i in asked], anns_field=SPARSE_FIELD,
                        limit=k, filter=expr, output_fields=fields,
                        search_params={"metric_type": "BM25"}, consistency_level=consistency,
                        timeout=timeout)
    for i, row in zip(asked, res, strict=True):
        out[i] = [hit(h, with_vectors, "bm25", multi_tenant) for h in row]
    return out
