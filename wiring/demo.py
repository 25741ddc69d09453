"""The demo collections a first start creates: a document corpus (``docs``) and a
translation memory (``tm-en-fr``), each from a JSONL(.gz) file shipped in ``data/demo``.

Beside each corpus may lie its vectors (``<name>.vectors.npz``, written by ``qkv
demo-vectors``): the corpus encoded by one encoder, stored in float16, with that encoder's
fingerprint and the corpus file's SHA-256. A first start uses them instead of encoding the
corpus (the slow part of a first start) only when both match the encoder it serves and the
corpus it reads; otherwise it encodes, as without them. The demo never serves another
encoder's vectors.

The service seeds in two steps: :func:`prepare_demo` (read the corpus, create the
collection) before it answers, and :func:`fill_demo` in the background, a batch at a time
through the collections' write path (as an upsert request writes), while :class:`Seeding`
tells ``/ready`` and the searches of that collection how far it is. Then, when asked,
:func:`demo_token_memory` gives the translation memory its token memory (kNN-MT): read from
disk when built before, else built from the filled collection (the resumable job of
:mod:`wiring.token_memory_job`), and used by ``generate`` from then on.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from index import CollectionNotFoundError, EncoderInfo, collection_name
from index.passages import Settings as Passages
from wiring.collections import Collections, Document, Given
from wiring.components import Components

if TYPE_CHECKING:
    from encoder import TextEncoder

log = logging.getLogger(__name__)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file, gzipped when its name ends in ``.gz``."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _state(parts: Components, collection: str, corpus: Path, rows: list[dict[str, Any]]
           ) -> str:
    """``new``: no collection; ``partial``: fewer rows than the corpus has documents, or
    without the corpus' last document (a first start stopped while writing: the fill
    writes the corpus in order, each document's head last); ``stale``: made by another
    encoder (e.g. the same model stored at another precision: another fingerprint) or
    without the BM25 index the store can have (an older start); ``complete``."""
    try:
        info = parts.store.describe(collection)
    except CollectionNotFoundError:
        log.info("creating the demo collection %r from %s (%d documents)...", collection,
                 corpus, len(rows))
        return "new"
    if info.encoder is not None and info.encoder != parts.info:
        log.warning("the demo collection %r holds vectors of encoder %s (fingerprint %s), not "
                    "of the served %s (%s): building it again", collection, info.encoder.name,
                    info.encoder.fingerprint, parts.info.name, parts.info.fingerprint)
        return "stale"
    if info.hybrid != parts.store.bm25_available():
        log.warning("the demo collection %r was made %s a BM25 index; building it again "
                    "(demo collections are hybrid wherever the store can)", collection,
                    "with" if info.hybrid else "without")
        return "stale"
    # a count of the rows, not of the documents: the documents' (a filter on passages'
    # metadata) took 1.5 s of a second start at 29,000 pairs, against 0.3 s
    have = parts.store.count(collection)
    if not rows or (have >= len(rows) and parts.store.get(collection, [str(rows[-1]["id"])])):
        return "complete"
    log.info("the demo collection %r has %d rows for the %d documents of %s, or lacks the "
             "last (a first start stopped while writing): writing them again", collection,
             have, len(rows), corpus)
    return "partial"


@dataclass
class Seeding:
    """How far a demo collection's seeding is: ``waiting`` (another demo goes first),
    ``seeding`` (``written`` of ``of`` documents searchable), ``complete``, ``stopped`` (the
    service stopped first: the next start completes it) or ``failed`` (``error``)."""

    collection: str
    of: int = 0
    written: int = 0
    state: str = "waiting"
    error: str | None = None
    kind: str = "documents"  # or "token memory": the collection's, built from it

    @property
    def done(self) -> bool:
        return self.state in ("complete", "stopped", "failed")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"collection": self.collection, "state": self.state,
                             "written": self.written, "of": self.of}
        if self.error:
            d["error"] = self.error
        if self.kind != "documents":
            d["kind"] = self.kind
        return d


@dataclass
class DemoPlan:
    """A demo collection prepared by :func:`prepare_demo`: it exists (perhaps empty), and
    :func:`fill_demo` writes ``rows`` into it (none when it was complete)."""

    collection: str
    corpus: Path
    rows: list[dict[str, Any]]
    progress: Seeding


def prepare_demo(parts: Components, corpus: Path, collection: str) -> DemoPlan:
    """The quick part of seeding: read the corpus, then create ``collection`` (its documents
    cut into passages, as a collection made through the API by default) unless it is
    complete (a collection made by another encoder, or without the BM25 index the store
    can have, is dropped first: the demo never serves another encoder's vectors)."""
    collection = collection_name(collection)
    rows = read_jsonl(corpus)
    progress = Seeding(collection, of=len(rows))
    state = _state(parts, collection, corpus, rows)
    if state == "complete":
        progress.written, progress.state = len(rows), "complete"
        return DemoPlan(collection, corpus, [], progress)
    if state == "stale":
        parts.store.drop(collection)
    if state in ("new", "stale"):  # as POST /v1/collections makes one by default
        parts.store.create(collection, parts.info.dim, parts.info,
                           hybrid=parts.store.bm25_available())
        parts.store.set_passages(collection, Passages.default(parts.encoder.max_tokens).to_dict())
    return DemoPlan(collection, corpus, rows, progress)


async def fill_demo(collections: Collections, plan: DemoPlan, batch: int = 1024,
                    stop: threading.Event | None = None) -> int:
    """Write the plan's rows through the collections' write path (:meth:`wiring.collections.
    Collections.write`, as an upsert request's), ``batch`` at a time: with the corpus'
    vectors when they match the served encoder (:func:`read_vectors`), else embedded, so
    each batch is searchable as soon as it is written and ``plan.progress`` says how far
    it is. Returns the documents written. Not counted toward a calibration: the service
    calibrates the filled collection once, at the end.

    A start stopped here (``stop`` set between batches, or the process killed) leaves fewer
    documents than the corpus has: the next start writes them all again (upserts by id,
    so nothing is doubled) and completes it."""
    progress, rows = plan.progress, plan.rows
    if not rows:
        return 0
    progress.state, progress.written = "seeding", 0
    t0 = time.perf_counter()
    served = collections.encoders.default.info
    x = await collections.run(read_vectors, plan.corpus, served, len(rows))
    n = 0
    for start in range(0, len(rows), batch):
        if stop is not None and stop.is_set():
            progress.state = "stopped"
            log.info("demo collection %r: stopped after %d of %d documents; the next start "
                     "completes it", plan.collection, n, len(rows))
            return n
        chunk = rows[start:start + batch]
        docs = [Document(str(r["id"]), r["text"], r.get("value"), r.get("metadata") or {})
                for r in chunk]
        given = Given(served, x[start:start + batch]) if x is not None else None
        written, _ = await collections.write(plan.collection, docs, given=given,
                                             counted=False)
        n += written
        progress.written = start + len(chunk)
    progress.state = "complete"
    log.info("demo collection %r: %d documents in %.1f s (%s)", plan.collection, n,
             time.perf_counter() - t0, "shipped vectors" if x is not None else "encoded")
    return int(n)


async def seed_demo(parts: Components, collections: Collections, corpus: Path,
                    collection: str, batch: int = 1024) -> int:
    """Create ``collection`` from the JSONL ``corpus`` (id, text, optional value, metadata)
    unless it is already complete: a document corpus, or a translation memory whose
    ``text`` is the source sentence and ``value`` the target the decoder reads. Returns the
    documents written (0 when it was complete). The service does the same in two steps
    (:func:`prepare_demo` before it answers, :func:`fill_demo` in the background)."""
    return await fill_demo(collections, prepare_demo(parts, corpus, collection), batch)


def demo_token_memory(parts: Components, collection: str, out: Path, progress: Seeding,
                      stop: threading.Event | None = None, store_name: str = "") -> None:
    """Give the (filled) demo translation memory ``collection`` its token memory at
    ``out``: loaded when it was built before with the collection's decoder, else built
    from the collection now (``progress`` says how far; ``stop`` ends it between pages and
    the next start resumes it), then used by ``generate``. Pairs written into the
    collection while it is first built are not in it."""
    from decoder.knn import MemoryMismatchError, TokenMemory
    from wiring.token_memory_job import build_from_collection

    stored = collection_name(collection)
    dec = parts.decoders[stored]
    if (out / "memory.json").is_file():
        try:
            memory = TokenMemory.load(out, dec.fingerprint)
            parts.token_memories[stored] = memory
            progress.written = progress.of = int(memory.meta.get("pairs") or 0)
            progress.state = "complete"
            log.info("demo %s: token memory from %s", stored, out)
            return
        except MemoryMismatchError as e:
            log.warning("demo %s: %s; building it again", stored, e)

    def read(n: int, of: int) -> None:
        progress.state, progress.of, progress.written = "seeding", of, n

    info = build_from_collection(dec, parts.store, stored, out, store_name=store_name,
                                 progress_bar=False, stop=stop, on_page=read)
    if not info["done"]:
        progress.state = "stopped"
        return
    parts.token_memories[stored] = TokenMemory.load(out, dec.fingerprint)
    progress.state, progress.written = "complete", progress.of
    log.info("demo %s: token memory built in %s: %s", stored, out, info)


def _encode(encoder: TextEncoder, texts: list[str], what: str, batch: int = 2048
            ) -> np.ndarray:
    with tqdm(total=len(texts), unit="doc", desc=f"encoding {what}") as bar:
        chunks = []
        for start in range(0, len(texts), batch):
            chunks.append(encoder.encode(texts[start : start + batch]))
            bar.update(len(chunks[-1]))
    return np.concatenate(chunks) if chunks else np.zeros((0, encoder.dim), np.float32)


def vectors_path(corpus: Path) -> Path:
    """``data/demo/x.jsonl.gz`` → ``data/demo/x.vectors.npz``."""
    name = corpus.name.removesuffix(".gz").removesuffix(".jsonl")
    return corpus.with_name(f"{name}.vectors.npz")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_vectors(encoder: TextEncoder, info: EncoderInfo, corpus: Path) -> Path:
    """Encode ``corpus`` and write its vectors file (float16, with the encoder's identity
    and the corpus' SHA-256) beside it; returns its path."""
    rows = read_jsonl(corpus)
    x = _encode(encoder, [r["text"] for r in rows], corpus.name)
    meta = {"encoder": info.to_dict(), "corpus": corpus.name, "corpus_sha256": _sha256(corpus),
            "rows": len(rows), "dtype": "float16"}
    out = vectors_path(corpus)
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, vectors=x.astype(np.float16), meta=np.array(json.dumps(meta)))
    tmp.replace(out)
    return out


def read_vectors(corpus: Path, info: EncoderInfo, rows: int) -> np.ndarray | None:
    """The corpus' shipped vectors (unit float32 rows) if its vectors file exists and was
    made by the encoder ``info`` from this very corpus file; None (and a log line saying
    why) otherwise."""
    path = vectors_path(corpus)
    if not path.is_file():
        return None
    x, why = _checked_vectors(path, corpus, info, rows)
    if x is None:
        log.info("not using %s (%s): encoding %s", path, why, corpus)
        return None
    log.info("vectors of %s from %s (encoder %s)", corpus.name, path, info.fingerprint)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _checked_vectors(path: Path, corpus: Path, info: EncoderInfo, rows: int
                     ) -> tuple[np.ndarray | None, str]:
    try:
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            made_by = EncoderInfo.from_dict(meta["encoder"])
            if made_by != info:
                return None, (f"made by encoder {made_by.name} {made_by.fingerprint}, the "
                              f"service's is {info.name} {info.fingerprint}")
            if meta["corpus_sha256"] != _sha256(corpus) or meta["rows"] != rows:
                return None, "made from another version of the corpus"
            x = f["vectors"].astype(np.float32)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"unreadable: {e}"
    if x.shape != (rows, info.dim):
        return None, f"shape {x.shape}, expected {(rows, info.dim)}"
    return x, ""
