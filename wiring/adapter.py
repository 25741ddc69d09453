"""The service's adapt jobs (:mod:`wiring.adapting`): one at a time, in a worker thread,
with their progress in ``GET /v1/jobs/{id}`` read from their journals (which outlive a
restart). Writes into a collection being re-indexed go to its copy too (:meth:`shadow`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from index import CollectionInfo, EncoderInfo, Item, StoreError, VectorStore
from wiring import adapting
from wiring.adapting import Journal, Shadow
from wiring.calibrating import embed_at
from wiring.encoders import Encoders
from wiring.errors import ConflictError, NotFoundError

log = logging.getLogger(__name__)


class Adapter:
    def __init__(self, store: VectorStore, encoders: Encoders, calibrate: Callable[..., Any],
                 workers: int = 1) -> None:
        """``calibrate(store, target, embed)`` self-calibrates a collection's hybrid.
        ``workers``: threads re-embedding at once, where the service's encoders run each
        call on one thread (one batch per core, ``api.service``)."""
        self.store, self.encoders, self.calibrate = store, encoders, calibrate
        self.workers = workers
        self.root: Path | None = encoders.root
        self.shadows: dict[str, Shadow] = {}
        self.last_swap = float("-inf")  # time.monotonic() of the last swap
        self._running: dict[str, str] = {}  # physical collection -> job id
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qkv-adapt")

    def recover(self) -> list[str]:
        """Finish or clean up the jobs a previous process left (see wiring.adapting)."""
        if self.root is None or not (self.root / "jobs").is_dir():
            return []
        said = adapting.recover(self.store, self.root, self._exclusive)
        for line in said:
            log.warning("adapt job after a restart: %s", line)
        return said

    def _exclusive(self) -> Any:
        held = getattr(self.store, "exclusive", None)
        return held() if held is not None else nullcontext()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def state(self, job: str) -> dict[str, Any]:
        if self.root is not None and adapting.JOB_ID.match(job):
            path = self.root / "jobs" / f"{job}.json"
            if path.is_file():
                return Journal.load(path).state
        raise NotFoundError(f"no job {job!r}")

    def start(self, info: CollectionInfo, name: str, budget_s: float, force: bool
              ) -> tuple[dict[str, Any], Future[dict[str, Any]]]:
        """Queue an adapt job of collection ``name`` (``info`` is what it resolves to);
        409 while another adapt of it runs."""
        if self.root is None:
            raise ConflictError("this service has no encoders directory (QKV_ENCODERS_DIR)")
        base = self.encoders.of(info)
        with self._lock:
            if info.name in self._running:
                raise ConflictError(f"collection {name!r} is being adapted already (job "
                               f"{self._running[info.name]})")
            journal = Journal.new(self.root, name, {"budget_s": budget_s, "force": force})
            self._running[info.name] = journal.state["id"]
        return journal.state, self._pool.submit(self._run, journal, base.path, info.name)

    def _run(self, journal: Journal, base: Path, physical: str) -> dict[str, Any]:
        assert self.root is not None
        try:
            return adapting.run(self.store, journal, base, self.root, self._embed_with,
                                self.shadows, self._exclusive,
                                lambda target, embed, held: self.calibrate(
                                    self.store, target, embed, held), self._swapping)
        except ValueError as e:  # ours: names the collection or the reason
            journal.update(phase="failed", reason=str(e))
        except StoreError as e:  # its text may name a server path: logged, not shown
            log.warning("adapt job %s: %s", journal.state["id"], e)
            journal.update(phase="failed", reason=f"the store failed ({type(e).__name__}); "
                           "the collection was left as it was: try again")
        except Exception as e:  # a worker thread: say so instead of dying silently
            log.exception("adapt job %s failed", journal.state["id"])
            journal.update(phase="failed", reason=f"internal error: {type(e).__name__}; "
                           "the collection was left as it was")
        finally:
            with self._lock:
                self._running.pop(physical, None)
        target = journal.state.get("target")
        if target and journal.state["phase"] == "failed":
            try:
                if target not in self.store.list_aliases().values():
                    self.store.drop(target)
            except StoreError:
                log.warning("adapt job %s: its copy %s was left", journal.state["id"], target)
        return journal.state

    def _embed_with(self, encoder: str) -> tuple[adapting.Embed, EncoderInfo, list[int]]:
        served = self.encoders.get(encoder)

        def embed(texts: Sequence[str]) -> np.ndarray:
            enc = self.encoders.get(encoder).encoder  # reloaded if the registry unloaded it
            chunks = _chunks(list(texts), self.workers)
            if len(chunks) == 1:
                return np.asarray(enc.encode(chunks[0], batch_size=64), np.float32)
            with ThreadPoolExecutor(len(chunks), thread_name_prefix="qkv-adapt-embed") as pool:
                parts = list(pool.map(lambda c: enc.encode(c, batch_size=64), chunks))
            return np.concatenate(parts).astype(np.float32, copy=False)
        return embed, served.info, list(served.encoder.dims)

    def _swapping(self) -> None:
        self.last_swap = time.monotonic()

    def swapped_lately(self, within_s: float = 30.0) -> bool:
        """Whether an adapt job moved a collection's name in the last ``within_s``: a call
        that failed on the old collection is tried once more on the new one."""
        return time.monotonic() - self.last_swap < within_s

    # writes during a re-index (the routes call these after their own write)
    def shadow(self, info: CollectionInfo) -> Shadow | None:
        return self.shadows.get(info.name)

    def mirror_upsert(self, info: CollectionInfo, items: list[Item]) -> None:
        sh = self.shadows.get(info.name)
        if sh is None:
            return
        embed, full, _ = self._embed_with(sh.encoder)  # as the job's own copy embeds them
        adapting.copy_items(self.store, sh.target, items, embed_at(embed, info.dim),
                            EncoderInfo(full.name, full.fingerprint, info.dim))

    def mirror_delete(self, info: CollectionInfo, ids: list[str]) -> None:
        sh = self.shadows.get(info.name)
        if sh is not None:
            self.store.delete(sh.target, ids)


def _chunks(texts: list[str], workers: int, least: int = 64) -> list[list[str]]:
    """``texts`` cut into at most ``workers`` runs in order, none under ``least`` texts."""
    if not texts:
        return [texts]
    n = max(1, min(workers, len(texts) // least))
    size = -(-len(texts) // n)
    return [texts[i:i + size] for i in range(0, len(texts), size)]
