"""The service's hybrid calibration jobs (:mod:`wiring.calibrating`): one at a time, in a
worker thread, never on a request's path. A job starts on ``POST
/v1/collections/{name}/tune`` or by itself when an API-written collection has grown enough
(:func:`wiring.calibrating.due`, checked every :data:`CHECK_EVERY` documents this server
writes into it, or every ``QKV_AUTO_TUNE_MIN_DOCS`` when fewer). Its texts are embedded
through the service's batcher, so a calibration takes its turn with the requests.

A job's state is kept here and, as it starts and ends (and when a weight is set by hand),
stored with its collection (``set_calibration_job``): every replica of the service on the
same store answers ``GET .../tune`` with the collection's last job, whichever ran it
(:meth:`Calibrator.last`). A replica that stops mid-job leaves it ``running`` there; the
next job of that collection, on any replica, replaces it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from index import CollectionInfo, StoreError, VectorStore
from index.hybrid.calibration import Mapping
from wiring.calibrating import Labels, calibrate, check_calibratable, check_labels, documents, due

EmbedAsync = Callable[..., Coroutine[Any, Any, Any]]

log = logging.getLogger(__name__)
CHECK_EVERY = 1000  # documents written into a collection between two checks of due()


class Calibrator:
    """Calibration jobs by collection; :meth:`state` says how the last one went."""

    def __init__(self, store: VectorStore, embed: EmbedAsync, mapping: Mapping,
                 default_weight: float, auto: bool = True,
                 auto_min_docs: int = 1000) -> None:
        """``embed(texts, truncate, dim=..., collection=info)`` is the service's (it queues
        the texts for the collection's encoder and returns :class:`api.service.Embedded`)."""
        self.store, self.embed, self.mapping = store, embed, mapping
        self.default_weight = default_weight
        self.auto, self.auto_min_docs = auto, auto_min_docs
        self._jobs: dict[str, dict[str, Any]] = {}
        self._written: dict[str, int] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qkv-calibrate")

    def close(self) -> None:
        """Stop: queued calibrations are dropped, a running one fails at its next encoding."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def state(self, collection: str) -> dict[str, Any] | None:
        """The last calibration job of ``collection`` on this server (None: none)."""
        with self._lock:
            job = self._jobs.get(collection)
            return dict(job) if job is not None else None

    def last(self, info: CollectionInfo) -> dict[str, Any] | None:
        """The collection's last calibration job on any replica: this server's, or the one
        stored with ``info`` (as described), whichever was queued later."""
        jobs = [j for j in (self.state(info.name), info.calibration_job) if j]
        return max(jobs, key=lambda j: float(j.get("queued_at") or 0)) if jobs else None

    def _publish(self, job: dict[str, Any]) -> None:
        """Store a job's state with its collection, for the other replicas (a store that
        fails here fails no job: this server still answers with it)."""
        try:
            self.store.set_calibration_job(job["collection"], job)
        except StoreError as e:
            log.warning("calibration job of %s not stored with it: %s", job["collection"], e)

    def running(self, collection: str) -> bool:
        job = self.state(collection)
        return job is not None and job["state"] in ("queued", "running")

    def check(self, info: CollectionInfo, labels: Labels | None) -> None:
        """What a calibration request is refused for before it starts (the store's errors: 409 for
        a collection without BM25, 422 for labels naming unknown ids or an empty one)."""
        check_calibratable(info)
        if labels is not None:
            check_labels(self.store, info, labels)
        elif self._total(info) == 0:
            raise ValueError(f"collection {info.name!r} has no documents to calibrate on")

    def _total(self, info: CollectionInfo) -> int:
        """Documents in the collection, every tenant's (a multi-tenant collection counts
        per tenant: its total comes with a sample of none)."""
        if info.multi_tenant:  # rows: with passages, a little more than documents
            return self.store.sample(info.name, 0)[1]
        return documents(self.store, info)

    def set_by_hand(self, collection: str, state: dict[str, Any]) -> None:
        """A weight set by hand is the collection's last calibration (a job's older result would
        show another weight beside it)."""
        now = time.time()
        with self._lock:
            job = self._jobs.get(collection)
            if job is not None and job["state"] in ("queued", "running"):
                return
            job = self._jobs[collection] = {**state, "queued_at": now, "started_at": now,
                                            "finished_at": now}
        self._publish(dict(job))

    def _queue(self, collection: str, reason: str) -> None:
        with self._lock:
            self._jobs[collection] = {"collection": collection, "state": "queued",
                                      "reason": reason, "queued_at": time.time()}

    def start(self, info: CollectionInfo, labels: Labels | None = None, seed: int = 0,
              reason: str = "request") -> Future[dict[str, Any]]:
        """Queue a calibration of ``info``'s collection; the future gives its final state."""
        loop = asyncio.get_running_loop()
        self._queue(info.name, reason)
        return self._pool.submit(self._run, loop, info, labels, seed)

    def _run(self, loop: asyncio.AbstractEventLoop, info: CollectionInfo,
             labels: Labels | None, seed: int) -> dict[str, Any]:
        self._publish(self._update(info.name, state="running", started_at=time.time()))
        done = self._calibrate(loop, info, labels, seed)
        self._publish(done)
        return done

    def _calibrate(self, loop: asyncio.AbstractEventLoop, info: CollectionInfo,
                   labels: Labels | None, seed: int) -> dict[str, Any]:

        def embed(texts: Any) -> np.ndarray:
            fut = asyncio.run_coroutine_threadsafe(
                self.embed(list(texts), True, dim=info.dim, collection=info), loop)
            while True:  # the loop may stop meanwhile: never wait on it for ever
                try:
                    return fut.result(timeout=0.5).vectors
                except TimeoutError:
                    if self._closed.is_set():
                        fut.cancel()
                        raise RuntimeError("the service is stopping") from None

        try:
            cal = calibrate(self.store, info.name, embed, self.mapping, self.default_weight,
                            labels, seed)
        except ValueError as e:  # ours: names the collection or field
            log.warning("calibrating %s failed: %s", info.name, e)
            return self._update(info.name, state="failed", error=str(e),
                                finished_at=time.time())
        except StoreError as e:  # its text may name a server path: logged, not shown
            log.warning("calibrating %s failed: %s", info.name, e)
            return self._update(info.name, state="failed",
                                error=f"the store failed while tuning collection "
                                      f"{info.name!r} ({type(e).__name__}); try again",
                                finished_at=time.time())
        except Exception as e:  # a worker thread: say so instead of dying silently
            if not self._closed.is_set():
                log.exception("calibrating %s failed", info.name)
            return self._update(info.name, state="failed",
                                error=f"internal error: {type(e).__name__}",
                                finished_at=time.time())
        return self._update(info.name, state="done", calibration=cal.to_dict(),
                            finished_at=time.time())

    def _update(self, collection: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            job = self._jobs.setdefault(collection, {"collection": collection})
            job.update(fields)
            return dict(job)

    def wrote(self, info: CollectionInfo, rows: int) -> None:
        """``rows`` documents were just written into ``info``'s collection: every
        :data:`CHECK_EVERY` of them, start a calibration if it is due (in the background)."""
        if not self.auto or not info.hybrid or rows <= 0:
            return
        every = min(CHECK_EVERY, self.auto_min_docs)
        with self._lock:
            n = self._written.get(info.name, 0) + rows
            self._written[info.name] = n % every
            if n < every:
                return
        if self.running(info.name):
            return
        loop = asyncio.get_running_loop()
        self._pool.submit(self._auto, loop, info.name)

    def filled(self, collection: str) -> None:
        """A collection was just filled in the background (a demo): calibrate it if it is due."""
        if self.auto and not self._closed.is_set():
            self._pool.submit(self._auto, asyncio.get_running_loop(), collection)

    def _auto(self, loop: asyncio.AbstractEventLoop, collection: str) -> None:
        if self._closed.is_set():
            return
        try:
            info = self.store.describe(collection)
            # a passages collection counts its documents through a metadata filter (1.5 s at
            # 29,000, against 0.3 s for its rows): its rows, never fewer than its documents,
            # answer first when it is not due (due() grows with the count)
            if info.passages and not info.multi_tenant and \
                    not due(info, self.store.count(collection), self.auto_min_docs):
                return
            count = self._total(info)
        except StoreError as e:
            log.warning("could not check whether %s needs calibrating: %s", collection, e)
            return
        if due(info, count, self.auto_min_docs):
            self._queue(collection, f"grown to {count} documents")
            self._run(loop, info, None, 0)
