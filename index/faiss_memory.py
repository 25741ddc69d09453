"""The in-memory side of :class:`index.faiss_store.FaissStore`: one collection's items and
the faiss and BM25 indexes built over them on demand, and the items' form in its log."""

from __future__ import annotations

import base64
import threading
from typing import Any

import faiss
import numpy as np

from index.analysis import analyze
from index.bm25 import BM25Index, term_ids
from index.store import CollectionInfo, Item
from index.tenancy import stored_id


class Memory:
    """One collection of a :class:`index.faiss_store.FaissStore` in memory: stored id
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
                            terms[i] = term_ids(analyze(self.items[i].text), self._vocab)
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
    return d


def decode_item(d: dict[str, Any]) -> Item:
    vec = np.frombuffer(base64.b64decode(d["v"]), dtype=np.float32).copy()
    return Item(id=d["id"], vector=vec, text=d["text"], value=d["value"] or None,
                metadata=d["metadata"], tenant=d.get("tenant"))
