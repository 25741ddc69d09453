"""Sealing what was written to Milvus Lite, so searches stay fast without anyone asking.

Milvus Lite searches rows that are not yet sealed (its memtable) by brute force in Python:
on 5,000 just-written documents 175 ms a dense query and 810 ms a BM25 one, against 12 and
18 ms once sealed; the cost grows with the unsealed rows (about 0.04 ms a row dense and
0.16 ms BM25), and sealing costs about 0.15 ms a row (measured with ``/tmp`` scripts on
scifact, 2 cores). Lite only indexes sealed segments (in the background, after a flush).

:class:`Sealer` calls ``flush(collection)`` as soon as :data:`SEAL_ROWS` rows wait (the
write that crosses it pays about 0.15 s), and from a background thread once a collection
has had no writes for :data:`SEAL_QUIET_S` seconds, so a bulk job, a batch of API upserts or
a single document are all searched from sealed segments a second later. Sealed rows stay
visible: a flush loses and hides nothing.

A bulk job's store (``open_store(bulk=True)``) seals by size only (``quiet_s=None``): its
process owns the file, nobody searches it meanwhile, and the job seals what waits when it
closes. The quiet seal there sealed a small segment whenever the writes paused for a
second (the Ray driver waits on its encoder actors: at start, and whenever Lite's merges
take the cores), and those extra segments made Lite merge and build an HNSW graph in the
middle of the job: 100,000 documents on 2 cores, a 60,000-row graph built for 13.6 s
while both encoder actors waited (``qkv index --engine ray``, AMD EPYC).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

SEAL_ROWS = 1024
# A bulk job (``qkv index``) seals larger segments: Lite merges segments of similar size
# four at a time, so 1,024-row segments were rewritten (and re-indexed) four times on their
# way to 100,000 rows; these take one merge. Searches meanwhile see up to this many rows
# unsealed (slow, as above), which a bulk load can afford.
BULK_SEAL_ROWS = 32_768
SEAL_QUIET_S = 1.0


class Sealer:
    """Counts rows written per collection and flushes them (see the module docstring)."""

    def __init__(self, flush: Callable[[str], None], rows: int = SEAL_ROWS,
                 quiet_s: float | None = SEAL_QUIET_S) -> None:
        self._flush, self.rows, self.quiet_s = flush, rows, quiet_s
        self._waiting: dict[str, tuple[int, float]] = {}  # collection -> (rows, last write)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def wrote(self, collection: str, rows: int) -> None:
        """``rows`` were written (or deleted) in ``collection``."""
        if rows <= 0:
            return
        with self._cond:
            waiting = self._waiting.get(collection, (0, 0.0))[0] + rows
            self._waiting[collection] = (waiting, time.monotonic())
            if waiting < self.rows:
                if self.quiet_s is None:  # sealed by size, or on close
                    return
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, daemon=True,
                                                    name="qkv-lite-sealer")
                    self._thread.start()
                self._cond.notify()
                return
            del self._waiting[collection]
        self._flush(collection)

    def forget(self, collection: str) -> None:
        """``collection`` was sealed or dropped by someone else."""
        with self._cond:
            self._waiting.pop(collection, None)

    def pending(self) -> list[str]:
        with self._cond:
            return sorted(self._waiting)

    def stop(self) -> list[str]:
        """End the thread; the collections still waiting to be sealed."""
        with self._cond:
            waiting = sorted(self._waiting)
            self._waiting.clear()
            self._thread = None  # the thread ends when it sees this
            self._cond.notify_all()
        return waiting

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._thread is not threading.current_thread() or self.quiet_s is None:
                    return
                now = time.monotonic()
                due = [c for c, (_, last) in self._waiting.items() if now - last >= self.quiet_s]
                for c in due:
                    del self._waiting[c]
                if not due:
                    waits = [self.quiet_s - (now - last) for _, last in self._waiting.values()]
                    self._cond.wait(timeout=min(waits) if waits else None)
                    continue
            for collection in due:
                try:
                    self._flush(collection)
                except Exception as e:  # dropped meanwhile, or the store went away
                    log.warning("could not seal collection %s: %s", collection, e)
