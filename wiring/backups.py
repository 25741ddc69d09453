"""Backups and restores for the service (``POST /v1/backups``, issue 72): the format and the
work are :mod:`index.backup`'s; here they run one at a time on the store's worker thread,
into and from the service's backup directory, named by the caller (a name, never a path),
with the default encoder to embed texts again where a backup's vectors are another
encoder's. ``qkv backup`` and ``qkv restore`` do the same from the command line (against
a store no server holds)."""

from __future__ import annotations

import re
import threading
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
from wiring.errors import ConflictError, InvalidError, NotFoundError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Backups:
    def __init__(self, store: VectorStore, root: Path, call: Any, encoder: Any,
                 info: EncoderInfo, writable: Any) -> None:
        """``call`` runs store work off the event loop; ``encoder`` (and its ``info``) embeds
        texts again for a backup made by another encoder; ``writable()`` raises while writes
        must be refused (a full disk)."""
        self.store, self.root, self.call = store, root, call
        self.encoder, self.info, self.writable = encoder, info, writable
        self._busy = threading.Lock()

    def _dir(self, name: str) -> Path:
        if not NAME.fullmatch(name):
            raise InvalidError(f"a backup name is 1..64 letters, digits, '_', '.' or '-', "
                               f"starting with a letter or digit; got {name[:80]!r}", "name")
        return self.root / name

    def _one_at_a_time(self, fn: Any, *args: Any) -> Any:
        if not self._busy.acquire(blocking=False):
            raise ConflictError("a backup or restore is running: try again when it is done")
        try:
            return fn(*args)
        except BackupError as e:
            raise self._said(e) from e
        finally:
            self._busy.release()

    def _said(self, e: BackupError) -> Exception:
        """The error in the API's words, its files named within the backup directory (an
        answer names no server path)."""
        text = str(e).replace(f"{self.root.resolve()}/", "").replace(f"{self.root}/", "")
        return ConflictError(text) if isinstance(e, BackupConflict) else InvalidError(text)

    async def backup(self, name: str, collections: Sequence[str] | None) -> dict[str, Any]:
        """Back up ``collections`` (all when None) as ``name`` (replaced when complete)."""
        dest = self._dir(name)
        self.root.mkdir(parents=True, exist_ok=True)
        manifest: dict[str, Any] = await self.call(self._one_at_a_time, backup, self.store,
                                                   dest, collections)
        return {"name": name, **manifest}

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
                      as_: str | None, replace: bool) -> list[dict[str, Any]]:
        """Restore the backup ``name`` (see :func:`index.backup.restore`)."""
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

        done = await self.call(self._one_at_a_time, restore, self.store, src, collections,
                               rename, self.info, embed, replace)
        return [asdict(r) for r in done]
