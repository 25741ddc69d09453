"""``FaissStore``: the key-value memory in process, flat (exact) or HNSW, on disk.

Each collection is a directory under the store's root: ``collection.json`` (dim, encoder,
index type), a snapshot (``vectors.npy`` + ``items.jsonl``) and a write-ahead log
``log.jsonl`` that every upsert and delete appends to and fsyncs before returning, so a
write that returned survives a kill. Opening replays the log; :meth:`FaissStore.compact`
folds it into the snapshot. The faiss index is rebuilt lazily after writes. A filtered
search is exact over the matching items. With ``index_type="flat"`` this is the exact
reference that approximate stores' recall is measured against.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from index.filters import Filter, matches
from index.store import (
    CollectionExistsError,
    CollectionInfo,
    CollectionNotFoundError,
    EncoderInfo,
    Hit,
    Item,
    UnsupportedError,
    as_matrix,
    check_collection_name,
    check_encoder,
    check_item,
    check_search_args,
    dedupe_last,
    resolve_mode,
)

log = logging.getLogger(__name__)

INDEX_TYPES = ("flat", "hnsw")


class _Collection:
    """One collection in memory: id → item, and a faiss index built on demand."""

    def __init__(self, info: CollectionInfo, index_type: str, hnsw_m: int) -> None:
        self.info, self.index_type, self.hnsw_m = info, index_type, hnsw_m
        self.items: dict[str, Item] = {}
        self._index: Any = None
        self._ids: list[str] = []

    def apply(self, record: dict[str, Any]) -> None:
        if record["op"] == "upsert":
            for it in record["items"]:
                self.items[it.id] = it
        else:
            for i in record["ids"]:
                self.items.pop(i, None)
        self._index = None

    def index(self) -> tuple[Any, list[str]]:
        if self._index is None:
            d = self.info.dim
            self._ids = list(self.items)
            xb = np.stack([self.items[i].vector for i in self._ids]) if self._ids else (
                np.zeros((0, d), np.float32))
            if self.index_type == "hnsw":
                self._index = faiss.IndexHNSWFlat(d, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                self._index.hnsw.efConstruction = 200
            else:
                self._index = faiss.IndexFlatIP(d)
            self._index.add(xb)
        return self._index, self._ids


def _encode_item(it: Item) -> dict[str, Any]:
    return {"id": it.id, "v": base64.b64encode(it.vector.tobytes()).decode(), "text": it.text,
            "value": it.value, "metadata": it.metadata}


def _decode_item(d: dict[str, Any]) -> Item:
    vec = np.frombuffer(base64.b64decode(d["v"]), dtype=np.float32).copy()
    return Item(id=d["id"], vector=vec, text=d["text"], value=d["value"] or None,
                metadata=d["metadata"])


class FaissStore:
    """:class:`index.store.VectorStore` on faiss, persisted under ``root``."""

    def __init__(self, root: str | Path, index_type: str = "flat", hnsw_m: int = 32,
                 ef: int = 128) -> None:
        if index_type not in INDEX_TYPES:
            raise ValueError(f"index_type must be one of {INDEX_TYPES}, got {index_type!r}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.index_type, self.hnsw_m, self.ef = index_type, hnsw_m, ef
        self._open: dict[str, _Collection] = {}

    def _dir(self, name: str) -> Path:
        check_collection_name(name)
        return self.root / name

    def _load(self, name: str) -> _Collection:
        if name in self._open:
            return self._open[name]
        path = self._dir(name)
        if not (path / "collection.json").is_file():
            raise CollectionNotFoundError(f"no collection {name!r} in {self.root}")
        meta = json.loads((path / "collection.json").read_text())
        enc = EncoderInfo.from_dict(meta["encoder"]) if meta["encoder"] else None
        col = _Collection(CollectionInfo(name, int(meta["dim"]), enc), self.index_type,
                          self.hnsw_m)
        if (path / "items.jsonl").is_file():
            vectors = np.load(path / "vectors.npy")
            with open(path / "items.jsonl", encoding="utf-8") as f:
                for row, line in enumerate(f):
                    d = json.loads(line)
                    col.items[d["id"]] = Item(d["id"], vectors[row], d["text"],
                                              d["value"] or None, d["metadata"])
        for record in self._read_log(path / "log.jsonl"):
            col.apply(record)
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
                    d["items"] = [_decode_item(x) for x in d["items"]]
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
            line["items"] = [_encode_item(it) for it in record["items"]]
        with open(self._dir(name) / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._load(name).apply(record)

    def compact(self, collection: str) -> None:
        """Fold the log into a fresh snapshot (written aside, then renamed into place)."""
        col, path = self._load(collection), self._dir(collection)
        ids = list(col.items)
        vectors = (np.stack([col.items[i].vector for i in ids]) if ids
                   else np.zeros((0, col.info.dim), np.float32))
        np.save(path / "vectors.tmp.npy", vectors)
        with open(path / "items.tmp.jsonl", "w", encoding="utf-8") as f:
            for i in ids:
                it = col.items[i]
                f.write(json.dumps({"id": i, "text": it.text, "value": it.value,
                                    "metadata": it.metadata}) + "\n")
        os.replace(path / "vectors.tmp.npy", path / "vectors.npy")
        os.replace(path / "items.tmp.jsonl", path / "items.jsonl")
        (path / "log.jsonl").unlink(missing_ok=True)

    # -- VectorStore ------------------------------------------------------------------
    def create(
        self, collection: str, dim: int, encoder: EncoderInfo | None = None,
        exist_ok: bool = True, hybrid: bool = False,
    ) -> CollectionInfo:
        path = self._dir(collection)
        if hybrid:
            raise UnsupportedError(
                "FaissStore has no BM25 index: hybrid collections need Milvus (Lite, or a "
                "server >= 2.5); create the collection without hybrid")
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if encoder is not None and encoder.dim != dim:
            raise ValueError(f"encoder {encoder.name!r} makes dim {encoder.dim}, not {dim}")
        if (path / "collection.json").is_file():
            info = self.describe(collection)
            if not exist_ok or info.dim != dim or info.encoder != encoder:
                raise CollectionExistsError(
                    f"collection {collection!r} exists with dim {info.dim} and encoder "
                    f"{info.encoder}; asked for dim {dim} and encoder {encoder}")
            return info
        path.mkdir(parents=True, exist_ok=True)
        meta = {"dim": dim, "encoder": encoder.to_dict() if encoder else None,
                "index_type": self.index_type}
        (path / "collection.tmp.json").write_text(json.dumps(meta))
        os.replace(path / "collection.tmp.json", path / "collection.json")
        return self.describe(collection)

    def drop(self, collection: str) -> None:
        self._open.pop(collection, None)
        shutil.rmtree(self._dir(collection), ignore_errors=True)

    def list_collections(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if (p / "collection.json").is_file())

    def describe(self, collection: str) -> CollectionInfo:
        return self._load(collection).info

    def upsert(
        self, collection: str, items: Sequence[Item], encoder: EncoderInfo | None = None
    ) -> int:
        info = self.describe(collection)
        check_encoder(info, encoder)
        items = dedupe_last(items)
        if not items:
            return 0
        for it in items:
            check_item(it)
        xb = as_matrix(np.stack([it.vector for it in items]), info.dim)
        stored = [Item(it.id, xb[i].copy(), it.text, it.value or None, dict(it.metadata))
                  for i, it in enumerate(items)]
        self._append(collection, {"op": "upsert", "items": stored})
        return len(stored)

    def delete(self, collection: str, ids: Sequence[str]) -> None:
        self.describe(collection)
        if ids:
            self._append(collection, {"op": "delete", "ids": list(ids)})

    def get(self, collection: str, ids: Sequence[str]) -> list[Item]:
        col = self._load(collection)
        return [col.items[i] for i in dict.fromkeys(ids) if i in col.items]

    def count(self, collection: str) -> int:
        return len(self._load(collection).items)

    def search(
        self,
        collection: str,
        xq: np.ndarray,
        k: int,
        filter: Filter | None = None,
        encoder: EncoderInfo | None = None,
        with_vectors: bool = False,
        consistency: str = "Session",
        query_text: Sequence[str] | None = None,
        mode: str | None = None,
        fusion: str = "rrf",
        dense_weight: float = 0.5,
    ) -> list[list[Hit]]:
        check_search_args(k, consistency)
        col = self._load(collection)
        check_encoder(col.info, encoder)
        xq = as_matrix(xq, col.info.dim)
        resolve_mode(col.info, mode, query_text, len(xq))  # only "dense" passes: no BM25 here
        if filter is not None:
            ids = [i for i, it in col.items.items() if matches(filter, it.metadata)]
            xb = (np.stack([col.items[i].vector for i in ids]) if ids
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
            [self._hit(col, ids[j], float(s), with_vectors)
             for s, j in zip(D[r], idx[r], strict=True) if j >= 0]
            for r in range(len(xq))
        ]

    @staticmethod
    def _hit(col: _Collection, id_: str, score: float, with_vector: bool) -> Hit:
        it = col.items[id_]
        return Hit(id=id_, score=score, text=it.text, value=it.value, metadata=dict(it.metadata),
                   vector=it.vector.copy() if with_vector else None, sources={"dense": score})

    def close(self) -> None:
        self._open.clear()
