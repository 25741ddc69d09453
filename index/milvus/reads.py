"""Reads a :class:`index.milvus.store.MilvusStore` shares: strong reads of a collection's
rows by id for ``get``, ``scan`` and ``sample`` (every id after one, in id order; the rows
of a list of ids, a thousand a query), and the aliases."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from index.filters import quote
from index.milvus.lite import direct as lite_direct

log = logging.getLogger(__name__)
Call = Callable[[str, Callable[[Any], Any]], Any]  # MilvusStore._call
ROWS_PER_QUERY = 1000


def ids_after(call: Call, collection: str, after: str, timeout: float, engine: Any = None,
              expr: str = "") -> list[str]:
    """Every stored id that sorts after ``after`` (all for "") and matches the filter
    ``expr`` (none for ""), sorted (from ``engine``, a Lite collection served in this
    process, when it answers)."""
    if engine is not None:
        try:
            return sorted(k for k in lite_direct.keys(engine, expr) if k > after)
        except Exception as e:  # the client's query says it the way the store maps
            log.debug("direct Milvus Lite keys failed, going through gRPC: %s", e)
    where = f"id > {quote(after)}"
    rows = call("query ids", lambda c: c.query(
        collection, filter=f"({where}) and ({expr})" if expr else where,
        output_fields=["id"], consistency_level="Strong", timeout=timeout))
    return sorted(str(r["id"]) for r in rows)


def rows_of(call: Call, collection: str, ids: Sequence[str], fields: list[str],
            timeout: float, consistency: str = "Strong", engine: Any = None
            ) -> list[dict[str, Any]]:
    """The rows of those stored ids that exist, in no particular order (from ``engine``, a
    Lite collection served in this process, when it answers:
    :mod:`index.milvus.lite.direct`)."""
    if engine is not None:
        try:
            return lite_direct.get(engine, list(ids), fields)
        except Exception as e:  # the client's query says it the way the store maps
            log.debug("direct Milvus Lite get failed, going through gRPC: %s", e)
    out: list[dict[str, Any]] = []
    for start in range(0, len(ids), ROWS_PER_QUERY):
        expr = "id in [" + ", ".join(quote(k) for k in ids[start:start + ROWS_PER_QUERY]) + "]"
        out += call("query", lambda c, e=expr: c.query(  # type: ignore[misc]
            collection, filter=e, output_fields=fields, consistency_level=consistency,
            timeout=timeout))
    return out


def read_aliases(client: Any) -> dict[str, str]:
    """Every alias and the collection it points at."""
    out = {}
    for alias in client.list_aliases().get("aliases", []):
        try:
            out[alias] = str(client.describe_alias(alias)["collection_name"])
        except Exception as e:  # dropped since it was listed
            log.debug("alias %s: %s", alias, e)
    return out
