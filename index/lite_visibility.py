"""Which rows of Milvus Lite's sealed segments a search may return, computed once per
generation of segments instead of once per search.

A row of a segment is visible when its sequence number is the newest of its primary key
across the segments and the memtable, and no tombstone newer than it deletes that key
(Lite's sealed tombstones, its ``DeltaIndex``, or one still in the memtable). Lite 3.x
recomputes this on every search in a Python loop over every row of every segment
(``search/executor_indexed.py``, ``Collection._search_sparse``): ~94 % of a search's time,
linear in the collection. Segments are immutable files and the sealed tombstones change
only when the memtable is flushed or compacted, so :class:`SealedView` computes the
segments' part once (vectorised: keys dictionary-encoded by Arrow, newest sequence per key
by ``np.maximum.at``) and keeps it while the same segments and tombstones are read; a
search then applies only the memtable's few keys and tombstones (:meth:`SealedView.masks`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CACHED_VIEWS = 16  # generations kept (several collections, old and new during a flush)


class SealedView:
    """The visibility of every row of one tuple of segments under one set of tombstones."""

    def __init__(self, segments: Sequence[Any], deletes: Mapping[Any, int]) -> None:
        self.segments = tuple(segments)  # held, so their ids stay theirs while cached
        self.deletes = dict(deletes)
        sizes = [s.num_rows for s in self.segments]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        n = int(self.offsets[-1])
        self.seqs = (np.concatenate([np.asarray(s.seqs, dtype=np.int64) for s in self.segments])
                     if n else np.zeros(0, dtype=np.int64))
        if n:
            keys = pa.chunked_array([s.table.column(s._pk_field) if s.table is not None
                                     else pa.array(s.pks) for s in self.segments])
            encoded = pc.dictionary_encode(keys).combine_chunks()
            self.dictionary = encoded.dictionary
            self.codes = np.asarray(encoded.indices, dtype=np.int64)
        else:
            self.dictionary = pa.array([], type=pa.string())
            self.codes = np.zeros(0, dtype=np.int64)
        m = len(self.dictionary)
        self.newest = np.full(m, -1, dtype=np.int64)  # newest sequence of each key
        if m == n:
            self.newest[self.codes] = self.seqs
        else:
            np.maximum.at(self.newest, self.codes, self.seqs)
        self.deleted = np.full(m, -1, dtype=np.int64)  # newest sealed tombstone of each key
        if self.deletes:
            codes, found = self.lookup(list(self.deletes))
            seqs = np.fromiter(self.deletes.values(), dtype=np.int64, count=len(self.deletes))
            np.maximum.at(self.deleted, codes[found], seqs[found])
        self.base = ((self.seqs == self.newest[self.codes])
                     & ~(self.deleted[self.codes] > self.seqs))

    def lookup(self, pks: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Each key's code in this view, and whether it is in it at all."""
        if not pks or not len(self.dictionary):
            return np.zeros(len(pks), dtype=np.int64), np.zeros(len(pks), dtype=bool)
        at = pc.index_in(pa.array(list(pks), type=self.dictionary.type),
                         value_set=self.dictionary)
        found = np.asarray(at.is_valid())
        return np.asarray(at.fill_null(0), dtype=np.int64), found

    def newest_sealed(self, pks: Sequence[Any]) -> dict[Any, int]:
        """The newest sealed sequence of each of ``pks`` that the segments hold."""
        codes, found = self.lookup(pks)
        return {pk: int(self.newest[c]) for pk, c, f in zip(pks, codes, found, strict=True)
                if f}

    def masks(self, memtable_seqs: Mapping[Any, int],
              memtable_deletes: Mapping[Any, tuple[int, Any]],
              partition_of_delete: bool = False) -> list[np.ndarray]:
        """Each segment's visible rows, given the memtable's live keys (key -> sequence)
        and its pending tombstones (key -> (sequence, partition)). With
        ``partition_of_delete`` a pending tombstone hides a row only in its own partition
        (or in all, Lite's ``ALL_PARTITIONS``), as Lite's BM25 path checks."""
        touched = list(set(memtable_seqs) | set(memtable_deletes))
        mask = self.base
        if touched and len(self.dictionary):
            codes, found = self.lookup(touched)
            hide: list[int] = []
            for pk, code, f in zip(touched, codes, found, strict=True):
                if not f:
                    continue
                rows = self._rows_of(int(code))
                if memtable_seqs.get(pk, -1) > self.newest[code]:
                    hide.extend(rows.tolist())
                    continue
                pending = memtable_deletes.get(pk)
                if pending is not None:
                    hide.extend(int(r) for r in rows if pending[0] > self.seqs[r]
                                and (not partition_of_delete
                                     or self._in_partition(int(r), pending[1])))
            if hide:
                mask = mask.copy()
                mask[np.asarray(hide, dtype=np.int64)] = False
        return [mask[self.offsets[i]:self.offsets[i + 1]] for i in range(len(self.segments))]

    def _rows_of(self, code: int) -> np.ndarray:
        """The visible rows (in the sealed view) of one key: at most a few."""
        if not hasattr(self, "_by_code"):
            visible = np.flatnonzero(self.base)
            order = np.argsort(self.codes[visible], kind="stable")
            self._by_code = (self.codes[visible][order], visible[order])
        codes, rows = self._by_code
        lo, hi = np.searchsorted(codes, code), np.searchsorted(codes, code, side="right")
        return rows[lo:hi]

    def _in_partition(self, row: int, partition: Any) -> bool:
        from milvus_lite.constants import ALL_PARTITIONS

        segment = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return partition in (ALL_PARTITIONS, self.segments[segment].partition)


class ViewCache:
    """The last :data:`CACHED_VIEWS` views, by the identity of their segments."""

    def __init__(self) -> None:
        self._views: dict[tuple[int, ...], SealedView] = {}
        self._lock = threading.Lock()

    def get(self, segments: Sequence[Any], deletes: Mapping[Any, int]) -> SealedView:
        key = tuple(id(s) for s in segments)
        with self._lock:
            view = self._views.get(key)
            if view is not None and view.deletes == deletes:
                return view
            view = SealedView(segments, deletes)
            self._views.pop(key, None)
            self._views[key] = view
            while len(self._views) > CACHED_VIEWS:
                self._views.pop(next(iter(self._views)))
            return view
