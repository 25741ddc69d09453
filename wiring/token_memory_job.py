"""The token memory of a translation-memory collection, built by a job like ``qkv index``:
``qkv build-token-memory --collection``.

The job reads the collection in id order, a page at a time (:meth:`VectorStore.scan`), runs
the decoder over each page's pairs (a document's ``text`` → its ``value``; documents
without a value are no pair) and writes the page's keys, fp16, to a part file beside the
output (``<out>.build/``). A progress file names the last id done: killed, the same command
resumes after it; a build with another decoder, collection or store starts over. When every
page is done the parts become one :class:`decoder.knn.TokenMemory` (ids kept: votes name
them, and the service adds and removes pairs by id afterwards), written whole, and the
parts are removed.

A decoder that reads neighbours (k > 0) gets each pair's k nearest *other* documents of the
collection, by their stored vectors, weighted as in training: no encoder runs here.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from decoder.knn import TokenMemory, collect_keys
from index import Item, VectorStore, open_store
from index.attend import softmax
from wiring.token_memory import trained_retrieval

log = logging.getLogger(__name__)


def build_dir(out: Path) -> Path:
    """Where a build of ``out`` keeps its parts and progress."""
    return out.with_name(out.name + ".build")


def _neighbours(store: VectorStore, collection: str, page: list[Item], k: int, t: float
                ) -> list[list[tuple[str, float]]]:
    """Each pair's k nearest other documents (value, weight), as the decoder trained."""
    xq = np.stack([it.vector for it in page]).astype(np.float32)
    found = store.search(collection, xq, k + 1, mode="dense", consistency="Strong")
    out = []
    for it, hits in zip(page, found, strict=True):
        kept = [h for h in hits if h.id != it.id][:k]
        w = softmax(np.array([h.score for h in kept], np.float32), t) if kept else np.zeros(0)
        out.append([(h.value or h.text, float(x)) for h, x in zip(kept, w, strict=True)])
    return out


def _write_part(folder: Path, n: int, keys: np.ndarray, values: np.ndarray,
                rows: np.ndarray, ids: list[str]) -> None:
    tmp = folder / f"part-{n:06d}.tmp.npz"
    np.savez(tmp, keys=keys.astype(np.float16), values=values, rows=rows,
             ids=np.array(ids, dtype=str))
    os.replace(tmp, folder / f"part-{n:06d}.npz")


def _save_progress(folder: Path, progress: dict[str, Any]) -> None:
    tmp = folder / "progress.json.tmp"
    tmp.write_text(json.dumps(progress))
    os.replace(tmp, folder / "progress.json")


def _start(folder: Path, identity: dict[str, str], restart: bool) -> dict[str, Any]:
    """The progress of this build so far (a fresh one: nothing done)."""
    path = folder / "progress.json"
    if path.is_file() and not restart:
        progress: dict[str, Any] = json.loads(path.read_text())
        if progress.get("identity") == identity:
            log.info("resuming after id %r: %d pairs in %d parts", progress["after"],
                     progress["pairs"], progress["parts"])
            return progress
        log.info("%s holds another build (%s): starting over", folder, progress.get("identity"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return {"identity": identity, "after": None, "parts": 0, "pairs": 0, "keys": 0, "read": 0}


def _assemble(folder: Path, parts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    keys, values, rows, ids = [], [], [], list[str]()
    for n in range(parts):
        with np.load(folder / f"part-{n:06d}.npz") as f:
            keys.append(f["keys"])
            values.append(f["values"])
            rows.append(f["rows"] + len(ids))
            ids += [str(i) for i in f["ids"]]
    if not keys:
        raise ValueError("the collection has no (text, value) pair: nothing to remember")
    return np.concatenate(keys), np.concatenate(values), np.concatenate(rows), ids


def build_from_collection(dec: Any, store: VectorStore, collection: str, out: Path,
                          store_name: str = "", page_size: int = 1024,
                          batch_size: int = 64, restart: bool = False,
                          progress_bar: bool = True, stop_after_pages: int | None = None,
                          stop: threading.Event | None = None,
                          on_page: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Build (or resume building) the token memory of ``collection`` with the decoder
    ``dec`` into ``out``; returns what was built. ``stop_after_pages``: end this call
    after that many pages, or once ``stop`` is set (the build is resumed by the next call).
    ``on_page(documents read so far, of)`` after each page (a resumed build counts the
    earlier calls' too). A stop during the last step (the index of every key: about 100 s
    for 491,000 keys on 2 cores) waits for it."""
    info = store.describe(collection)
    identity = {"decoder_fingerprint": dec.fingerprint, "collection": info.name,
                "store": store_name}
    folder = build_dir(out)
    state = _start(folder, identity, restart)
    k, t = trained_retrieval(dec)
    total = store.count(collection)
    bar = tqdm(total=total, disable=not progress_bar, desc="token memory", mininterval=2)
    t0, pages, finished = time.perf_counter(), 0, True
    for page in store.scan(collection, after=state["after"], batch_size=page_size):
        if (stop_after_pages is not None and pages >= stop_after_pages) or (
                stop is not None and stop.is_set()):
            finished = False
            break
        pairs = [it for it in page if it.value and it.text.strip()]
        if pairs:
            nbrs = _neighbours(store, collection, pairs, k, t) if k > 0 else None
            keys, values, rows = collect_keys(dec, [p.text for p in pairs],
                                              [p.value or "" for p in pairs], nbrs, batch_size)
            _write_part(folder, state["parts"], keys, values, rows, [p.id for p in pairs])
            state.update(parts=state["parts"] + 1, pairs=state["pairs"] + len(pairs),
                         keys=state["keys"] + len(values))
        state["after"] = page[-1].id if page else state["after"]
        state["read"] = state.get("read", 0) + len(page)
        _save_progress(folder, state)
        pages += 1
        bar.update(len(page))
        if on_page is not None:
            on_page(state["read"], total)
    bar.close()
    if not finished or (stop is not None and stop.is_set()):  # the next call goes on
        return {"done": False, "pairs": state["pairs"], "keys": state["keys"],
                "after": state["after"], "keys_s": round(time.perf_counter() - t0, 1)}
    t1 = time.perf_counter()
    keys, values, rows, ids = _assemble(folder, state["parts"])
    memory = TokenMemory.build(keys, values, rows, dec.name, dec.fingerprint)
    memory.meta.update({"pairs": len(ids), "source": f"{store_name} {info.name}".strip(),
                        "neighbours": k > 0, "ids": ids})
    memory.save(out)
    shutil.rmtree(folder, ignore_errors=True)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    return {"done": True, "pairs": len(ids), "keys": memory.size,
            "layout": memory.meta["layout"], "bytes": size,
            "bytes_per_pair": round(size / max(1, len(ids))),
            "keys_s": round(t1 - t0, 1), "index_s": round(time.perf_counter() - t1, 1)}


def index_token_memory(model: Path, store_uri: str, collection: str, out: Path,
                       token: str = "", timeout: float = 10.0, device: str | None = None,
                       **kw: Any) -> dict[str, Any]:
    """:func:`build_from_collection` with the decoder at ``model`` and the store at
    ``store_uri`` (``qkv build-token-memory --collection``)."""
    import decoder

    dec = decoder.load(model, device=device)
    store = open_store(store_uri, token=token, timeout=timeout)
    try:
        return build_from_collection(dec, store, collection, out, store_name=store_uri, **kw)
    finally:
        store.close()
