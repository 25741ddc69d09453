"""``FaissStore``: the key-value memory in process, flat (exact) or HNSW, on disk.

Each collection is a directory under the store's root: ``collection.json`` (dim, encoder,
index type, hybrid), a snapshot (:mod:`index.faiss.memory`) and a write-ahead log
``log.jsonl`` that every upsert and delete appends to and fsyncs before returning, so a
write that returned survives a kill. Opening replays the log, and folds it into a new
snapshot once it has grown past :data:`COMPACT_LOG_BYTES` (:meth:`FaissStore.compact`), so
a restart's replay stays short. The faiss index is rebuilt lazily after writes. A filtered
search is exact over the matching items. With ``index_type="flat"`` this is the exact
reference that approximate stores' recall is measured against.

A hybrid collection also has a BM25 index of the items' text (:mod:`index.hybrid.bm25`, over
:func:`index.hybrid.analysis.analyze`'s terms, or an item's own ``keywords``: a passage's
window, :mod:`index.passages`; scored as Milvus' BM25 function scores), built in process,
lazily after writes like the faiss index; nothing of it is stored but the texts and keywords.
Searches take ``mode`` ``dense``, ``bm25`` or ``hybrid`` as on Milvus, through the steps
every backend shares (:func:`index.steps.search`: both sides ``candidates(k)`` deep, fused).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from index import steps
from index.aliases import AliasCache, check_drop, checked_set
from index.bulk.ranges import write_json
from index.faiss.memory import Memory, decode_item, encode_item, read_snapshot, write_snapshot
from index.filters import Filter, matches
from index.hybrid.fusion import DEFAULT_DENSE_WEIGHT, DEFAULT_FUSION
from index.steps import Vectors, check_new, check_search, writable
from index.store import (
    CollectionInfo,
    CollectionNotFoundError,
    EncoderInfo,
    Hit,
    Item,
    check_collection_name,
    check_same,
)
from index.tenancy import check_tenant, local_id, stored_id

log = logging.getLogger(__name__)

INDEX_TYPES = ("flat", "hnsw")
COMPACT_LOG_BYTES = 16 * 2**20  # a log this long is folded into the snapshot at open


class FaissStore:
    """:class:`index.store.VectorStore` on faiss, persisted under ``root``."""

    def __init__(self, root: str | Path, index_type: str = "flat", hnsw_m: int = 32,
                 ef: int = 128) -> None:
        if index_type not in INDEX_TYPES:
            raise ValueError(f"index_type must be one of {INDEX_TYPES}, got {index_type!r}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.index_type, self.hnsw_m, self.ef = index_type, hnsw_m, ef
        self.backend = f"faiss-{index_type}"
        self._open: dict[str, Memory] = {}
        # opening a collection, and each write's log append with its apply, happen under
        # the collection's lock: two first requests after a start must not each replay the
        # log and publish their own copy (one would lose the other's acknowledged write),
        # and the in-memory order of writes must be the log's
        self._locks: dict[str, threading.RLock] = {}
        self._aliases = AliasCache(self._read_aliases)  # aliases.json under the root
        self._alias_lock = threading.Lock()  # each change reads and rewrites the whole file

    def _dir(self, name: str) -> Path:
        check_collection_name(name)
        return self.root / name

    def _lock(self, name: str) -> threading.RLock:
        return self._locks.setdefault(name, threading.RLock())  # setdefault is atomic

    def _load(self, name: str) -> Memory:
        name = self._aliases.resolve(name)
        col = self._open.get(name)
        if col is not None:
            return col
        with self._lock(name):
            col = self._open.get(name)
            return col if col is not None else self._read(name)

    def _read(self, name: str) -> Memory:
        path = self._dir(name)
        if not (path / "collection.json").is_file():
            raise CollectionNotFoundError(f"no collection {name!r}")
        meta = json.loads((path / "collection.json").read_text())
        enc = EncoderInfo.from_dict(meta["encoder"]) if meta["encoder"] else None
        info = CollectionInfo(name, int(meta["dim"]), enc, bool(meta.get("hybrid", False)),
                              bool(meta.get("multi_tenant", False)), meta.get("calibration"),
                              meta.get("passages"), meta.get("calibration_job"))
        col = Memory(info, self.index_type, self.hnsw_m)
        for it in read_snapshot(path):
            col.items[stored_id(it.tenant, it.id)] = it
        log_path = path / "log.jsonl"
        for record in self._read_log(log_path):
            col.apply(record)
        if log_path.is_file() and log_path.stat().st_size >= COMPACT_LOG_BYTES:
            try:
                self._compact(col)  # the next open replays none of it
            except OSError as e:  # a full disk: the log still holds every write
                log.warning("could not fold the log of %r into a snapshot: %s", name, e)
        self._open[name] = col
        return col

    @staticmethod
    def _read_log(path: Path) -> list[dict[str, Any]]:
        """Records of the log. A torn last line (a write killed before it returned) is cut
        off the file, so later appends start on a clean line."""
        if not path.is_file():
            return []
        records, good = [], 0
        with open(path, "rb") as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    break
                if not line.endswith(b"\n"):
                    break
                if d["op"] == "upsert":
                    d["items"] = [decode_item(x) for x in d["items"]]
                records.append(d)
                good += len(line)
        if good < path.stat().st_size:
            log.warning("cutting a torn last record off %s at byte %d", path, good)
            with open(path, "r+b") as f:
                f.truncate(good)
        return records

    def _append(self, name: str, record: dict[str, Any]) -> None:
        line = dict(record)
        if record["op"] == "upsert":
            line["items"] = [encode_item(it) for it in record["items"]]
        text = json.dumps(line) + "\n"
        with self._lock(name):
            col = self._load(name)
            with open(self._dir(name) / "log.jsonl", "a", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            col.apply(record)

    def compact(self, collection: str) -> None:
        """Fold the log into a fresh snapshot (:func:`index.faiss.memory.write_snapshot`:
        written aside, then named in one step). Opening a collection does it by itself
        when the log has grown past :data:`COMPACT_LOG_BYTES`."""
        col = self._load(collection)
        with self._lock(col.info.name):  # no write lands between the snapshot and the unlink
            self._compact(col)

    def _compact(self, col: Memory) -> None:
        path = self._dir(col.info.name)
        write_snapshot(path, list(col.items.values()), col.info.dim)
        (path / "log.jsonl").unlink(missing_ok=True)  # its records are all in the snapshot

    # -- VectorStore ------------------------------------------------------------------
    def create(
        self, collection: str, dim: int, encoder: EncoderInfo | None = None,
        exist_ok: bool = True, hybrid: bool = False, multi_tenant: bool = False,
    ) -> CollectionInfo:
        check_new(collection, dim, encoder, self._aliases.get())
        path = self._dir(collection)
        with self._lock(collection):  # two at once: one makes it, the other finds it
            if (path / "collection.json").is_file():
                info = self.describe(collection)
                check_same(info, exist_ok, dim, encoder, hybrid, multi_tenant)
                return info
            path.mkdir(parents=True, exist_ok=True)
            meta = {"dim": dim, "encoder": encoder.to_dict() if encoder else None,
                    "index_type": self.index_type, "hybrid": bool(hybrid),
                    "multi_tenant": bool(multi_tenant)}
            write_json(path / "collection.json", meta)  # synced, then renamed into place
        return self.describe(collection)

    def bm25_available(self) -> bool:
        """Whether hybrid (BM25) collections can be made here: always, in process."""
        return True

    def drop(self, collection: str) -> None:
        check_drop(self.list_aliases(), collection)
        with self._lock(collection):
            self._open.pop(collection, None)
            shutil.rmtree(self._dir(collection), ignore_errors=True)

    def list_collections(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if (p / "collection.json").is_file())

    def describe(self, collection: str) -> CollectionInfo:
        return self._load(collection).info

    def described(self, collection: str) -> CollectionInfo | None:
        return None  # describe reads collection.json (cached by its mtime): a thread's job

    def set_calibration(self, collection: str, calibration: dict[str, Any] | None) -> None:
        self._set_meta(collection, "calibration", calibration)

    def set_passages(self, collection: str, passages: dict[str, Any] | None) -> None:
        self._set_meta(collection, "passages", passages)

    def set_calibration_job(self, collection: str, job: dict[str, Any] | None) -> None:
        self._set_meta(collection, "calibration_job", job)

    def _set_meta(self, collection: str, key: str, value: dict[str, Any] | None) -> None:
        col = self._load(collection)
        path = self._dir(col.info.name)
        with self._lock(col.info.name):  # read, change, rewrite: one at a time
            meta = json.loads((path / "collection.json").read_text())
            meta[key] = value
            write_json(path / "collection.json", meta)
            changed: dict[str, Any] = {key: value}
            col.info = replace(col.info, **changed)

    def sample(self, collection: str, n: int, seed: int = 0) -> tuple[list[Item], int]:
        col = self._load(collection)
        keys = sorted(col.items)
        pick = sorted(random.Random(seed).sample(keys, min(n, len(keys))))
        return [col.items[k] for k in pick if k in col.items], len(keys)

    # -- aliases (index.aliases) -------------------------------------------------------
    def _read_aliases(self) -> dict[str, str]:
        path = self.root / "aliases.json"
        return dict(json.loads(path.read_text())) if path.is_file() else {}

    def _write_aliases(self, aliases: dict[str, str]) -> None:
        write_json(self.root / "aliases.json", dict(sorted(aliases.items())))
        self._aliases.invalidate()

    def list_aliases(self) -> dict[str, str]:
        return self._aliases.fresh()

    def set_alias(self, alias: str, collection: str) -> str | None:
        with self._alias_lock:  # two at once must not each keep only their own
            aliases = checked_set(self, alias, collection)
            before = aliases.get(alias)
            self._write_aliases({**aliases, alias: collection})
            return before

    def drop_alias(self, alias: str) -> None:
        with self._alias_lock:
            aliases = self.list_aliases()
            if aliases.pop(alias, None) is None:
                raise CollectionNotFoundError(f"no alias {alias!r}")
            self._write_aliases(aliases)

    def upsert(
        self, collection: str, items: Sequence[Item], encoder: EncoderInfo | None = None
    ) -> int:
        info = self.describe(collection)
        collection = info.name  # an alias's collection
        items, xb = writable(info, items, encoder)
        if not items:
            return 0
        stored = [Item(it.id, xb[i].copy(), it.text, it.value or None, dict(it.metadata),
                       it.tenant, it.keywords) for i, it in enumerate(items)]
        self._append(collection, {"op": "upsert", "items": stored})
        return len(stored)

    def delete(self, collection: str, ids: Sequence[str], tenant: str | None = None) -> None:
        info = self.describe(collection)
        check_tenant(info, tenant)
        if ids:
            self._append(info.name, {"op": "delete",
                                     "ids": [stored_id(tenant, i) for i in ids]})

    def get(self, collection: str, ids: Sequence[str], tenant: str | None = None,
            consistency: str = "Strong", brief: bool = False) -> list[Item]:
        col = self._load(collection)  # in process: every read sees every write
        check_tenant(col.info, tenant)
        keys = [stored_id(tenant, i) for i in dict.fromkeys(ids)]
        return [col.items[k] for k in keys if k in col.items]

    def count(self, collection: str, tenant: str | None = None, filter: Filter | None = None
              ) -> int:
        col = self._load(collection)
        check_tenant(col.info, tenant)
        if tenant is None and filter is None:
            return len(col.items)
        return sum((tenant is None or it.tenant == tenant)
                   and (filter is None or matches(filter, it.metadata))
                   for it in list(col.items.values()))

    def ids(self, collection: str, after: str | None = None, limit: int = 1000,
            filter: Filter | None = None, tenant: str | None = None) -> list[str]:
        col = self._load(collection)
        check_tenant(col.info, tenant)
        start = stored_id(tenant, after or "")
        keys = sorted(k for k, it in list(col.items.items())
                      if k > start and (tenant is None or it.tenant == tenant)
                      and (filter is None or matches(filter, it.metadata)))
        return [local_id(k, col.info.multi_tenant) for k in keys[:limit]]

    def scan(self, collection: str, after: str | None = None, batch_size: int = 1000,
             every_tenant: bool = False) -> Iterator[list[Item]]:
        col = self._load(collection)
        if not (every_tenant and col.info.multi_tenant):
            check_tenant(col.info, None)
        ids = sorted(i for i in list(col.items) if after is None or i > after)
        for start in range(0, len(ids), batch_size):
            page = [col.items.get(i) for i in ids[start : start + batch_size]]
            yield [it for it in page if it is not None]  # deleted since the listing: gone

    def search(
        self,
        collection: str,
        xq: Vectors,
        k: int,
        filter: Filter | None = None,
        encoder: EncoderInfo | None = None,
        with_vectors: bool = False,
        consistency: str = "Session",
        query_text: Sequence[str] | None = None,
        mode: str | None = None,
        fusion: str = DEFAULT_FUSION,
        dense_weight: float = DEFAULT_DENSE_WEIGHT,
        tenant: str | None = None,
    ) -> list[list[Hit]]:
        check_search(k, consistency, fusion, dense_weight)
        col = self._load(collection)
        keep: Callable[[Item], bool] | None = None
        if tenant is not None or filter is not None:
            def keep(it: Item) -> bool:  # the tenant's items that the filter matches
                return ((tenant is None or it.tenant == tenant)
                        and (filter is None or matches(filter, it.metadata)))
        return steps.search(
            col.info, xq, k, encoder=encoder, tenant=tenant, mode=mode, query_text=query_text,
            fusion=fusion, dense_weight=dense_weight,
            dense=lambda x, depth: self._dense(col, x, depth, keep, with_vectors),
            bm25=lambda texts, depth: self._bm25(col, texts, depth, keep, with_vectors))

    def _dense(self, col: Memory, xq: np.ndarray, k: int, keep: Callable[[Item], bool] | None,
               with_vectors: bool) -> list[list[Hit]]:
        if keep is not None:
            kept = [(i, it) for i, it in list(col.items.items()) if keep(it)]  # one copy
            ids = [i for i, _ in kept]
            xb = (np.stack([it.vector for _, it in kept]) if kept
                  else np.zeros((0, col.info.dim), np.float32))
            S = xq @ xb.T  # (nq, n) exact scores over the matching items
            order = np.argsort(-S, axis=1, kind="stable")[:, :k]
            D = np.take_along_axis(S, order, axis=1)
            idx = order
        else:
            index, ids = col.index()
            if self.index_type == "hnsw":
                index.hnsw.efSearch = max(self.ef, k)
            D, idx = index.search(xq, min(k, max(len(ids), 1)))
        return [
            [h for s, j in zip(D[r], idx[r], strict=True) if j >= 0
             if (h := self._hit(col, ids[j], float(s), with_vectors, "dense")) is not None]
            for r in range(len(xq))
        ]

    def _bm25(self, col: Memory, texts: Sequence[str], k: int,
              keep: Callable[[Item], bool] | None, with_vectors: bool) -> list[list[Hit]]:
        """The BM25 top ``k`` of each query text; only items ``keep`` keeps can be hits."""
        index, ids = col.bm25()

        def kept(j: int) -> bool:
            assert keep is not None
            it = col.items.get(ids[j])
            return it is not None and keep(it)

        return [[h for j, s in index.top(t, k, ids, kept if keep is not None else None)
                 if (h := self._hit(col, ids[j], s, with_vectors, "bm25")) is not None]
                for t in texts]

    @staticmethod
    def _hit(col: Memory, key: str, score: float, with_vector: bool, side: str
             ) -> Hit | None:
        """The hit for ``key``; None if it was deleted since the index was built."""
        it = col.items.get(key)
        if it is None:
            return None
        return Hit(id=it.id, score=score, text=it.text, value=it.value, metadata=dict(it.metadata),
                   vector=it.vector.copy() if with_vector else None, sources={side: score})

    def close(self) -> None:
        self._open.clear()
