"""The two searches a :class:`index.milvus.store.MilvusStore` sends Milvus: nearest vectors
(``dense``) and BM25 over the analysed text; each returns every query's hits. Given
``engine`` (a Lite collection served in this process), each is asked of it directly, and
through the client only if that fails (:mod:`index.milvus.lite.direct`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from index.hybrid.analysis import analyzed
from index.milvus.lite import direct as lite_direct
from index.milvus.schema import SPARSE_FIELD, bm25_query, hit
from index.store import Hit

log = logging.getLogger(__name__)


def dense_search(client: Any, collection: str, xq: np.ndarray, k: int, expr: str,
                 fields: list[str], consistency: str, timeout: float, ef: int | None,
                 hybrid: bool, with_vectors: bool, multi_tenant: bool = False,
                 engine: Any = None) -> list[list[Hit]]:
    """The ``k`` nearest of each row of ``xq``; ``ef`` for an HNSW index."""
    params: dict[str, Any] = {"metric_type": "IP"}
    if ef is not None:
        params["params"] = {"ef": ef}
    # a hybrid collection has two vector fields, so the search must name its own
    field = {"anns_field": "vector"} if hybrid else {}
    data = [row.tolist() for row in xq]
    res = _direct(engine, data, k, expr, fields, field.get("anns_field"), params)
    if res is None:
        res = client.search(collection, data=data, limit=k, filter=expr,
                            output_fields=fields, search_params=params,
                            consistency_level=consistency, timeout=timeout, **field)
    return [[hit(h, with_vectors, "dense", multi_tenant) for h in row] for row in res]


def _direct(engine: Any, data: list[Any], k: int, expr: str, fields: list[str],
            anns_field: str | None, params: dict[str, Any]) -> Any:
    """The search asked of the engine directly; None without one, or when it failed."""
    if engine is None:
        return None
    try:
        return lite_direct.search(engine, data, k, expr, fields, anns_field,
                                  params["metric_type"], params.get("params") or {})
    except Exception as e:  # the client's call says it the way the store maps
        log.debug("direct Milvus Lite search failed, going through gRPC: %s", e)
        return None


def bm25_search(client: Any, collection: str, query_text: Sequence[str], analysed: bool,
                k: int, expr: str, fields: list[str], consistency: str, timeout: float,
                with_vectors: bool, multi_tenant: bool = False, engine: Any = None
                ) -> list[list[Hit]]:
    """Each query's BM25 hits; a query with no term left after analysis has none.
    ``analysed``: the collection has the stemmed copy of its text (queries are analysed
    the same way), else its queries only lose their stop words."""
    queries = ([analyzed(t) for t in query_text] if analysed
               else [bm25_query(t) for t in query_text])
    asked = [i for i, q in enumerate(queries) if q.strip()]
    out: list[list[Hit]] = [[] for _ in queries]
    if not asked:
        return out
    data = [queries[i] for i in asked]
    res = _direct(engine, data, k, expr, fields, SPARSE_FIELD, {"metric_type": "BM25"})
    if res is None:
        res = client.search(collection, data=data, anns_field=SPARSE_FIELD, limit=k,
                            filter=expr, output_fields=fields,
                            search_params={"metric_type": "BM25"},
                            consistency_level=consistency, timeout=timeout)
    for i, row in zip(asked, res, strict=True):
        out[i] = [hit(h, with_vectors, "bm25", multi_tenant) for h in row]
    return out
