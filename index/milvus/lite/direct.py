"""Milvus Lite's engine called in this process, past its gRPC loopback.

Milvus Lite 3.x runs in the process that opens the file: pymilvus starts its gRPC server in a
thread, and every call goes from a ``MilvusClient`` over a local socket to that thread and
back. Packing rows into protobuf field data, parsing them again, and the same for every hit
of a search cost more than Lite's own work on short rows: 44 % of an upsert of 20,000 rows
(2.20 s through gRPC, 1.24 s direct) and 1.2-1.6 ms of each 100-deep search (5.3 against
3.7 ms dense, 3.8 against 2.6 ms BM25, on 100,000 rows) here (AMD EPYC, 2 cores; throwaway
scripts, the recorded figures are ``bench/scale.py``'s and ``bench/backup.py``'s).

So a store on a Lite file calls the engine's collection directly for its searches, its reads
of rows by id and its upserts: the same method the gRPC servicer calls with the same
arguments (the servicer adds nothing for these calls: no consistency, ranker or grouping),
and the same rows back (as pymilvus parses them: JSON fields as values, not text); an upsert
of whole rows calls the insert that the engine's upsert ends in (:func:`upsert`). Anything
else, and any call that fails, goes through gRPC as before, so errors keep their mapping
(:func:`index.milvus.conn.failure`) and a failed write its restart: a direct call that
raises is made again through gRPC (an upsert twice is the same upsert).

Its lists of keys (:func:`keys`: ``sample``, ``scan``, ``ids``) and its counts with a filter
(:func:`count`) take the engine's own query apart: the same candidates, filter and mask of
live rows, without building a record for each.

Only while qkv's fast search paths are installed (``QKV_LITE_FAST_SEARCH``, the Lite version
they were written for: :mod:`index.milvus.lite.speed`); ``tests/index/test_lite_direct.py``
holds the two ways equal.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from index.milvus.lite import speed
from index.milvus.lite.dense import NUMPY_VECTORS

log = logging.getLogger(__name__)


def collection(uri: str, name: str) -> Any | None:
    """The engine's collection ``name`` of the Lite file ``uri`` served in this process, or
    None (not served here, the fast paths off, no such collection: the caller goes through
    gRPC, which says why)."""
    if not speed.installed():
        return None
    try:
        from milvus_lite.server_manager import server_manager_instance

        served = server_manager_instance._servers.get(os.path.abspath(os.path.expanduser(uri)))
        return None if served is None else served[1].get_collection(name)
    except Exception as e:  # not opened yet, dropped, restarting: gRPC answers
        log.debug("Milvus Lite collection %s: not direct (%s)", name, e)
        return None


def _decoded(col: Any, records: Iterable[dict[str, Any]], fields: list[str]) -> None:
    """Decode in place the JSON fields among ``fields`` of each record, which Lite's engine
    hands out as their text (the gRPC answer carries them decoded)."""
    from milvus_lite.schema.types import DataType

    names = [f.name for f in col.schema.fields if f.dtype == DataType.JSON and f.name in fields]
    for record in records if names else ():
        for name in names:
            value = record.get(name)
            if isinstance(value, (str, bytes)):
                record[name] = json.loads(value)


def search(col: Any, data: Sequence[Any], k: int, expr: str, output_fields: list[str],
           anns_field: str | None, metric_type: str, search_params: dict[str, Any]
           ) -> list[list[dict[str, Any]]]:
    """Each query's hits as ``{"id", "distance", "entity"}``, what the gRPC path's
    ``MilvusClient.search`` gives (its JSON fields decoded; a float vector as a numpy array
    of the same values, not a list)."""
    numpy = NUMPY_VECTORS.set(True)  # the hits' vectors as arrays (hit() takes either)
    try:
        rows: list[list[dict[str, Any]]] = col.search(
            query_vectors=list(data), top_k=k, metric_type=metric_type, expr=expr or None,
            output_fields=output_fields, anns_field=anns_field, search_params=search_params)
    finally:
        NUMPY_VECTORS.reset(numpy)
    _decoded(col, (h.setdefault("entity", {}) for row in rows for h in row), output_fields)
    return rows


def get(col: Any, ids: list[str], output_fields: list[str]) -> list[dict[str, Any]]:
    """The rows of those ids that exist (with ``output_fields`` and the key), what the gRPC
    path's query ``id in [...]`` gives: the servicer answers that query with this method."""
    rows: list[dict[str, Any]] = col.get(list(ids), output_fields=output_fields)
    _decoded(col, rows, output_fields)
    return rows


def _live(col: Any, expr: str) -> tuple[list[Any], np.ndarray]:
    """The keys of every row the engine holds and the mask of those a query with filter
    ``expr`` ("" for none) answers: the first steps of its ``Collection.query``, which then
    builds a record for each row it keeps."""
    from milvus_lite.search.assembler import assemble_candidates
    from milvus_lite.search.bitmap import build_valid_mask

    col._require_loaded()
    compiled = col._compile_filter(expr) if expr else None
    plan = col._indexed_filter_plan(compiled)
    segments, delta = col._read_snapshot()
    pks, seqs, _, _, matched = assemble_candidates(
        segments=segments, memtable=col._memtable, vector_field=col._vector_name,
        filter_compiled=compiled, indexed_filter_plan=plan)
    if not pks:
        return [], np.zeros(0, dtype=bool)
    return pks, build_valid_mask(pks, seqs, delta, filter_mask=matched,
                                 memtable=col._memtable)


def keys(col: Any, expr: str = "") -> list[str]:
    """The key of every live row that matches ``expr`` (overwritten and deleted rows
    resolved as the engine's query resolves them), unsorted. The query ``id > ""`` that
    answers the same through gRPC builds a record for every row: 4.38 s on 100,000 rows
    against 0.26 s here (``bench/reads.py``, recorded at d1f2c0f, AMD EPYC AVX2)."""
    pks, live = _live(col, expr)
    return [str(pks[i]) for i in np.flatnonzero(live)]


def count(col: Any, expr: str) -> int:
    """How many live rows match ``expr``: a query's ``count(*)`` with a filter builds a
    record for every row it counts (8.34 s for a passage collection's 100,000 documents,
    2.87 s here, most of it the filter's own evaluation: ``bench/reads.py``, recorded at
    d1f2c0f, AMD EPYC AVX2). Without a filter, the engine counts fast already."""
    return int(_live(col, expr)[1].sum())


def upsert(col: Any, rows: list[dict[str, Any]]) -> None:
    """Upsert ``rows`` (field name -> value, as ``MilvusClient.upsert`` takes them). The
    engine gets copies: what it adds to a record must not reach the gRPC call that follows
    a failure.

    Rows that carry every field a caller writes (all but the BM25 vector, which the engine
    makes from the text) go to the engine's ``insert``: its ``upsert`` is that insert,
    after a read of each key's current record only to fill in the fields a partial row
    lacks, and that read takes a snapshot of the segments and tombstones a row. A key
    written again is its newest write (its sequence number) for every read, search and
    count either way. 100,000 rows of 256 dimensions and 30 words into a hybrid
    collection, 1,024 a call, sealed every 1,024 rows, in turns (a throwaway script,
    AVX2-only AMD EPYC): 16.8 s against 18.7 s; ``qkv index`` of 100,000 documents, four
    rounds in turns, +2.5 % docs/s on the mean, inside the noise. Only where the fast
    paths are installed, which holds the engine's ``upsert`` to the one read
    (:data:`index.milvus.lite.speed.KNOWN_SOURCES`); for partial rows, its ``upsert``."""
    copies = [dict(r) for r in rows]
    if _whole(col, copies):
        col.insert(copies, partition_name="_default")
    else:
        col.upsert(copies, partition_name="_default")


def _whole(col: Any, rows: list[dict[str, Any]]) -> bool:
    """Whether every row has every field of ``col`` but those the engine makes (BM25's)."""
    written = {f.name for f in col.schema.fields} - set(col._bm25_analyzers)
    return all(written <= r.keys() for r in rows)
