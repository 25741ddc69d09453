"""Backups of collections, and restoring them into any store (issue 72).

A backup is a directory::

    manifest.json                      what it holds (below), written last
    COLLECTION/part-00000.parquet      its rows, ROWS_PER_FILE a file
    COLLECTION/part-00001.parquet ...

Each row is one stored row, as the store keeps it: ``id``, ``tenant`` (null outside a
multi-tenant collection), ``text``, ``value``, ``metadata`` (JSON text), ``vector``
(``dim`` float32s) and ``keywords`` (the analysed terms a hybrid collection's BM25 indexes
for the row, where the store gives them back: a passage's window; null otherwise, and
absent from backups made before it, whose rows a restore indexes by their text). A
collection with passages (:mod:`index.passages`) is backed up as its rows are, heads and
passages alike, so it restores exactly. ``manifest.json``::

    {"format": "qkv-backup", "version": 1, "id": "...", "created": "2026-11-29T01:02:03Z",
     "collections": [{"name", "dim", "encoder": {"name", "fingerprint", "dim"} | null,
                      "hybrid", "multi_tenant", "calibration", "passages", "aliases",
                      "rows", "parts": [{"path", "rows", "sha256"}]}]}

**Backing up** (:func:`backup`) reads each collection page by page in id order
(:meth:`~index.store.VectorStore.scan`, every tenant's rows) into ``.NAME.partial`` beside
the destination, then puts it in place in one rename (the previous backup is kept until
then, as ``NAME`` itself, and is removed only after). A kill leaves the previous backup
whole and a ``.partial`` directory that the next run clears and redoes; one between the two
renames (``NAME`` moved to ``.NAME.old``, the new one not yet in place) is put right by the
next run (:func:`recover`) before anything else. Taken while writes go
on, a backup is not a snapshot of one moment: each page is as the store had it when it was
read, so a write that lands during the backup may or may not be in it (a document upserted
with passages may be caught half-written, as a reader may catch it: the head names the
version whose passages count, and reads, in the backup's restored collection too, ignore
the others).

**Encoders.** A collection made by a derived encoder (``qkv adapt``'s, in the encoders
directory) gets that checkpoint's files in the backup, under ``encoders/NAME/``, listed in
its entry's ``encoder_files``; a restore given the target's encoders directory installs it
there (whole or absent; refused if another checkpoint of that name is there) and keeps the
collection's vectors.

**Verifying** (:func:`verify`): the manifest's format and version, then every part: present,
its SHA-256 and its row count as the manifest says, and every encoder file's SHA-256. A
restore verifies everything first and refuses a backup that fails, naming the file and the
reason, before it creates anything.

**Restoring** (:func:`restore`) puts a collection under a staging name (``NAME__r`` and the
backup's id), fills it, sets its calibration and passages settings, checks its row count,
and only then points the alias ``NAME`` at it (and the backup's other aliases): readers
see nothing, then the whole collection. A restore killed half-way is finished by running it
again (the staging collection is kept and rows are upserted by id). Vectors are reused when
the target encoder's fingerprint is the one that made them; otherwise the texts are
embedded again (``embed``). A store without BM25 (a Milvus server before 2.5) gets a dense
collection, and the report says so. A name that is already a collection, or an alias of
another collection, is refused unless ``replace`` (then the alias moves, in one step).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from index.store import (
    EncoderInfo,
    Item,
    StoreError,
    UnsupportedError,
    VectorStore,
)

log = logging.getLogger(__name__)

FORMAT = "qkv-backup"
VERSION = 1
MANIFEST = "manifest.json"
ROWS_PER_FILE = 100_000
PAGE = 10_000  # rows read or written at a time
STAGING = "__r"  # restored into NAME + STAGING + the backup's id, then aliased as NAME

Embed = Callable[[Sequence[str]], np.ndarray]


class BackupError(StoreError):
    """A backup that cannot be read, or a restore that cannot go ahead (the message names
    the file or the collection, and why)."""


class BackupConflict(BackupError):
    """A restore whose name is taken (a collection, or an alias of another one)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


ENCODERS = "encoders"  # a backup's copies of derived encoders: ENCODERS/NAME/FILE


def _checkpoint(root: Path, name: str) -> bool:
    """Whether ``root/name`` holds an encoder checkpoint (a name, never a path)."""
    return ("/" not in name and "\\" not in name and not name.startswith(".")
            and (root / name / "model.safetensors").is_file())


def _copy_encoder(src: Path, partial: Path, name: str) -> list[dict[str, Any]]:
    """Copy the checkpoint ``src`` into the backup being written: its files' entries."""
    out = []
    (partial / ENCODERS / name).mkdir(parents=True, exist_ok=True)
    for f in sorted(p for p in src.iterdir() if p.is_file() and not p.name.endswith(".tmp")):
        rel = f"{ENCODERS}/{name}/{f.name}"
        shutil.copyfile(f, partial / rel)
        out.append({"path": rel, "bytes": f.stat().st_size, "sha256": _sha256(partial / rel)})
    return out


def _install_encoder(src: Path, files: list[dict[str, Any]], root: Path, name: str) -> None:
    """Put a backed-up checkpoint in the encoders directory ``root`` as ``name`` (written
    beside, then renamed: whole or absent); one already there must be the same files."""
    target = root / name
    if target.exists():
        for f in files:
            there = target / Path(f["path"]).name
            if not there.is_file() or _sha256(there) != f["sha256"]:
                raise BackupError(f"{there}: the encoders directory holds another {name!r} "
                                  "than the backup's; move it away, or restore without "
                                  "the encoder (the texts are then embedded again)")
        return
    tmp = root / f".{name}.restoring"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in files:
        shutil.copyfile(src / f["path"], tmp / Path(f["path"]).name)
    tmp.rename(target)


def _schema(dim: int) -> Any:
    import pyarrow as pa

    return pa.schema([("id", pa.string()), ("tenant", pa.string()), ("text", pa.string()),
                      ("value", pa.string()), ("metadata", pa.string()),
                      ("vector", pa.list_(pa.float32(), dim)), ("keywords", pa.string())])


def _table(items: Sequence[Item], dim: int) -> Any:
    import pyarrow as pa

    vectors = np.stack([np.asarray(it.vector, np.float32) for it in items]) if items else \
        np.zeros((0, dim), np.float32)
    flat = pa.array(vectors.reshape(-1), pa.float32())
    return pa.table({
        "id": pa.array([it.id for it in items], pa.string()),
        "tenant": pa.array([it.tenant for it in items], pa.string()),
        "text": pa.array([it.text for it in items], pa.string()),
        "value": pa.array([it.value for it in items], pa.string()),
        "metadata": pa.array([json.dumps(it.metadata, ensure_ascii=False) for it in items],
                             pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
        "keywords": pa.array([it.keywords for it in items], pa.string())}, schema=_schema(dim))


def _write_collection(store: VectorStore, name: str, folder: Path, dim: int,
                      progress: Callable[[str, int], None] | None) -> tuple[int, list[dict]]:
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    parts: list[dict[str, Any]] = []
    writer, path, in_file, total = None, None, 0, 0

    def close() -> None:
        nonlocal writer
        if writer is not None and path is not None:
            writer.close()
            parts.append({"path": f"{folder.name}/{path.name}", "rows": in_file,
                          "sha256": _sha256(path)})
        writer = None

    for page in store.scan(name, batch_size=PAGE, every_tenant=True):
        if not page:
            continue
        if writer is None or in_file >= ROWS_PER_FILE:
            close()
            path = folder / f"part-{len(parts):05d}.parquet"
            writer, in_file = pq.ParquetWriter(path, _schema(dim), compression="zstd"), 0
        writer.write_table(_table(page, dim))
        in_file += len(page)
        total += len(page)
        if progress is not None:
            progress(name, total)
    close()
    return total, parts


def backup(store: VectorStore, dest: str | Path, names: Sequence[str] | None = None,
           progress: Callable[[str, int], None] | None = None,
           encoders: Path | None = None) -> dict[str, Any]:
    """Back up ``names`` (collections or aliases; every collection when None) into the
    directory ``dest`` (see the module docstring); returns the manifest. ``encoders``: the
    directory of derived encoders (``qkv adapt``'s): a collection made by one of them gets
    its checkpoint in the backup."""
    dest = Path(dest)
    aliases = store.list_aliases()
    wanted = sorted(store.list_collections()) if names is None else \
        list(dict.fromkeys(aliases.get(n, n) for n in names))
    infos = [store.describe(n) for n in wanted]  # 404 before anything is written
    partial = dest.parent / f".{dest.name}.partial"
    recover(dest)
    if partial.exists():
        shutil.rmtree(partial)  # an earlier run that did not finish: done again
    partial.mkdir(parents=True)
    manifest: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "id": uuid.uuid4().hex,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "collections": []}
    copied: dict[str, list[dict[str, Any]]] = {}
    for info in infos:
        t0 = time.perf_counter()
        rows, parts = _write_collection(store, info.name, partial / info.name, info.dim,
                                        progress)
        files = None
        made_by = info.encoder.name if info.encoder is not None else None
        if encoders is not None and made_by is not None and _checkpoint(encoders, made_by):
            if made_by not in copied:
                copied[made_by] = _copy_encoder(encoders / made_by, partial, made_by)
            files = copied[made_by]
        manifest["collections"].append({
            "name": info.name, "dim": info.dim,
            "encoder": info.encoder.to_dict() if info.encoder else None,
            "hybrid": info.hybrid, "multi_tenant": info.multi_tenant,
            "calibration": info.calibration, "passages": info.passages,
            "aliases": sorted(a for a, c in aliases.items() if c == info.name),
            "rows": rows, "parts": parts, "seconds": round(time.perf_counter() - t0, 2),
            **({"encoder_files": files} if files else {})})
    with open(partial / MANIFEST, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    old = dest.parent / f".{dest.name}.old"
    if old.exists():
        shutil.rmtree(old)
    if dest.exists():
        dest.rename(old)
    partial.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    return manifest


def recover(dest: Path) -> None:
    """Put a backup killed between its two renames back in place: the new one when it was
    complete (its manifest is written last), else the previous one."""
    partial = dest.parent / f".{dest.name}.partial"
    old = dest.parent / f".{dest.name}.old"
    if dest.exists() or not old.exists():
        return
    if (partial / MANIFEST).is_file():
        partial.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.rename(dest)


def read_manifest(src: str | Path) -> dict[str, Any]:
    """The manifest of the backup in ``src``, its format and version checked, its parts not
    (:func:`verify` checks them); :class:`BackupError` naming the file and the reason."""
    path = Path(src) / MANIFEST
    if not path.is_file():
        raise BackupError(f"{path}: no manifest (not a backup, or one that did not finish)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise BackupError(f"{path}: unreadable manifest ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{path}: not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise BackupError(f"{path}: version {manifest.get('version')!r}; this qkv reads "
                          f"version {VERSION}")
    return manifest


def verify(src: str | Path) -> dict[str, Any]:
    """The manifest of the backup in ``src``, every part checked (see the module
    docstring); :class:`BackupError` naming the file and the reason."""
    import pyarrow.parquet as pq

    src = Path(src)
    path = src / MANIFEST
    manifest = read_manifest(src)
    for c in manifest.get("collections", []):
        total = 0
        for part in c["parts"]:
            file = src / part["path"]
            if not file.is_file():
                raise BackupError(f"{file}: missing")
            if _sha256(file) != part["sha256"]:
                raise BackupError(f"{file}: checksum differs from the manifest's (damaged)")
            rows = pq.ParquetFile(file).metadata.num_rows
            if rows != part["rows"]:
                raise BackupError(f"{file}: {rows} rows, the manifest says {part['rows']}")
            total += rows
        if total != c["rows"]:
            raise BackupError(f"{path}: collection {c['name']!r} has {total} rows in its "
                              f"files, the manifest says {c['rows']}")
        for f in c.get("encoder_files") or []:
            file = src / f["path"]
            if not file.is_file():
                raise BackupError(f"{file}: missing")
            if _sha256(file) != f["sha256"]:
                raise BackupError(f"{file}: checksum differs from the manifest's (damaged)")
    return manifest


def _rows(src: Path, c: dict[str, Any]) -> Iterator[list[Item]]:
    import pyarrow.parquet as pq

    for part in c["parts"]:
        for batch in pq.ParquetFile(src / part["path"]).iter_batches(batch_size=PAGE):
            cols = {name: batch.column(name).to_pylist()  # the vectors stay in numpy
                    for name in ("id", "tenant", "text", "value", "metadata")}
            # a backup from before keywords: its rows are indexed by their text
            keywords = (batch.column("keywords").to_pylist()
                        if "keywords" in batch.schema.names else [None] * len(batch))
            vectors = batch.column("vector").flatten().to_numpy(zero_copy_only=False)
            vectors = vectors.reshape(len(batch), c["dim"]).astype(np.float32)
            yield [Item(id=i, vector=vectors[r], text=t or "", value=v,
                        metadata=json.loads(m) if m else {}, tenant=tn, keywords=kw)
                   for r, (i, tn, t, v, m, kw) in enumerate(zip(
                       cols["id"], cols["tenant"], cols["text"], cols["value"],
                       cols["metadata"], keywords, strict=True))]


@dataclass
class Restored:
    """What a restore did for one collection."""

    name: str  # the name readers use (an alias)
    collection: str  # the collection that holds it
    rows: int
    reused_vectors: bool
    dropped: list[str] = field(default_factory=list)  # what the target store could not keep
    aliases: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _free(store: VectorStore, name: str, staging: str, replace: bool) -> None:
    """Refuse ``name`` when it is a collection, or an alias of another collection (unless
    ``replace``: the alias then moves)."""
    if name in store.list_collections():
        raise BackupConflict(f"collection {name!r} exists: restore under another name (--as), "
                          "or drop it first")
    target = store.list_aliases().get(name)
    if target is not None and target != staging and not replace:
        raise BackupConflict(f"alias {name!r} points at {target!r}: restore with --replace to "
                          "move it to the restored collection, or under another name (--as)")


def restore(store: VectorStore, src: str | Path, names: Sequence[str] | None = None,
            rename: dict[str, str] | None = None, encoder: EncoderInfo | None = None,
            embed: Embed | None = None, replace: bool = False,
            progress: Callable[[str, int], None] | None = None,
            encoders: Path | None = None) -> list[Restored]:
    """Restore the backup in ``src`` (``names``: those of its collections; all when None)
    into ``store``, each as ``rename.get(name, name)`` (see the module docstring).
    ``encoder``: the encoder the target serves (None: keep the backup's); vectors are
    reused when its fingerprint and dimension are the backup's, else the texts are embedded
    with ``embed``. ``encoders``: the target's directory of derived encoders: a collection
    whose encoder the backup holds gets it installed there and keeps its vectors."""
    src = Path(src)
    manifest = verify(src)
    rename = rename or {}
    chosen = [c for c in manifest["collections"] if names is None or c["name"] in names]
    missing = sorted(set(names or ()) - {c["name"] for c in chosen})
    if missing:
        held = ", ".join(c["name"] for c in manifest["collections"]) or "none"
        raise BackupError(f"{src / MANIFEST}: no collection {missing[0]!r} in this backup "
                          f"(it has {held})")
    plans = []
    for c in chosen:  # every refusal before anything is created
        name = rename.get(c["name"], c["name"])
        staging = f"{name}{STAGING}{manifest['id'][:8]}"
        _free(store, name, staging, replace)
        made_by = EncoderInfo.from_dict(c["encoder"]) if c["encoder"] else None
        brought = encoders is not None and made_by is not None and bool(c.get("encoder_files"))
        reuse = encoder is None or brought or (made_by is not None
                                               and made_by.fingerprint == encoder.fingerprint
                                               and made_by.dim == encoder.dim)
        if not reuse and embed is None:
            raise BackupError(f"collection {c['name']!r} was embedded by another encoder "
                              f"({made_by.name if made_by else 'unknown'}); restoring it "
                              "needs the texts embedded again")
        plans.append((c, name, staging, made_by if reuse else encoder, reuse))
    for c, *_ in plans:  # the encoders they bring, before any collection is made
        if encoders is not None and c.get("encoder_files") and c["encoder"]:
            _install_encoder(src, c["encoder_files"], encoders, c["encoder"]["name"])
    out = []
    for c, name, staging, enc, reuse in plans:
        t0 = time.perf_counter()
        dim = c["dim"] if reuse or enc is None else enc.dim
        dropped = []
        hybrid = bool(c["hybrid"])
        if hybrid and not store.bm25_available():
            hybrid = False
            dropped.append("BM25 (this store has none): restored as a dense collection, "
                           "its hybrid calibration left out")
        try:
            store.create(staging, dim, enc, exist_ok=True, hybrid=hybrid,
                         multi_tenant=bool(c["multi_tenant"]))
        except UnsupportedError as e:
            raise BackupError(f"collection {c['name']!r}: {e}") from e
        done, tenants = 0, set()
        for page in _rows(src, c):
            tenants |= {it.tenant for it in page}
            if not reuse:
                assert embed is not None
                vectors = embed([it.text for it in page])
                for it, v in zip(page, vectors, strict=True):
                    it.vector = np.asarray(v, np.float32)
            store.upsert(staging, page, enc)
            done += len(page)
            if progress is not None:
                progress(name, done)
        if c["passages"] is not None:
            store.set_passages(staging, c["passages"])
        if hybrid and c["calibration"] is not None:
            store.set_calibration(staging, c["calibration"])
        have = sum(store.count(staging, tenant=t)
                   for t in (tenants if c["multi_tenant"] else {None}))
        if have != c["rows"]:
            raise BackupError(f"collection {staging!r} holds {have} rows after the restore, "
                              f"the backup {c['rows']}: run the restore again")
        settle = getattr(store, "settle", None)  # a server's index built before readers come
        if settle is not None:
            settle(staging)
        store.set_alias(name, staging)
        moved = [name]
        for alias in c["aliases"]:
            if alias == name or alias in store.list_collections():
                continue
            if store.list_aliases().get(alias) not in (None, staging) and not replace:
                dropped.append(f"alias {alias!r} (it points at another collection)")
                continue
            store.set_alias(alias, staging)
            moved.append(alias)
        out.append(Restored(name, staging, done, reuse, dropped, moved,
                            round(time.perf_counter() - t0, 2)))
        log.info("restored %s as %s (%d rows)", c["name"], staging, done)
    return out

