"""Backups and restores for the service (``POST /v1/backups``, issue 72): the format and the
work are :mod:`index.backup`'s; here they run one at a time on the store's worker thread,
into and from the service's backup directory, named by the caller (a name, never a path),
with the default encoder to embed texts again where a backup's vectors are another
encoder's. ``qkv backup`` and ``qkv restore`` do the same from the command line (against
a store no server holds).

With ``wait`` false a backup or restore is a background job: the call answers at once with
its state, and :meth:`Backups.state` follows it. A job's state is a JSON file under the
backup directory's ``.jobs/`` (written as it starts and ends), so it outlives a restart
and every replica that shares the directory reads it; one a stopped server was running
reads as failed ("interrupted"), to be run again."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from index import VectorStore
from index.backup import (
    MANIFEST,
    BackupConflict,
    BackupError,
    backup,
    read_manifest,
    restore,
    verify,
)
from index.store import EncoderInfo
from wiring.adapting import OWNER, held_elsewhere
from wiring.errors import ConflictError, InvalidError, NotFoundError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
JOB = re.compile(r"(backup|restore)-[0-9a-f]{12}")
JOBS = ".jobs"


class Backups:
    def __init__(self, store: VectorStore, root: Path, call: Any, encoder: Any,
                 info: EncoderInfo, writable: Any, encoders: Path | None = None) -> None:
        """``call`` runs store work off the event loop; ``encoder`` (and its ``info``) embeds
        texts again for a backup made by another encoder; ``writable()`` raises while writes
        must be refused (a full disk); ``encoders``: the derived encoders' directory (a
        collection's own goes into its backup, and back there on a restore)."""
        self.store, self.root, self.call, self.encoders = store, root, call, encoders
        self.encoder, self.info, self.writable = encoder, info, writable
        self._busy = threading.Lock()
        self._live: dict[str, asyncio.Task[Any]] = {}  # this process's running jobs

    def _dir(self, name: str) -> Path:
        if not NAME.fullmatch(name):
            raise InvalidError(f"a backup name is 1..64 letters, digits, '_', '.' or '-', "
                               f"starting with a letter or digit; got {name[:80]!r}", "name")
        return self.root / name

    def _said(self, e: BackupError) -> Exception:
        """The error in the API's words, its files named within the backup directory (an
        answer names no server path)."""
        text = str(e).replace(f"{self.root.resolve()}/", "").replace(f"{self.root}/", "")
        return ConflictError(text) if isinstance(e, BackupConflict) else InvalidError(text)

    # jobs
    def _save(self, state: dict[str, Any]) -> None:
        path = self.root / JOBS / f"{state['id']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1, default=str))
        tmp.replace(path)

    async def _job(self, kind: str, name: str, work: Any, wait: bool) -> dict[str, Any]:
        """Run ``work()`` (on the store's worker) as a job: its result when ``wait``, else
        its state at once; 409 while another backup or restore runs."""
        if not self._busy.acquire(blocking=False):
            raise ConflictError("a backup or restore is running: try again when it is done")
        now = time.time()
        state: dict[str, Any] = {"id": f"{kind}-{uuid.uuid4().hex[:12]}", "kind": kind,
                                 "name": name, "state": "running", "owner": OWNER,
                                 "created_at": now, "updated_at": now}
        try:
            self._save(state)
        except BaseException:
            self._busy.release()
            raise

        async def run() -> dict[str, Any]:
            try:
                result: dict[str, Any] = await self.call(work)
                state.update(state="done", result=result)
                return result
            except BackupError as e:
                said = self._said(e)
                state.update(state="failed", error=str(said))
                raise said from e
            except Exception as e:
                state.update(state="failed", error=str(e) or type(e).__name__)
                raise
            finally:
                state["updated_at"] = time.time()
                self._live.pop(state["id"], None)
                self._busy.release()
                self._save(state)

        task = asyncio.ensure_future(run())
        self._live[state["id"]] = task
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # kept in state
        if wait:
            return await asyncio.shield(task)  # a client that leaves does not stop it
        return dict(state)

    def state(self, job_id: str) -> dict[str, Any]:
        """A backup or restore job's state; 404 for an unknown one."""
        path = self.root / JOBS / f"{job_id}.json"
        if not JOB.fullmatch(job_id) or not path.is_file():
            raise NotFoundError(f"no backup job {job_id!r}")
        state: dict[str, Any] = json.loads(path.read_text())
        if (state.get("state") == "running" and job_id not in self._live
                and not held_elsewhere(state)):
            state.update(state="failed", error="interrupted: the server that ran it stopped; "
                         "run it again (a backup keeps the previous one whole, a restore "
                         "finishes where it stopped)")
        return state

    async def backup(self, name: str, collections: Sequence[str] | None, wait: bool = True
                     ) -> dict[str, Any]:
        """Back up ``collections`` (all when None) as ``name`` (replaced when complete):
        the manifest, or with ``wait`` false the job's state."""
        dest = self._dir(name)
        self.root.mkdir(parents=True, exist_ok=True)

        def work() -> dict[str, Any]:
            return {"name": name, **backup(self.store, dest, collections,
                                           encoders=self.encoders)}

        return await self._job("backup", name, work, wait)

    def listed(self) -> list[dict[str, Any]]:
        """The backups in the directory, newest first (a damaged one says why)."""
        out = []
        for path in sorted(self.root.glob(f"*/{MANIFEST}")) if self.root.is_dir() else []:
            try:
                m = verify(path.parent)
                out.append({"name": path.parent.name, "id": m["id"], "created": m["created"],
                            "collections": [{"name": c["name"], "rows": c["rows"]}
                                            for c in m["collections"]]})
            except BackupError as e:
                out.append({"name": path.parent.name, "error": str(self._said(e))})
        return sorted(out, key=lambda b: b.get("created", ""), reverse=True)

    async def restore(self, name: str, collections: Sequence[str] | None,
                      as_: str | None, replace: bool, wait: bool = True) -> dict[str, Any]:
        """Restore the backup ``name`` (see :func:`index.backup.restore`): what was restored,
        or with ``wait`` false the job's state."""
        src = self._dir(name)
        self.writable()
        if not (src / MANIFEST).is_file():
            raise NotFoundError(f"no backup {name!r} (GET /v1/backups lists them)")
        rename = {}
        if as_ is not None:
            try:  # the parts are checked by the restore itself
                held = [c["name"] for c in read_manifest(src)["collections"]]
            except BackupError as e:
                raise self._said(e) from e
            chosen = list(collections or held)
            if len(chosen) != 1:
                raise InvalidError("`as` names one collection: pick it in `collections`",
                                   "as")
            rename = {chosen[0]: as_}

        def embed(texts: Sequence[str]) -> Any:
            return self.encoder.encode(list(texts), batch_size=64)

        def work() -> dict[str, Any]:
            done = restore(self.store, src, collections, rename, self.info, embed, replace,
                           encoders=self.encoders)
            return {"restored": [asdict(r) for r in done]}

        return await self._job("restore", name, work, wait)
