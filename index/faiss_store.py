"""``FaissStore``: the key-value memory in process, flat (exact) or HNSW, on disk.

Each collection is a directory under the store's root: ``collection.json`` (dim, encoder,
index type, hybrid), a snapshot (``vectors.npy`` + ``items.jsonl``) and a write-ahead log
``log.jsonl`` that every upsert and delete appends to and fsyncs before returning, so a
write that returned survives a kill. Opening replays the log; :meth:`FaissStore.compact`
folds it into the snapshot. The faiss index is rebuilt lazily after writes. A filtered
search is exact over the matching items. With ``index_type="flat"`` this is the exact
reference that approximate stores' recall is measured against.

A hybrid collection also has a BM25 index of the items' text (:mod:`index.bm25`, over
:func:`index.analysis.analyze`'s terms, scored as Milvus' BM25 function scores), built in
process, lazily after writes like the faiss index; nothing of it is stored but the texts.
Searches take ``mode`` ``dense``, ``bm25`` or ``hybrid`` as on Milvus: a hybrid search runs
both sides :func:`index.fusion.candidates` deep and fuses them with :func:`index.fusion.fuse`.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from index.aliases import AliasCache, AliasError, check_drop, check_set
from index.analysis import analyze
from index.bm25 import BM25Index, term_ids
from index.filters import Filter, matches
from index.fusion import DEFAULT_DENSE_WEIGHT, DEFAULT_FUSION, candidates, check_fusion, fuse
from index.store import (
    CollectionExistsError,
    CollectionInfo,
    CollectionNotFoundError,
    EncoderInfo,
    Hit,
    Item,
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
    """One collection in memory: id → item, and a faiss index (and, when hybrid, a BM25
    index) built on demand."""

    def __init__(self, info: CollectionInfo, index_type: str, hnsw_m: int) -> None:
        self.info, self.index_type, self.hnsw_m = info, index_type, hnsw_m
        self.items: dict[str, Item] = {}
        self._index: Any = None
        self._ids: list[str] = []
        self._bm25: tuple[BM25Index, list[str]] | None = None
        # each item's analysed text as term ids, kept across rebuilds (the vocabulary grows)
        self._vocab: dict[str, int] = {}
        self._terms: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()  # a write never lands inside a BM25 build

    def apply(self, record: dict[str, Any]) -> None:
        with self._lock:
            if record["op"] == "upsert":
                for it in record["items"]:
                    self.items[it.id] = it
                    self._terms.pop(it.id, None)
            else:
                for i in record["ids"]:
                    self.items.pop(i, None)
                    self._terms.pop(i, None)
            self._index = None
            self._bm25 = None

    def bm25(self) -> tuple[BM25Index, list[str]]:
        """The BM25 index of the items' text and the ids of its documents, in order."""
        built = self._bm25
        if built is None:
            with self._lock:
                built = self._bm25
                if built is None:
                    ids, terms = list(self.items), self._terms
                    for i in ids:
                        if i not in terms:
                            terms[i] = term_ids(analyze(self.items[i].text), self._vocab)
                    built = (BM25Index([terms[i] for i in ids], self._vocab), ids)
                    self._bm25 = built
        return built

    def index(self) -> tuple[Any, list[str]]:
        index, ids = self._index, self._ids
        if index is None:  # built whole before it is published: other threads may search
            d = self.info.dim
            ids = list(self.items)
            xb = np.stack([self.items[i].vector for i in ids]) if ids else (
                np.zeros((0, d), np.float32))
            if self.index_type == "hnsw":
                index = faiss.IndexHNSWFlat(d, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = 200
            else:
                index = faiss.IndexFlatIP(d)
            index.add(xb)
            self._ids, self._index = ids, index
        return index, ids


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
        self._aliases = AliasCache(self._read_aliases)  # aliases.json under the root

    def _dir(self, name: str) -> Path:
        check_collection_name(name)
        return self.root / name

    def _load(self, name: str) -> _Collection:
        name = self._aliases.resolve(name)
        if name in self._open:
            return self._open[name]
        path = self._dir(name)
        if not (path / "collection.json").is_file():
            raise CollectionNotFoundError(f"no collection {name!r} in {self.root}")
        meta = json.loads((path / "collection.json").read_text())
        enc = EncoderInfo.from_dict(meta["encoder"]) if meta["encoder"] else None
        info = CollectionInfo(name, int(meta["dim"]), enc, bool(meta.get("hybrid", False)))
        col = _Collection(info, self.index_type, self.hnsw_m)
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
        col = self._load(collection)
        path = self._dir(col.info.name)
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
        if collection in self._aliases.get():
            raise AliasError(f"{collection!r} is an alias; a collection cannot take its name")
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if encoder is not None and encoder.dim != dim:
            raise ValueError(f"encoder {encoder.name!r} makes dim {encoder.dim}, not {dim}")
        if (path / "collection.json").is_file():
            info = self.describe(collection)
            if (not exist_ok or info.dim != dim or info.encoder != encoder
                    or info.hybrid != hybrid):
                raise CollectionExistsError(
                    f"collection {collection!r} exists with dim {info.dim}, encoder "
                    f"{info.encoder} and hybrid={info.hybrid}; asked for dim {dim}, encoder "
                    f"{encoder} and hybrid={hybrid}")
            return info
        path.mkdir(parents=True, exist_ok=True)
        meta = {"dim": dim, "encoder": encoder.to_dict() if encoder else None,
                "index_type": self.index_type, "hybrid": bool(hybrid)}
        (path / "collection.tmp.json").write_text(json.dumps(meta))
        os.replace(path / "collection.tmp.json", path / "collection.json")
        return self.describe(collection)

    def bm25_available(self) -> bool:
        """Whether hybrid (BM25) collections can be made here: always, in process."""
        return True

    def drop(self, collection: str) -> None:
        check_drop(self.list_aliases(), collection)
        self._open.pop(collection, None)
        shutil.rmtree(self._dir(collection), ignore_errors=True)

    def list_collections(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if (p / "collection.json").is_file())

    def describe(self, collection: str) -> CollectionInfo:
        return self._load(collection).info

    # -- aliases (index.aliases) -------------------------------------------------------
    def _read_aliases(self) -> dict[str, str]:
        path = self.root / "aliases.json"
        return dict(json.loads(path.read_text())) if path.is_file() else {}

    def _write_aliases(self, aliases: dict[str, str]) -> None:
        tmp = self.root / "aliases.tmp.json"
        tmp.write_text(json.dumps(aliases, sort_keys=True))
        os.replace(tmp, self.root / "aliases.json")
        self._aliases.invalidate()

    def list_aliases(self) -> dict[str, str]:
        self._aliases.invalidate()
        return dict(sorted(self._aliases.get().items()))

    def set_alias(self, alias: str, collection: str) -> str | None:
        check_collection_name(alias)
        aliases = self.list_aliases()
        check_set(aliases, self.list_collections(), alias, collection)
        self.describe(collection)  # not found: 404
        before = aliases.get(alias)
        self._write_aliases({**aliases, alias: collection})
        return before

    def drop_alias(self, alias: str) -> None:
        aliases = self.list_aliases()
        if aliases.pop(alias, None) is None:
            raise CollectionNotFoundError(f"no alias {alias!r} in {self.root}")
        self._write_aliases(aliases)

    def upsert(
        self, collection: str, items: Sequence[Item], encoder: EncoderInfo | None = None
    ) -> int:
        info = self.describe(collection)
        collection = info.name  # an alias's collection
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
        collection = self.describe(collection).name
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
        fusion: str = DEFAULT_FUSION,
        dense_weight: float = DEFAULT_DENSE_WEIGHT,
    ) -> list[list[Hit]]:
        check_search_args(k, consistency)
        check_fusion(fusion, dense_weight)
        col = self._load(collection)
        check_encoder(col.info, encoder)
        xq = as_matrix(xq, col.info.dim)
        mode = resolve_mode(col.info, mode, query_text, len(xq))
        if mode == "dense":
            return self._dense(col, xq, k, filter, with_vectors)
        assert query_text is not None  # resolve_mode checked it
        if mode == "bm25":
            return self._bm25(col, query_text, k, filter, with_vectors)
        depth = candidates(k)
        dense = self._dense(col, xq, depth, filter, with_vectors)
        bm25 = self._bm25(col, query_text, depth, filter, with_vectors)
        return [fuse(d, b, k, fusion, dense_weight) for d, b in zip(dense, bm25, strict=True)]

    def _dense(self, col: _Collection, xq: np.ndarray, k: int, filter: Filter | None,
               with_vectors: bool) -> list[list[Hit]]:
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
            [self._hit(col, ids[j], float(s), with_vectors, "dense")
             for s, j in zip(D[r], idx[r], strict=True) if j >= 0]
            for r in range(len(xq))
        ]

    def _bm25(self, col: _Collection, texts: Sequence[str], k: int, filter: Filter | None,
              with_vectors: bool) -> list[list[Hit]]:
        """The BM25 top ``k`` of each query text; only items ``filter`` matches can be hits."""
        index, ids = col.bm25()

        def kept(j: int) -> bool:
            return filter is None or matches(filter, col.items[ids[j]].metadata)

        keep = kept if filter is not None else None
        return [[self._hit(col, ids[j], s, with_vectors, "bm25")
                 for j, s in index.top(t, k, ids, keep)] for t in texts]

    @staticmethod
    def _hit(col: _Collection, id_: str, score: float, with_vector: bool, side: str) -> Hit:
        it = col.items[id_]
        return Hit(id=id_, score=score, text=it.text, value=it.value, metadata=dict(it.metadata),
                   vector=it.vector.copy() if with_vector else None, sources={side: score})

    def close(self) -> None:
        self._open.clear()
