"""Milvus Lite 3.x's BM25 search, with cached row visibility and array postings.

A copy of ``milvus_lite.engine.collection.Collection._search_sparse`` (Apache-2.0,
milvus-lite 3.2.2) for the BM25 metric, with the same results: each sealed segment's rows
made visible by :class:`index.milvus.lite.visibility.SealedView` (cached per generation of
segments) instead of a per-search Python loop over every row, and scored by
:class:`index.milvus.lite.bm25.FastBM25Index` (cached on the segment, as Lite caches its own)
instead of Lite's per-posting Python loop. Other sparse metrics go to Lite's own method.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from index.milvus.lite.bm25 import FastBM25Index
from index.milvus.lite.dense import VIEWS, needed_columns, rows_of

ORIGINAL: dict[str, Callable[..., Any]] = {}  # set by index.milvus.lite.speed.install


def search_sparse(self: Any, query_vectors: list, vector_field: str, top_k: int,
                  metric_type: str, partition_names: list[str] | None, expr: str | None,
                  output_fields: list[str] | None, timezone: str | None = None
                  ) -> list[list[dict]]:
    """``Collection._search_sparse`` (BM25): per-segment top-k, the memtable rebuilt each
    time (small), one merge keeping each key's newest version (whose versions are read only
    when a key came from two sources)."""
    if metric_type != "BM25":
        return ORIGINAL["search_sparse"](self, query_vectors, vector_field, top_k,
                                         metric_type, partition_names, expr, output_fields,
                                         timezone)
    from milvus_lite.analyzer.sparse import bytes_to_sparse
    from milvus_lite.engine.projection import build_projection_plan, project_record
    from milvus_lite.search.filter.eval.python_backend import _eval_row
    from milvus_lite.search.indexed_filter import evaluate_segment_filter

    partition_filter = set(partition_names) if partition_names else None
    plan = build_projection_plan(output_fields, self._schema, api_kind="search")
    spec = self._index_specs.get(vector_field)
    params = spec.build_params if spec else {}
    k1, b = float(params.get("bm25_k1", 1.5)), float(params.get("bm25_b", 0.75))
    queries = self._prepare_sparse_queries(query_vectors, vector_field)
    compiled = self._compile_filter(expr, timezone=timezone) if expr else None
    filter_plan = self._indexed_filter_plan(compiled)
    candidates: list[list[tuple[float, Any, Any]]] = [[] for _ in queries]

    segments, delta = self._read_snapshot()
    mt_deletes = self._memtable.delete_index_snapshot()
    mt_seq_of = {pk: int(pos[2]) for pk, pos in self._memtable.pk_index_snapshot()}
    view = VIEWS.get(segments, delta._map)
    masks = view.masks(mt_seq_of, mt_deletes, partition_of_delete=True)

    for seg, mask in zip(segments, masks, strict=True):
        if partition_filter is not None and seg.partition not in partition_filter:
            continue
        table = seg.table
        if table is None or len(table) == 0:
            continue
        index = seg.sparse_indexes.get(vector_field)
        if not (isinstance(index, FastBM25Index) and index.k1 == k1 and index.b == b):
            index = FastBM25Index(k1=k1, b=b)
            index.build_from_column(table.column(vector_field))
            seg.sparse_indexes[vector_field] = index
        if compiled is not None:
            mask = mask & evaluate_segment_filter(seg, compiled, filter_plan)
        if not mask.any():
            continue
        ids, dists = index.search(queries, top_k, valid_mask=mask)
        _collect(candidates, ids, dists, functools.partial(_sealed_hit, seg.pks, table))

    # The memtable, rebuilt each time (small and mutable)
    sealed_newest = view.newest_sealed(list(mt_seq_of))
    mt_pks: list = []
    mt_sparse: list = []
    mt_refs: list = []
    for pk, seq, record in self._memtable.active_record_snapshots(
            partition_names=partition_names):
        newest = max(sealed_newest.get(pk, -1), mt_seq_of.get(pk, -1))
        if delta.is_deleted(pk, seq) or newest > seq:
            continue
        raw = record.get(vector_field)
        mt_pks.append(pk)
        mt_sparse.append(bytes_to_sparse(raw) if isinstance(raw, bytes) else (raw or {}))
        mt_refs.append((record, seq))
    if mt_pks:
        valid = np.ones(len(mt_pks), dtype=bool)
        if compiled is not None:
            valid = np.array([bool(_eval_row(compiled.ast, r)) for r, _ in mt_refs])
        index = FastBM25Index(k1=k1, b=b)
        index.build(mt_sparse, valid_mask=valid)
        ids, dists = index.search(queries, top_k)
        _collect(candidates, ids, dists, lambda lid: (mt_pks[lid], mt_refs[lid]))

    return [_merge(c, top_k, lambda rec: project_record(rec, self._schema, plan),
                   output_fields, self._pk_name) for c in candidates]


def _sealed_hit(pks: list, table: Any, lid: int) -> tuple[Any, Any]:
    return pks[lid], (table, lid)


def _collect(candidates: list[list[tuple[float, Any, Any]]], ids: np.ndarray,
             dists: np.ndarray, source: Callable[[int], tuple[Any, Any]]) -> None:
    """Each query's hits from one source (rows padded with -1) as (distance, key, ref)."""
    for qi, row in enumerate(ids):
        for j, lid in enumerate(row.tolist()):
            if lid < 0:
                break  # padding from here on
            candidates[qi].append((float(dists[qi, j]), *source(lid)))


def _is_memtable(source: Any) -> bool:
    return isinstance(source, tuple) and bool(source) and isinstance(source[0], dict)


def _by_segment(cands: Sequence[tuple[float, Any, Any]]
                ) -> list[tuple[Any, list[int], list[int]]]:
    """The sealed ones among ``cands`` by segment, each segment read once: (its table,
    their positions in ``cands``, their rows in it)."""
    out: dict[int, tuple[Any, list[int], list[int]]] = {}
    for n, (_, _, source) in enumerate(cands):
        if not _is_memtable(source):
            table, row = source
            got = out.setdefault(id(table), (table, [], []))
            got[1].append(n)
            got[2].append(row)
    return list(out.values())


def _merge(candidates: list[tuple[float, Any, Any]], top_k: int,
           project: Callable[[dict], dict], output_fields: list[str] | None = None,
           pk_field: str = "") -> list[dict]:
    """Each key's newest version, best first, materialised (a sealed row: only the columns
    shown, :func:`index.milvus.lite.dense.needed_columns`)."""
    if len({c[1] for c in candidates}) == len(candidates):  # each key once: no versions
        top = sorted(candidates, key=lambda c: c[0])[:top_k]
    else:
        seqs = [int(source[1]) if _is_memtable(source) else 0 for _, _, source in candidates]
        for table, where, rows in _by_segment(candidates):  # their _seq: one take a segment
            got = table.column("_seq").take(pa.array(rows, pa.int64())).to_pylist()
            for n, seq in zip(where, got, strict=True):
                seqs[n] = int(seq)
        best: dict[Any, tuple[int, tuple[float, Any, Any]]] = {}
        for cand, seq in zip(candidates, seqs, strict=True):
            pk = cand[1]
            if pk not in best or seq > best[pk][0]:
                best[pk] = (seq, cand)
        top = sorted((v[1] for v in best.values()), key=lambda c: c[0])[:top_k]
    records: list[dict] = [source[0] if _is_memtable(source) else {} for _, _, source in top]
    for table, where, rows in _by_segment(top):  # a segment's hits read at once
        cols = needed_columns(table.column_names, output_fields, pk_field)
        shown = [name for name in (cols if cols is not None else table.column_names)
                 if name not in ("_seq", "_partition")]
        for n, record in zip(where, rows_of(table, shown, rows), strict=True):
            records[n] = record
    return [{"id": pk, "distance": dist, "entity": project(record)}
            for (dist, pk, _), record in zip(top, records, strict=True)]
