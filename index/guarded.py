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
on a full disk, re-opened from its write-ahead log) is marked *damaged*: ``damaged``
says why, and no write reaches it until :meth:`GuardedStore.heal` has re-opened it and
every collection has loaded and answered its count again (the counts go to the log).
Writes meanwhile answer 503; reads go on. The next write (or ``/ready``) tries to heal.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from index.store import StoreDamagedError, StoreUnavailableError, VectorStore

log = logging.getLogger(__name__)
EXCLUSIVE = frozenset({"create", "drop", "set_alias", "drop_alias", "set_calibration",
                       "set_passages", "set_calibration_job"})
WRITES = EXCLUSIVE | {"upsert", "delete", "flush"}


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds new readers back."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

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
        self.damaged: str | None = None  # why writes wait for heal(), or None

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        hold = self._lock.write if name in EXCLUSIVE else self._lock.read

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            if name in WRITES and self.damaged is not None:
                self.heal()
            try:
                with hold():
                    return attr(*args, **kwargs)
            except StoreDamagedError as e:
                self.damaged = str(e)
                raise

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
                counts = {c: self._count(c) for c in self.inner.list_collections()}
            except StoreUnavailableError as e:
                raise StoreUnavailableError(
                    "the store is being re-opened after a failed write; writes wait until "
                    "it answers again", getattr(e, "detail", "")) from e
            log.warning("store re-opened after a failed write; collection counts: %s", counts)
            self.damaged = None
            return True

    def _count(self, collection: str) -> int | str:
        try:
            return self.inner.count(collection)
        except ValueError:  # multi-tenant: counted per tenant only, but loaded on the way
            return "loaded"


def guarded(store: VectorStore) -> VectorStore:
    """``store`` wrapped (once) in a :class:`GuardedStore`."""
    return store if isinstance(store, GuardedStore) else cast(VectorStore, GuardedStore(store))
