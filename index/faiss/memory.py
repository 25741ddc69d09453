"""The in-memory side of :class:`index.faiss.store.FaissStore`: one collection's items and
the faiss and BM25 indexes built over them on demand, and the items' forms on disk (the
log's records and the snapshot).

A snapshot is a folder ``snapshot-N`` (``vectors.npy`` and ``items.jsonl``, row for row)
that ``snapshot.json`` names; a new one is written whole beside the old, then named in one
step (:func:`write_snapshot`), so a kill at any point leaves a complete snapshot named. The
log's records are applied on top of whichever is named: replaying a record that a snapshot
already holds changes nothing, so the log may be removed after the switch. Stores written
before snapshots had folders keep theirs at the collection's top level until their first
compaction."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from index.bulk.ranges import write_json
from index.hybrid.analysis import analyze
from index.hybrid.bm25 import BM25Index, term_ids
from index.store import CollectionInfo, Item
from index.tenancy import stored_id


class Memory:
    """One collection of a :class:`index.faiss.store.FaissStore` in memory: stored id
    (:func:`index.tenancy.stored_id`) → item, and a faiss index (and, when hybrid, a BM25
    index) built on demand."""

    def __init__(self, info: CollectionInfo, index_type: str, hnsw_m: int) -> None:
        self.info, self.index_type, self.hnsw_m = info, index_type, hnsw_m
        self.items: dict[str, Item] = {}
        self._index: tuple[Any, list[str]] | None = None  # faiss index, its rows' ids
        self._bm25: tuple[BM25Index, list[str]] | None = None
        # each item's analysed text as term ids, kept across rebuilds (the vocabulary grows)
        self._vocab: dict[str, int] = {}
        self._terms: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()  # a write never lands inside a BM25 build
        self._writes = 0  # counts applied writes: an index built across one is not kept

    def apply(self, record: dict[str, Any]) -> None:
        with self._lock:
            if record["op"] == "upsert":
                for it in record["items"]:
                    key = stored_id(it.tenant, it.id)
                    self.items[key] = it
                    self._terms.pop(key, None)
            else:
                for i in record["ids"]:  # stored ids
                    self.items.pop(i, None)
                    self._terms.pop(i, None)
            self._writes += 1
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
                            it = self.items[i]  # its keywords are analysed already
                            terms[i] = term_ids(analyze(it.text) if it.keywords is None
                                                else it.keywords.split(), self._vocab)
                    built = (BM25Index([terms[i] for i in ids], self._vocab), ids)
                    self._bm25 = built
        return built

    def index(self) -> tuple[Any, list[str]]:
        built = self._index
        if built is None:  # built whole before it is published: other threads may search
            d = self.info.dim
            with self._lock:
                writes, ids = self._writes, list(self.items)
                xb = np.stack([self.items[i].vector for i in ids]) if ids else (
                    np.zeros((0, d), np.float32))
            index: Any
            if self.index_type == "hnsw":
                index = faiss.IndexHNSWFlat(d, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = 200
            else:
                index = faiss.IndexFlatIP(d)
            index.add(xb)
            built = (index, ids)
            with self._lock:  # a write applied meanwhile made this one stale: not kept
                if self._writes == writes:
                    self._index = built
        return built


def encode_item(it: Item) -> dict[str, Any]:
    d = {"id": it.id, "v": base64.b64encode(it.vector.tobytes()).decode(), "text": it.text,
         "value": it.value, "metadata": it.metadata}
    if it.tenant is not None:
        d["tenant"] = it.tenant
    if it.keywords is not None:
        d["keywords"] = it.keywords
    return d


def decode_item(d: dict[str, Any]) -> Item:
    vec = np.frombuffer(base64.b64decode(d["v"]), dtype=np.float32).copy()
    return Item(id=d["id"], vector=vec, text=d["text"], value=d["value"] or None,
                metadata=d["metadata"], tenant=d.get("tenant"), keywords=d.get("keywords"))


def _snapshot(path: Path) -> tuple[Path, int]:
    """The folder of the snapshot a collection at ``path`` has, and its number (0: none, or
    the files at the top level that stores before numbered snapshots wrote)."""
    pointer = path / "snapshot.json"
    if pointer.is_file():
        n = int(json.loads(pointer.read_text())["snapshot"])
        return path / f"snapshot-{n}", n
    return path, 0


def read_snapshot(path: Path) -> Iterator[Item]:
    """The items of the snapshot of the collection at ``path`` (none before the first)."""
    folder, _ = _snapshot(path)
    if not (folder / "items.jsonl").is_file():
        return
    vectors = np.load(folder / "vectors.npy")
    with open(folder / "items.jsonl", encoding="utf-8") as f:
        for row, line in enumerate(f):
            d = json.loads(line)
            yield Item(d["id"], vectors[row], d["text"], d["value"] or None, d["metadata"],
                       d.get("tenant"), d.get("keywords"))


def write_snapshot(path: Path, items: list[Item], dim: int) -> None:
    """``items`` as the next snapshot of the collection at ``path``: written and synced in
    a folder of its own, then named in ``snapshot.json`` (replaced in one step); the old
    one's files are removed after."""
    old, n = _snapshot(path)
    folder = path / f"snapshot-{n + 1}"
    shutil.rmtree(folder, ignore_errors=True)  # a compaction killed before its switch
    folder.mkdir()
    vectors = (np.stack([it.vector for it in items]) if items
               else np.zeros((0, dim), np.float32))
    with open(folder / "vectors.npy", "wb") as f:
        np.save(f, vectors)
        f.flush()
        os.fsync(f.fileno())
    with open(folder / "items.jsonl", "w", encoding="utf-8") as f:
        for it in items:
            row = {"id": it.id, "text": it.text, "value": it.value,
                   "metadata": it.metadata, "tenant": it.tenant}
            if it.keywords is not None:
                row["keywords"] = it.keywords
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
    write_json(path / "snapshot.json", {"snapshot": n + 1})  # synced, renamed into place
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the switch itself survives a power cut
    finally:
        os.close(dir_fd)
    if old == path:
        for name in ("vectors.npy", "items.jsonl"):
            (path / name).unlink(missing_ok=True)
    else:
        shutil.rmtree(old, ignore_errors=True)
