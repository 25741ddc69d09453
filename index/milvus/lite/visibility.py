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

# views kept, one per collection (the newest generation of its segments): ~55 MB each at
# 1,000,000 rows
CACHED_VIEWS = 8
PER_COLLECTION = 2


class SealedView:
    """The visibility of every row of one tuple of segments under one set of tombstones."""

    def __init__(self, segments: Sequence[Any], deletes: Mapping[Any, int]) -> None:
        # no references held: a view must not keep merged-away segments (their vectors)
        # alive; it knows its segments again by identity and content (:func:`signature`)
        self.signature = signature(segments)
        self.home = {home_of(s) for s in segments}
        self.partitions = tuple(s.partition for s in segments)
        self.deletes = dict(deletes)
        sizes = [s.num_rows for s in segments]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        n = int(self.offsets[-1])
        self.seqs = (np.concatenate([np.asarray(s.seqs, dtype=np.int64) for s in segments])
                     if n else np.zeros(0, dtype=np.int64))
        if n:
            keys = pa.chunked_array([s.table.column(s._pk_field) if s.table is not None
                                     else pa.array(s.pks) for s in segments])
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
        return [mask[self.offsets[i]:self.offsets[i + 1]] for i in range(len(self.partitions))]

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
        return partition in (ALL_PARTITIONS, self.partitions[segment])




def signature(segments: Sequence[Any]) -> tuple[Any, ...]:
    """The segments' identities with what would tell a reused address apart (file, rows,
    sequence range, first and last key): segments are immutable, so equal means the same."""
    return tuple((id(s), getattr(s, "file_path", ""), s.num_rows,
                  int(s.seqs[0]) if s.num_rows else -1, int(s.seqs[-1]) if s.num_rows else -1,
                  s.pks[0] if s.num_rows else None, s.pks[-1] if s.num_rows else None)
                 for s in segments)


def home_of(segment: Any) -> str:
    """The collection a segment belongs to (its files' directory)."""
    return str(getattr(segment, "file_path", "")).split("/partitions/")[0]


class ViewCache:
    """The last :data:`CACHED_VIEWS` views, by the identity of their segments."""

    def __init__(self) -> None:
        self._views: dict[tuple[Any, ...], SealedView] = {}
        self._lock = threading.Lock()

    def get(self, segments: Sequence[Any], deletes: Mapping[Any, int]) -> SealedView:
        key = signature(segments)
        with self._lock:
            view = self._views.pop(key, None)
            if view is None or view.deletes != deletes:
                view = SealedView(segments, deletes)
            self._views[key] = view  # the most recently used last
            # Per collection the two latest (a dense search of some partitions and a BM25
            # one of all may read two scopes); an older generation is not read again
            mine = [k for k, v in self._views.items() if v.home & view.home]
            for old in mine[:-PER_COLLECTION]:
                del self._views[old]
            while len(self._views) > CACHED_VIEWS:
                self._views.pop(next(iter(self._views)))
            return view
