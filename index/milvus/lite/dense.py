"""Milvus Lite 3.x's dense search executor, with row visibility from a cached
:class:`index.milvus.lite.visibility.SealedView` instead of a per-search loop over every row.

A copy of ``milvus_lite.search.executor_indexed.execute_search_with_index`` (Apache-2.0,
milvus-lite 3.2.2) with the same signature and results; step 1 and the local mask differ
(see :mod:`index.milvus.lite.visibility`), and so do steps 3 and 4: the sources (segments
and memtable) are searched side by side on the cores (:func:`each`; faiss and numpy leave
the GIL) and merged with numpy (:func:`merged`), and a bf16 graph is searched by
:func:`index.milvus.lite.graphs.search`. At 522,000 documents (six segments) the store's
dense search of 10 p50 went from 2.8-2.9 to 2.1-2.2 ms side by side, of 100 from 5.2 to
3.7-3.8 ms (throwaway script on bench/scale.py's store, Intel Xeon, 2 cores).
``tests/index/test_lite_speed.py`` holds the two equal on random workloads of upserts,
deletes, flushes and filters.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from milvus_lite.index.brute_force import BruteForceIndex

from index.milvus.lite import graphs as lite_graphs
from index.milvus.lite.visibility import ViewCache

VIEWS = ViewCache()
# A search whose sources (segments and memtable) hold at least this many rows searches them
# side by side (:func:`each`); below it, one after the other: handing a source to another
# thread costs more than searching a small one.
SIDE_BY_SIDE_ROWS = 20_000
T = TypeVar("T")
R = TypeVar("R")


def execute_search_with_index(
    query_vectors: np.ndarray, segments: Iterable[Any], memtable: Any, delta_index: Any,
    top_k: int, metric_type: str, pk_field: str, vector_field: str,
    partition_names: list[str] | None = None, compiled_filter: Any = None,
    output_fields: list[str] | None = None, indexed_filter_plan: Any = None,
    project_record_fn: Callable[[dict], dict] | None = None,
    search_params: dict[str, Any] | None = None,
) -> list[list[dict]]:
    """Per-segment recall (each segment's index, or brute force), the memtable by brute
    force, one global merge: Lite's search, with cached visibility."""
    if query_vectors.ndim == 1:
        query_vectors = query_vectors.reshape(1, -1)
    if query_vectors.dtype != np.float32:
        query_vectors = query_vectors.astype(np.float32, copy=False)
    nq = int(query_vectors.shape[0])
    if nq == 0 or top_k <= 0:
        return [[] for _ in range(nq)]
    partition_filter = set(partition_names) if partition_names else None
    in_scope = [s for s in segments if s.num_rows > 0
                and (partition_filter is None or s.partition in partition_filter)]
    mt_pks, mt_seqs, mt_vecs, mt_row_refs, mt_table = memtable.to_search_snapshot(
        vector_field=vector_field, partition_names=partition_names,
        include_table=compiled_filter is not None)
    if not in_scope and not mt_pks:
        return [[] for _ in range(nq)]

    # ── 1. visibility: the sealed part cached, the memtable's keys applied per search ──
    mt_deletes = memtable.delete_index_snapshot()  # {pk: (seq, partition)}
    mt_seq_of = {pk: int(seq) for pk, seq in zip(mt_pks, mt_seqs.tolist(), strict=True)}
    view = VIEWS.get(in_scope, delta_index._map)
    seg_masks = view.masks(mt_seq_of, mt_deletes)
    sealed_newest = view.newest_sealed(mt_pks) if mt_pks else {}

    # ── 2. optional per-source filter masks ──
    from milvus_lite.search.filter import evaluate_mask
    from milvus_lite.search.indexed_filter import evaluate_segment_filter

    def recall(mask: np.ndarray, vectors: np.ndarray, index: Any
               ) -> tuple[np.ndarray, np.ndarray] | None:
        """One source's hits (ids, distances: padding at the end), None when none of its
        rows is in scope."""
        if not mask.any():
            return None
        valid = None if mask.all() else mask
        if index is None and metric_type == "IP":
            return brute_force_ip(vectors, query_vectors, top_k, valid)
        if lite_graphs.approximate(index):  # a bf16 graph: the exact distances
            return lite_graphs.search(index, vectors, query_vectors, top_k, valid,
                                      search_params)
        if index is None:
            index = BruteForceIndex.build(vectors, metric_type)
        ids, dists = index.search(query_vectors, top_k, valid_mask=valid,
                                  params=search_params)
        return ids, dists

    # ── 3. per-source recall: segments, then the memtable (side by side, see each) ──
    sources: list[tuple[np.ndarray, np.ndarray, Any]] = []
    for i, seg in enumerate(in_scope):
        mask = seg_masks[i]
        if compiled_filter is not None:
            mask = mask & evaluate_segment_filter(seg, compiled_filter, indexed_filter_plan)
        vectors, null_mask = seg.vector_data(vector_field)
        if null_mask is not None:
            mask = mask & null_mask
        sources.append((mask, vectors, seg.indexes.get(vector_field)))
    if mt_pks:
        mt_mask = np.fromiter(
            (seq >= sealed_newest.get(pk, -1) and not delta_index.is_deleted(pk, seq)
             and not (pk in mt_deletes and mt_deletes[pk][0] > seq)
             for pk, seq in mt_seq_of.items()), dtype=bool, count=len(mt_seq_of))
        if compiled_filter is not None and mt_table is not None:
            mt_mask &= evaluate_mask(compiled_filter, mt_table).astype(bool)
        sources.append((mt_mask, mt_vecs, None))
    found = each(lambda source: recall(*source), sources,
                 side_by_side=sum(len(v) for _, v, _ in sources) >= SIDE_BY_SIDE_ROWS)
    candidates = merged(found, nq, top_k)

    # ── 4. global merge + entity projection ──
    project = _projection(project_record_fn, output_fields, pk_field, vector_field)

    def materialize(picks: list[tuple[int, int]]) -> list[dict]:
        """The records of (source, local id) hits: a sealed segment's showing some columns
        in one read of them all (:func:`rows_of`), others one by one as Lite reads them."""
        out: list[dict] = [{}] * len(picks)
        by_source: dict[int, list[int]] = {}
        for n, (source, _) in enumerate(picks):
            by_source.setdefault(source, []).append(n)
        for source, where in by_source.items():
            if source < len(in_scope):
                seg = in_scope[source]
                cols = needed_columns(seg.table.column_names, output_fields, pk_field)
                if cols is None:
                    rows = [seg.row_to_dict(picks[n][1]) for n in where]
                else:
                    rows = rows_of(seg.table, cols, [picks[n][1] for n in where])
            else:
                rows = [memtable.materialize_row(*mt_row_refs[picks[n][1]]) for n in where]
            for n, record in zip(where, rows, strict=True):
                out[n] = record
        return out

    def pk_of(source: int, local_id: int) -> Any:
        return in_scope[source].pks[local_id] if source < len(in_scope) else mt_pks[local_id]

    results: list[list[dict]] = []
    for q in range(nq):
        top = candidates[q]
        per_query = []
        for (dist, source, local_id), record in zip(
                top, materialize([(c[1], c[2]) for c in top]), strict=True):
            pk = record.get(pk_field) if pk_field in record else pk_of(source, local_id)
            per_query.append({"id": pk, "distance": dist, "entity": project(record)})
        results.append(per_query)
    return results


def merged(found: Sequence[tuple[np.ndarray, np.ndarray] | None], nq: int, top_k: int
           ) -> list[list[tuple[float, int, int]]]:
    """Each query's ``top_k`` nearest (distance, source, local id) over the sources' hits
    (``found[source]``: ids and distances, each row's padding from its first -1 on; None:
    no rows in scope), ascending, ties by source then local id: the global merge."""
    out: list[list[tuple[float, int, int]]] = []
    for q in range(nq):
        ds, ss, ls = [], [], []
        for source, hit in enumerate(found):
            if hit is None:
                continue
            ids, dists = hit[0][q], hit[1][q]
            keep = np.logical_and.accumulate(ids >= 0)
            ds.append(dists[keep])
            ls.append(ids[keep])
            ss.append(np.full(len(ls[-1]), source, np.int64))
        if not ds:
            out.append([])
            continue
        d, s, lid = np.concatenate(ds), np.concatenate(ss), np.concatenate(ls)
        order = np.lexsort((lid, s, d))[:top_k]
        out.append([(float(d[o]), int(s[o]), int(lid[o])) for o in order])
    return out


_pool: dict[int, ThreadPoolExecutor] = {}  # this process's (by pid: none survives a fork)
_pool_lock = threading.Lock()


def _helpers() -> ThreadPoolExecutor:
    with _pool_lock:
        pid = os.getpid()
        if pid not in _pool:
            _pool.clear()
            _pool[pid] = ThreadPoolExecutor(max(1, (os.cpu_count() or 1) - 1),
                                            thread_name_prefix="qkv-lite-search")
        return _pool[pid]


def each(fn: Callable[[T], R], items: Sequence[T], side_by_side: bool = True) -> list[R]:
    """``fn`` of each item, in order. ``side_by_side`` (and more than one item, and more than
    one core): this thread and helper threads (one per other core) take the items one at a
    time until none is left: a segment's graph search (faiss) and brute force (numpy) leave
    the GIL, so a search of six segments runs on both cores. A helper that has not started
    when this thread runs out of items is called off (another search may be keeping it
    busy); an error is raised once every item taken has finished."""
    helpers = min(len(items) - 1, (os.cpu_count() or 1) - 1) if side_by_side else 0
    if helpers <= 0:
        return [fn(x) for x in items]
    out: list[Any] = [None] * len(items)
    todo, lock = iter(range(len(items))), threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            out[i] = fn(items[i])

    pool = _helpers()
    futures = [pool.submit(drain) for _ in range(helpers)]
    try:
        drain()
    finally:
        errors = [f.exception() for f in futures if not f.cancel()]
    for e in errors:
        if e is not None:
            raise e
    return out


# Set by a direct call (:mod:`index.milvus.lite.direct`), which reads the hits in this
# thread: float vectors then come out as numpy arrays, not lists of Python floats (5 x less
# work a hit); the gRPC servicer's threads keep lists, as Lite's own code makes them.
NUMPY_VECTORS: contextvars.ContextVar[bool] = contextvars.ContextVar("qkv_numpy_vectors",
                                                                     default=False)


def rows_of(table: Any, cols: Sequence[str], rows: Sequence[int]) -> list[dict]:
    """Rows of a sealed segment's table, only ``cols``, each value as Lite reads it
    (``as_py``), a float vector as numpy while :data:`NUMPY_VECTORS` is set: one ``take``
    of them all, or up to :data:`CELL_ROWS` cell by cell. Read cell by cell as Lite reads a
    row (every column), a dense search of 40 hits (what a collection with passages asks for
    top_k 10) took 2.1–2.3 ms more than one of 10 at 140,000 rows; taken, 1.0–1.1 ms more
    (Intel Xeon, side by side)."""
    if not rows:
        return []
    if len(rows) <= CELL_ROWS:
        return _cells(table, cols, rows)
    taken = table.select(list(cols)).take(pa.array(rows, type=pa.int64()))
    columns = []
    for name in cols:
        col = taken.column(name)
        if NUMPY_VECTORS.get() and pa.types.is_fixed_size_list(col.type):
            columns.append(_vectors(col.combine_chunks()))
        else:
            columns.append(col.to_pylist())
    return [dict(zip(cols, values, strict=True)) for values in zip(*columns, strict=True)]


# A segment with at most this many of a search's hits reads them cell by cell: a ``take``
# costs 30 us or more however few it takes. On a 100,000-row segment of bench/scale.py's
# store (id, text, value and metadata; a throwaway script, Intel Xeon): 1 row 38 us taken
# against 4 us by cells, 2 rows 33 against 6, 5 rows 42 against 17, 20 rows 57 against 61.
# A dense search of 10 hits over ten segments reads one or two rows from most of them: at
# 1,000,000 documents its p50 went from 3.52, 3.50, 3.79 to 3.30, 3.20, 3.43 ms (the store
# called directly, 300 queries, runs taken in turns; /tmp script, Intel Xeon, 2 cores).
CELL_ROWS = 12


def _cells(table: Any, cols: Sequence[str], rows: Sequence[int]) -> list[dict]:
    """:func:`rows_of`, one cell at a time (a column of one chunk read from that chunk)."""
    numpy = NUMPY_VECTORS.get()
    columns = []
    for name in cols:
        col = table.column(name)
        columns.append((name, col.chunk(0) if col.num_chunks == 1 else col,
                        numpy and pa.types.is_fixed_size_list(col.type)))
    return [{name: (_vector(col[r]) if vector else col[r].as_py())
             for name, col, vector in columns} for r in rows]


def _vector(cell: Any) -> Any:
    """A fixed-size-list cell with :data:`NUMPY_VECTORS`: a numpy row (a copy), None if null."""
    return cell.values.to_numpy(zero_copy_only=False).copy() if cell.is_valid else None


def _vectors(arr: Any) -> list[Any]:
    """A fixed-size-list column's values with :data:`NUMPY_VECTORS`: a numpy row each (a
    copy), None where null."""
    if arr.null_count:
        return [_vector(v) for v in arr]
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    return list(flat.reshape(len(arr), arr.type.list_size).copy())


def needed_columns(names: list[str], output_fields: list[str] | None, pk_field: str
                   ) -> list[str] | None:
    """The columns of a sealed row that a hit with these ``output_fields`` shows: the
    key's and theirs, when each is a column of the schema. None (every column, as Lite
    reads a row) for all fields, ``*``, ``$meta`` or a dynamic field. Lite converts every
    column of every hit to Python, the vector's floats included: most of a search's cost
    at 100 hits (what a hybrid search asks of each side)."""
    if output_fields is None:
        return None
    wanted = set(output_fields)
    if "*" in wanted or "$meta" in wanted or not wanted <= set(names):
        return None
    return [name for name in names if name in wanted or name == pk_field]


def brute_force_ip(xb: np.ndarray, xq: np.ndarray, k: int, valid: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Lite's ``BruteForceIndex.search`` for inner product (distance −⟨q, x⟩, ascending,
    padded with -1 / inf) without copying the valid rows out first: Lite copies the
    whole segment (``vectors[valid_indices]``) on every search, 50 MB at 50,000 rows.

    A product's last bit can differ from Lite's: BLAS picks its kernel, and the order it
    sums in, by the matrix's width, and Lite's matrix holds only the valid rows."""
    nq = len(xq)
    ids = np.full((nq, k), -1, dtype=np.int64)
    dists = np.full((nq, k), np.inf, dtype=np.float32)
    n = len(xb) if valid is None else int(valid.sum())
    if n == 0 or k <= 0:
        return ids, dists
    D = -(xq @ xb.T)  # (nq, N)
    if valid is not None:
        D[:, ~valid] = np.inf
    kk = min(k, n)
    for q in range(nq):
        d = D[q]
        part = np.argpartition(d, kk - 1)[:kk] if kk < len(d) else np.arange(len(d))
        order = part[np.argsort(d[part], kind="stable")][:kk]
        ids[q, :kk], dists[q, :kk] = order, d[order]
    return ids, dists


def _projection(project_record_fn: Callable[[dict], dict] | None,
                output_fields: list[str] | None, pk_field: str, vector_field: str
                ) -> Callable[[dict], dict]:
    if project_record_fn is not None:
        return project_record_fn
    if output_fields is None:
        return lambda record: {k: v for k, v in record.items()
                               if k != pk_field and k != vector_field}
    keep = set(output_fields) - {pk_field}
    return lambda record: {k: record[k] for k in keep if k in record}
