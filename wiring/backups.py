"""Backups and restores for the service (``POST /v1/backups``, issue 72): the format and the
work are :mod:`index.backup`'s; here they run one at a time on the store's worker thread,
into and from the service's backup directory, named by the caller (a name, never a path),
with the default encoder to embed texts again where a backup's vectors are another
encoder's. ``qkv backup`` and ``qkv restore`` do the same from the command line (against
a store no server holds).

With ``wait`` false a backup or restore is a background job: the call answers at once with
its state, and :meth:`Backups.state` follows it. A job's state is a JSON file under the
backup directory's ``.jobs/`` (written as it starts, every minute as it runs, and as it
ends), so it outlives a restart and every replica that shares the directory reads it; one
a stopped server was running reads as failed ("interrupted"), to be run again.

The backup directory may be a bucket (``QKV_BACKUP_DIR=s3://BUCKET/PREFIX``,
:class:`wiring.backup_remote.BackupBucket`): a backup is then made in a temporary directory
and put under ``PREFIX/NAME/`` (manifest last), a restore downloads it first, and the jobs'
states live under ``PREFIX/.jobs/``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import tempfile
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
from wiring.backup_remote import BackupBucket
from wiring.errors import ConflictError, InvalidError, NotFoundError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
JOB = re.compile(r"(backup|restore)-[0-9a-f]{12}")
JOBS = ".jobs"
BEAT_S = 60.0  # a running job writes its state this often (another host's staleness: 600 s)


class Backups:
    def __init__(self, store: VectorStore, root: Path | BackupBucket, call: Any, encoder: Any,
                 info: EncoderInfo, writable: Any, encoders: Path | None = None) -> None:
        """``call`` runs store work off the event loop; ``encoder`` (and its ``info``) embeds
        texts again for a backup made by another encoder; ``writable()`` raises while writes
        must be refused (a full disk); ``encoders``: the derived encoders' directory (a
        collection's own goes into its backup, and back there on a restore). ``root`` is a
        directory, or a bucket."""
        self.store, self.root, self.call, self.encoders = store, root, call, encoders
        self.encoder, self.info, self.writable = encoder, info, writable
        self._busy = threading.Lock()
        self._live: dict[str, asyncio.Task[Any]] = {}  # this process's running jobs

    @staticmethod
    def _name(name: str) -> str:
        if not NAME.fullmatch(name):
            raise InvalidError(f"a backup name is 1..64 letters, digits, '_', '.' or '-', "
                               f"starting with a letter or digit; got {name[:80]!r}", "name")
        return name

    def _said(self, e: BackupError) -> Exception:
        """The error in the API's words, its files named within the backup directory (an
        answer names no server path; a bucket's objects are named by their URL)."""
        text = str(e)
        if isinstance(self.root, Path):
            text = text.replace(f"{self.root.resolve()}/", "").replace(f"{self.root}/", "")
        return ConflictError(text) if isinstance(e, BackupConflict) else InvalidError(text)

    # jobs
    def _save(self, state: dict[str, Any]) -> None:
        if isinstance(self.root, BackupBucket):
            self.root.save_json(f"{JOBS}/{state['id']}.json", state)
            return
        path = self.root / JOBS / f"{state['id']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1, default=str))
        tmp.replace(path)

    def _load(self, job_id: str) -> dict[str, Any] | None:
        if isinstance(self.root, BackupBucket):
            return self.root.load_json(f"{JOBS}/{job_id}.json")
        path = self.root / JOBS / f"{job_id}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    async def _job(self, kind: str, name: str, work: Any, wait: bool) -> dict[str, Any]:
        """Run ``work()`` (on the store's worker) as a job: its result when ``wait``, else
        its state at once; 409 while another backup or restore runs. While it runs, its
        state is written again every :data:`BEAT_S`."""
        if not self._busy.acquire(blocking=False):
            raise ConflictError("a backup or restore is running: try again when it is done")
        now = time.time()
        state: dict[str, Any] = {"id": f"{kind}-{uuid.uuid4().hex[:12]}", "kind": kind,
                                 "name": name, "state": "running", "owner": OWNER,
                                 "created_at": now, "updated_at": now}
        try:
            await asyncio.to_thread(self._save, state)
        except BaseException:
            self._busy.release()
            raise

        saving = asyncio.Lock()

        async def beat() -> None:
            """Write the state every BEAT_S while the job runs: another host reads a job
            whose state has not changed for 10 minutes as interrupted."""
            while True:
                await asyncio.sleep(BEAT_S)
                async with saving:
                    if state["state"] != "running":
                        return
                    state["updated_at"] = time.time()
                    with contextlib.suppress(Exception):  # the next beat tries again
                        await asyncio.to_thread(self._save, dict(state))

        async def run() -> dict[str, Any]:
            beating = asyncio.ensure_future(beat())
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
                beating.cancel()
                state["updated_at"] = time.time()
                self._busy.release()
                try:
                    async with saving:
                        await asyncio.to_thread(self._save, state)
                finally:  # live until its end is written, else a read says "interrupted"
                    self._live.pop(state["id"], None)

        task = asyncio.ensure_future(run())
        self._live[state["id"]] = task
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # kept in state
        if wait:
            return await asyncio.shield(task)  # a client that leaves does not stop it
        return dict(state)

    async def state(self, job_id: str) -> dict[str, Any]:
        """A backup or restore job's state; 404 for an unknown one."""
        # Whether it runs here is taken before its file is read: a job that ends during the
        # read writes its end before it leaves ``_live``, so a "running" read after it left
        # would be stale, not an interrupted job.
        live = job_id in self._live
        state = await asyncio.to_thread(self._load, job_id) if JOB.fullmatch(job_id) else None
        if state is None:
            raise NotFoundError(f"no backup job {job_id!r}")
        if state.get("state") == "running" and not live and not held_elsewhere(state):
            state.update(state="failed", error="interrupted: the server that ran it stopped; "
                         "run it again (a backup keeps the previous one whole, a restore "
                         "finishes where it stopped)")
        return state

    async def backup(self, name: str, collections: Sequence[str] | None, wait: bool = True
                     ) -> dict[str, Any]:
        """Back up ``collections`` (all when None) as ``name`` (replaced when complete):
        the manifest, or with ``wait`` false the job's state."""
        self._name(name)
        root = self.root

        def work() -> dict[str, Any]:
            if isinstance(root, BackupBucket):
                with tempfile.TemporaryDirectory(prefix="qkv-backup-") as tmp:
                    backup(self.store, Path(tmp) / name, collections, encoders=self.encoders)
                    return {"name": name, **root.put(Path(tmp) / name, name)}
            root.mkdir(parents=True, exist_ok=True)
            return {"name": name, **backup(self.store, root / name, collections,
                                           encoders=self.encoders)}

        if isinstance(root, BackupBucket):
            await asyncio.to_thread(root.client)  # 503 now when the bucket is not there
        return await self._job("backup", name, work, wait)

    def _listed(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        root = self.root
        if isinstance(root, BackupBucket):
            found: list[tuple[str, Any]] = [(n, lambda n=n: root.manifest(n))
                                            for n in root.names()]
        else:
            found = [(p.parent.name, lambda p=p: verify(p.parent))
                     for p in (sorted(root.glob(f"*/{MANIFEST}")) if root.is_dir() else [])]
        for name, read in found:
            try:
                m = read()
                if m is None:
                    continue  # parts a killed first backup left, no manifest: not a backup
                out.append({"name": name, "id": m["id"], "created": m["created"],
                            "collections": [{"name": c["name"], "rows": c["rows"]}
                                            for c in m["collections"]]})
            except BackupError as e:
                out.append({"name": name, "error": str(self._said(e))})
        return sorted(out, key=lambda b: b.get("created", ""), reverse=True)

    async def listed(self) -> list[dict[str, Any]]:
        """The backups, newest first (a damaged one says why: in a directory every part is
        checked, in a bucket the manifest; a restore checks the parts)."""
        return await asyncio.to_thread(self._listed)

    def _manifest(self, name: str) -> dict[str, Any]:
        """The backup's manifest, read and checked (not its parts); 404 when there is none."""
        try:
            if isinstance(self.root, BackupBucket):
                got = self.root.manifest(name)
            else:
                got = read_manifest(self.root / name) if (
                    self.root / name / MANIFEST).is_file() else None
        except BackupError as e:
            raise self._said(e) from e
        if got is None:
            raise NotFoundError(f"no backup {name!r} (GET /v1/backups lists them)")
        return got

    async def restore(self, name: str, collections: Sequence[str] | None,
                      as_: str | None, replace: bool, wait: bool = True) -> dict[str, Any]:
        """Restore the backup ``name`` (see :func:`index.backup.restore`): what was restored,
        or with ``wait`` false the job's state."""
        self._name(name)
        self.writable()
        held = [c["name"] for c in (await asyncio.to_thread(self._manifest, name))[
            "collections"]]  # the parts are checked by the restore itself
        rename = {}
        if as_ is not None:
            chosen = list(collections or held)
            if len(chosen) != 1:
                raise InvalidError("`as` names one collection: pick it in `collections`",
                                   "as")
            rename = {chosen[0]: as_}

        def embed(texts: Sequence[str]) -> Any:
            return self.encoder.encode(list(texts), batch_size=64)

        root = self.root

        def work() -> dict[str, Any]:
            if isinstance(root, BackupBucket):
                with root.fetch(name) as src:
                    done = restore(self.store, src, collections, rename, self.info, embed,
                                   replace, encoders=self.encoders)
            else:
                done = restore(self.store, root / name, collections, rename, self.info,
                               embed, replace, encoders=self.encoders)
            return {"restored": [asdict(r) for r in done]}

        return await self._job("restore", name, work, wait)
