"""The demo collections a first start creates: a document corpus (``docs``) and a
translation memory (``tm-en-fr``), each from a JSONL(.gz) file shipped in ``data/demo``."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from index import CollectionNotFoundError, Item, collection_name
from wiring.components import Components

log = logging.getLogger(__name__)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file, gzipped when its name ends in ``.gz``."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _state(parts: Components, collection: str, corpus: Path, n: int) -> str:
    """``new``: no collection; ``partial``: fewer documents than the corpus (a first start
    stopped while writing); ``stale``: made by another encoder (e.g. the same model stored
    at another precision: another fingerprint); ``complete``."""
    try:
        info = parts.store.describe(collection)
    except CollectionNotFoundError:
        log.info("creating the demo collection %r from %s (%d documents)...", collection,
                 corpus, n)
        return "new"
    if info.encoder is not None and info.encoder != parts.info:
        log.warning("the demo collection %r holds vectors of encoder %s (fingerprint %s), not "
                    "of the served %s (%s): building it again", collection, info.encoder.name,
                    info.encoder.fingerprint, parts.info.name, parts.info.fingerprint)
        return "stale"
    have = parts.store.count(collection)
    if have >= n:
        return "complete"
    log.info("the demo collection %r has %d of the %d documents of %s (a first start stopped "
             "while writing): writing them again", collection, have, n, corpus)
    return "partial"


def seed_demo(parts: Components, corpus: Path, collection: str, batch: int = 2048) -> int:
    """Create ``collection`` from the JSONL ``corpus`` (id, text, optional value, metadata)
    unless it is already complete: a document corpus, or a translation memory whose
    ``text`` is the source sentence and ``value`` the target the decoder reads. Returns the
    documents written (0 when it was complete).

    Everything is encoded before the collection is created, so a start stopped while
    encoding leaves no collection behind: the next start begins again. A start stopped
    while writing leaves fewer documents than the corpus has: the next start writes them
    all again (upserts by id, so nothing is doubled). A collection made by another encoder
    is dropped and built again: the demo never serves another encoder's vectors.
    """
    collection = collection_name(collection)
    rows = read_jsonl(corpus)
    state = _state(parts, collection, corpus, len(rows))
    if state == "complete":
        return 0
    with tqdm(total=len(rows), unit="doc", desc=f"encoding {collection}") as bar:
        chunks = []
        for start in range(0, len(rows), batch):
            chunks.append(parts.encoder.encode([r["text"] for r in rows[start : start + batch]]))
            bar.update(len(chunks[-1]))
    x = np.concatenate(chunks) if chunks else np.zeros((0, parts.info.dim), np.float32)
    items = [Item(str(r["id"]), x[i], r["text"], r.get("value"), r.get("metadata") or {})
             for i, r in enumerate(rows)]
    if state == "stale":
        parts.store.drop(collection)
    if state in ("new", "stale"):
        parts.store.create(collection, parts.info.dim, parts.info)
    n = 0
    for start in range(0, len(items), 1000):
        n += parts.store.upsert(collection, items[start : start + 1000], parts.info)
    log.info("demo collection %r: %d documents", collection, n)
    return int(n)
