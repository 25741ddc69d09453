"""A store whose collection-level changes never overlap its data calls.

Milvus Lite (and the FAISS store) cannot drop or create a collection while another thread
writes into or searches it: six clients searching, upserting and dropping/re-creating one
collection got 7 answers of 2,038 from Lite's internals ("WAL already closed"), and eight
concurrent creates of one name one 201 and seven "File exists" failures. :class:`GuardedStore`
wraps any :class:`index.store.VectorStore`: ``create``, ``drop``, ``set_alias``,
``drop_alias`` and ``set_calibration`` hold a write lock, every other call a read lock, so
each admin change happens between data calls, and a call that comes after a drop finds the
collection gone (404) and a second create finds it there (409), never a half-dropped one.
The lock prefers writers, so a stream of searches cannot hold a drop off for long.

A store that failed at the file level (:class:`index.store.StoreDamagedError`: Milvus Lite
on a full disk) is *damaged*: ``damaged`` says why, and the next call heals it first
(:meth:`GuardedStore.heal`): with every other call held, the store is re-opened (Lite
stopped and started again from its write-ahead log: ``MilvusStore.reopen``, which the store
would otherwise do itself, under the calls in flight) and every collection must load and
answer its count again (the counts go to the log). A write waits for that (503 while it
cannot; the store itself refuses every write from the failure to the re-open, so none is
appended after a torn log record); a read goes on anyway (trying to heal at most every
:data:`READ_HEAL_S`). A read that ran while a call failed is read again once healed: Lite
may hide acknowledged rows after a failed write until it is re-opened (issue 44). Before,
the write that failed re-opened Lite under the reads in flight, and three writers filling a
disk made 11-13 of ~1,700 concurrent reads answer 502 (issue 68, finding 7).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from index.store import (
    CollectionInfo,
    StoreDamagedError,
    StoreError,
    StoreUnavailableError,
    VectorStore,
)

log = logging.getLogger(__name__)
EXCLUSIVE = frozenset({"create", "drop", "set_alias", "drop_alias", "set_calibration",
                       "set_passages", "set_calibration_job"})
WRITES = EXCLUSIVE | {"upsert", "delete", "flush"}
NO_HEAL = frozenset({"close"})  # not healed first (closing a damaged store)
READ_HEAL_S = 1.0  # a read tries to heal a damaged store at most this often (writes: each)


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds new readers back."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def changing(self) -> bool:
        """Whether a writer holds the lock or waits for it (read without waiting)."""
        return self._writer or self._writers_waiting > 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class GuardedStore:
    """Every method of the wrapped store, under :class:`ReadWriteLock` (see the module
    docstring); attributes pass through."""

    def __init__(self, store: VectorStore) -> None:
        self.inner = store
        self._lock = ReadWriteLock()
        self._damaged: str | None = None  # why writes wait for heal(), or None
        self._failures = 0  # how many calls failed with StoreDamagedError
        self._said = threading.Lock()
        self._heal_failed_at = -math.inf  # when a read's heal last failed
        if hasattr(store, "reopens_itself"):  # the guard re-opens it, nothing in flight
            store.reopens_itself = False

    @property
    def damaged(self) -> str | None:
        """Why the store waits to be healed (a call of ours failed, or the store failed on
        its own, as Lite's background sealing can), or None."""
        return self._damaged or getattr(self.inner, "broken", None)

    def _failure_count(self) -> int:
        return self._failures + getattr(self.inner, "io_failures", 0)

    def described(self, collection: str) -> CollectionInfo | None:
        """The store's ``described`` without the lock (it reads only memory), None while a
        collection-level change holds or waits for it or the store is damaged: then
        ``describe`` waits its turn. A change that starts just after is seen by the call
        that follows (a search takes the lock and finds the collection gone: 404)."""
        if self._damaged is not None or self._lock.changing():
            return None
        return self.inner.described(collection)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        hold = self._lock.write if name in EXCLUSIVE else self._lock.read
        write, heals = name in WRITES, name not in NO_HEAL

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            for again in (False, True):
                if heals and self.damaged is not None:
                    if write:
                        self.heal()  # 503 while it cannot
                    elif time.monotonic() - self._heal_failed_at >= READ_HEAL_S:
                        try:  # a read tries, and goes on anyway
                            self.heal()
                        except StoreError:
                            self._heal_failed_at = time.monotonic()
                failures = self._failure_count()
                try:
                    with hold():
                        result = attr(*args, **kwargs)
                except StoreDamagedError as e:
                    with self._said:
                        self._damaged, self._failures = str(e), self._failures + 1
                    if write or again or not heals:
                        raise
                    continue  # a read: once more, on the re-opened store
                if write or again or not heals or self._failure_count() == failures:
                    return result
                # the store failed while this read ran: its answer may miss acknowledged
                # rows (Lite hid them until re-opened), so it is read again after the heal
            raise AssertionError("unreachable")

        return call

    @contextmanager
    def exclusive(self) -> Iterator[VectorStore]:
        """Hold every other call of the store (reads wait, none fails); yields the inner
        store, to be called meanwhile (this lock is not re-entrant)."""
        with self._lock.write():
            yield self.inner

    def heal(self) -> bool:
        """Re-open a damaged store: every collection must load and count again (Lite replays
        its write-ahead log on the way) before writes are let through. Raises 503's error
        while it cannot; returns whether there was anything to heal."""
        with self._lock.write():
            if self.damaged is None:
                return False
            try:
                reopen = getattr(self.inner, "reopen", None)
                if getattr(self.inner, "broken", None) is not None and reopen is not None:
                    reopen()
                counts = {c: self._count(c) for c in self.inner.list_collections()}
            except StoreUnavailableError as e:
                raise StoreUnavailableError(
                    "the store is being re-opened after a failed write; writes wait until "
                    "it answers again", getattr(e, "detail", "")) from e
            log.warning("store re-opened after a failed write; collection counts: %s", counts)
            self._damaged = None
            return True

    def _count(self, collection: str) -> int | str:
        try:
            return self.inner.count(collection)
        except ValueError:  # multi-tenant: counted per tenant only, but loaded on the way
            return "loaded"


def guarded(store: VectorStore) -> VectorStore:
    """``store`` wrapped (once) in a :class:`GuardedStore`."""
    return store if isinstance(store, GuardedStore) else cast(VectorStore, GuardedStore(store))
