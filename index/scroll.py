"""A collection read out page by page, as documents, and the documents a filter selects
(issue 72): what ``GET .../documents?cursor=``, ``DELETE .../documents`` by filter and
``qkv export`` (:func:`export`) share.

A page is the next ``limit`` documents in id order after a cursor (the last id of the page
before), that match a filter, among one tenant's in a multi-tenant collection. In a
collection with passages only the heads are listed, and each document comes back whole
(:func:`index.passages.read_many`); one being deleted is left out. Each page is read as the
collection is at that moment: a document written behind the cursor meanwhile is not seen,
one written ahead of it is.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import os
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from index import passages as long_docs
from index.filters import And, Filter
from index.store import CollectionInfo, Item, VectorStore

MAX_PAGE = 1000
EVERY = 2**62  # a limit no collection reaches


def selecting(info: CollectionInfo, filter: Filter | None) -> Filter | None:
    """The filter that selects documents: in a collection with passages, their heads."""
    if not info.passages:
        return filter
    heads = long_docs.count_filter()
    return heads if filter is None else And((heads, filter))


def matching(store: VectorStore, info: CollectionInfo, after: str | None, limit: int,
             filter: Filter | None = None, tenant: str | None = None) -> list[str]:
    """The ids of the next ``limit`` documents after ``after`` that match ``filter``."""
    return store.ids(info.name, after, limit, selecting(info, filter), tenant)


def all_matching(store: VectorStore, info: CollectionInfo, filter: Filter | None = None,
                 tenant: str | None = None) -> list[str]:
    """The ids of every document that matches ``filter``, in id order: one read."""
    return store.ids(info.name, None, EVERY, selecting(info, filter), tenant)


def page(store: VectorStore, info: CollectionInfo, after: str | None, limit: int,
         filter: Filter | None = None, tenant: str | None = None
         ) -> tuple[list[Item], str | None]:
    """The next ``limit`` documents after ``after`` that match ``filter``, whole, and the
    cursor of the page after them (None: this was the last)."""
    ids = matching(store, info, after, limit, filter, tenant)
    if info.passages:
        items = [it for it, _ in long_docs.read_many(store, info.name, ids, tenant)]
    else:
        items = store.get(info.name, ids, tenant)
    return items, (ids[-1] if len(ids) == limit else None)


def every(store: VectorStore, info: CollectionInfo, filter: Filter | None = None,
          tenant: str | None = None, size: int = MAX_PAGE) -> Iterator[list[Item]]:
    """Every document that matches, page by page: their ids read once, at the start (a
    document deleted since is left out, one written since is not there), then ``size``
    documents a read."""
    ids = all_matching(store, info, filter, tenant)
    for start in range(0, len(ids), size):
        chunk = ids[start:start + size]
        if info.passages:
            yield [it for it, _ in long_docs.read_many(store, info.name, chunk, tenant)]
        else:
            yield store.get(info.name, chunk, tenant)


def cursor_of(last_id: str | None) -> str | None:
    """The opaque cursor of a page that ended at ``last_id``."""
    if last_id is None:
        return None
    return base64.urlsafe_b64encode(last_id.encode()).decode().rstrip("=")


def after_of(cursor: str | None) -> str | None:
    """The last id a cursor names; ``ValueError`` for one no page gave."""
    if not cursor:
        return None
    try:
        return base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_",
                                validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("cursor: not one a page of documents gave (pass next_cursor as it "
                         "came)") from None


def export(store: VectorStore, info: CollectionInfo, path: Path, filter: Filter | None = None,
           tenant: str | None = None, vectors: bool = False,
           progress: Callable[[int], None] | None = None) -> int:
    """Write every document that matches to ``path``: JSON lines (``.jsonl``, gzipped with
    ``.jsonl.gz``; ``id``, ``text``, ``value``, ``metadata``, what ``qkv index
    --value-field value`` reads back) or Parquet (``.parquet``; the metadata as a JSON
    string), with each ``vector`` when asked. Written beside, then moved into place: the
    file is whole or not there. Returns the documents written."""
    kind = export_kind(path)
    part = path.with_name(path.name + ".part")
    n = 0
    rows: list[dict[str, Any]] = []
    try:
        with (gzip.open(part, "wt", encoding="utf-8") if kind == "jsonl.gz"
              else open(part, "w", encoding="utf-8") if kind == "jsonl"
              else nullcontext(None)) as out:
            for items in every(store, info, filter, tenant):
                for it in items:
                    row: dict[str, Any] = {"id": it.id, "text": it.text, "value": it.value,
                                           "metadata": it.metadata}
                    if vectors:
                        row["vector"] = [float(x) for x in it.vector]
                    if out is not None:
                        out.write(json.dumps(row, ensure_ascii=False) + "\n")
                    else:
                        rows.append(row | {"metadata": json.dumps(it.metadata)})
                n += len(items)
                if progress is not None:
                    progress(n)
        if kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            cols: dict[str, Any] = {k: [r[k] for r in rows]
                                    for k in ("id", "text", "value", "metadata")}
            schema = [pa.field(k, pa.string()) for k in cols]
            if vectors:
                cols["vector"] = [r["vector"] for r in rows]
                schema.append(pa.field("vector", pa.list_(pa.float32())))
            pq.write_table(pa.table(cols, schema=pa.schema(schema)), part)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return n


def export_kind(path: Path) -> str:
    """``jsonl``, ``jsonl.gz`` or ``parquet`` by the name's suffix; ``ValueError`` else."""
    name = path.name.lower()
    for kind in ("jsonl.gz", "jsonl", "parquet"):
        if name.endswith("." + kind):
            return kind
    raise ValueError(f"{path.name}: export to a .jsonl, .jsonl.gz or .parquet file")
