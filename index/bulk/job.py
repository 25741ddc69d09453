"""The bulk indexing job: read → encode in batches → upsert, resumable and shardable.

Batch n+1 is encoded while batch n is written (one writer thread; with
``encode_workers`` > 1, that many batches are encoded at once). A batch's progress —
the input position after its last record, and the size of the rejects file — is saved
only after the store acknowledged the batch, so a job killed at any moment and started
again with the same arguments rewrites at most the batch in flight (upserts make that
harmless) and ends with exactly the input's distinct ids. Bad rows go to a JSONL rejects
file with their line and reason. When the store is unreachable the write is retried with
exponential backoff; after the last try the job stops with its progress saved.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tqdm import tqdm

from index import passages as long_docs
from index.bulk.corpus import (
    KNOWN_SUFFIXES,
    Fields,
    Position,
    detect_format,
    parse_document,
    read_records,
    reject,
    shard_of,
)
from index.bulk.documents import expand
from index.passages import Count, Settings
from index.store import (
    CollectionNotFoundError,
    EncoderInfo,
    Item,
    StoreUnavailableError,
    VectorStore,
    hybrid_default,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
Embed = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class JobConfig:
    """How to run one bulk job (or one shard of it)."""

    state_path: Path
    rejects_path: Path
    fields: Fields = Fields()
    format: str | None = None
    batch_size: int = 2048
    encode_workers: int = 1
    shard: tuple[int, int] = (0, 1)
    retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    progress_bar: bool = True
    hybrid: bool | None = None  # None: hybrid where the store has BM25 (an existing one: as is)
    # how a new collection's documents are cut into passages (index.passages.Settings as a
    # dict; None: one row a document); an existing collection keeps its own
    passages: dict[str, Any] | None = field(default_factory=lambda: Settings().to_dict())
    passages_asked: bool = False  # the size was the caller's (not the default)

    def fitted(self, window: int) -> JobConfig:
        """This config for an encoder that reads ``window`` tokens: a passage size over it
        is cut to it, or refused (``ValueError``) where the caller asked for that size."""
        if not self.passages or self.passages["size"] <= window:
            return self
        if self.passages_asked:
            raise ValueError(f"--passage-tokens must be at most {window} for this encoder "
                             f"(what it reads of a text), got {self.passages['size']}")
        return replace(self, passages=Settings.default(window).to_dict())


@dataclass
class JobSummary:
    """What one run did (``read`` … ``seconds``) and the job's totals over all its runs."""

    read: int = 0
    skipped_other_shards: int = 0
    written: int = 0
    rejected: int = 0
    seconds: float = 0.0
    total_written: int = 0
    total_rejected: int = 0
    complete: bool = False
    # the fields of rows rejected for want of the id or text field (what they have instead)
    fields_of_rejected: list[str] = field(default_factory=list)

    def field_hint(self, fields: Fields) -> str | None:
        """When no row was written and rows lacked the id or text field: which fields the
        rows have, and the option that names the right one."""
        if self.total_written or not self.fields_of_rejected:
            return None
        return (f"every row lacked the id field {fields.id!r} or the text field "
                f"{fields.text!r}; the rows have the fields "
                f"{', '.join(self.fields_of_rejected)}: name them with --id-field and "
                "--text-field")

    @property
    def docs_per_s(self) -> float:
        return self.written / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (f"read {self.read}, written {self.written}, rejected {self.rejected}, "
                f"other shards {self.skipped_other_shards}, {self.seconds:.1f} s, "
                f"{self.docs_per_s:.1f} docs/s (job totals: written {self.total_written}, "
                f"rejected {self.total_rejected}{', complete' if self.complete else ''})")


@dataclass
class _State:
    """The saved progress: next file and position in it, and the rejects file's size."""

    job: dict[str, Any]
    file: int = 0
    position: Position = Position()
    rejects_bytes: int = 0
    written: int = 0
    rejected: int = 0
    done: bool = False


@dataclass
class _Batch:
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    values: list[str | None] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    file: int = 0
    position: Position = Position()


def _load_state(path: Path, job: dict[str, Any]) -> _State:
    if not path.is_file():
        return _State(job=job)
    d = json.loads(path.read_text())
    if d["job"] != job:
        raise ValueError(
            f"progress file {path} belongs to another job ({d['job']}); use the same arguments, "
            "or delete it (or pass --restart) to start over")
    return _State(job=d["job"], file=d["file"], position=Position(**d["position"]),
                  rejects_bytes=d["rejects_bytes"], written=d["written"],
                  rejected=d["rejected"], done=d["done"])


def _save_state(path: Path, state: _State) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({**asdict(state), "position": asdict(state.position)}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def job_identity(collection: str, inputs: Sequence[Path], config: JobConfig,
                 store: str) -> dict[str, Any]:
    """What makes two runs the same job (resuming needs identical values)."""
    return {"collection": collection, "store": store,
            "inputs": [str(Path(p).resolve()) for p in inputs],
            "fields": asdict(config.fields), "format": config.format,
            "shard": list(config.shard)}


class BulkJob:
    """One run of a bulk job. Use :func:`bulk_index`."""

    def __init__(self, store: VectorStore, collection: str, inputs: Sequence[Path],
                 embed: Embed, encoder: EncoderInfo | None, config: JobConfig,
                 job: dict[str, Any], count: Count | None = None) -> None:
        if config.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {config.batch_size}")
        self.store, self.collection, self.embed = store, collection, embed
        files = expand([Path(p) for p in inputs], set(KNOWN_SUFFIXES))
        self.inputs = [f for f, _ in files]
        self.roots = [root for _, root in files]
        self.formats = [detect_format(p, config.format if root is None else None)
                        for p, root in files]
        self.count = count  # token counts: what cuts documents into passages
        self.seen: set[str] = set()  # fields of rows that lacked the id or text field
        self.passages: Settings | None = None
        self.keywords = False  # a hybrid collection's passages keep their windows' terms
        self.encoder, self.config = encoder, config
        self.state = _load_state(config.state_path, job)
        self.summary = JobSummary()
        self._created = False
        self._bar: Any = None

    def _cut_into_passages(self) -> Settings | None:
        """How this job's documents are cut: as the collection's are, or for a new one as
        the job says (one row a document without a token counter)."""
        try:
            info = self._retry("describe", lambda: self.store.describe(self.collection))
            chosen, self.keywords = info.passages, info.hybrid
        except CollectionNotFoundError:
            chosen = self.config.passages
            self.keywords = hybrid_default(self.store, self.collection, self.config.hybrid)
        return Settings.of(chosen) if self.count is not None else None

    def run(self) -> JobSummary:
        t0 = time.perf_counter()
        cfg, st = self.config, self.state
        self.passages = self._cut_into_passages()
        if st.done:
            log.info("job already complete per %s; nothing to do", cfg.state_path)
        else:
            cfg.rejects_path.parent.mkdir(parents=True, exist_ok=True)
            with open(cfg.rejects_path, "ab") as f:  # drop rejects of unacknowledged batches
                f.truncate(st.rejects_bytes)
            if st.file or st.position.offset:
                log.info("resuming at %s line %d", self.inputs[min(st.file, len(self.inputs) - 1)],
                         st.position.line)
            with tqdm(unit="doc", desc=self.collection, disable=not cfg.progress_bar,
                      dynamic_ncols=True) as self._bar:
                self._pipeline()
            st.done = True
            _save_state(cfg.state_path, st)
        s = self.summary
        s.seconds = time.perf_counter() - t0
        s.total_written, s.total_rejected, s.complete = st.written, st.rejected, st.done
        s.fields_of_rejected = sorted(self.seen)
        return s

    def _pipeline(self) -> None:
        """Read on this thread, encode up to ``encode_workers`` batches at once, write in
        input order on one writer thread (progress must advance in order)."""
        workers = max(1, self.config.encode_workers)
        with (ThreadPoolExecutor(workers, thread_name_prefix="qkv-encode") as encoders,
              ThreadPoolExecutor(1, thread_name_prefix="qkv-writer") as writer):
            encoding: deque[tuple[_Batch, Future[Any]]] = deque()
            writing: Future[None] | None = None

            def write_next() -> Future[None]:
                batch, vectors = encoding.popleft()
                result = vectors.result()
                if writing is not None:
                    writing.result()  # the previous write must land first
                return writer.submit(self._write, batch, result)

            for batch in self._batches():
                if len(encoding) >= workers:
                    writing = write_next()
                encoding.append((batch, encoders.submit(self._encode_batch, batch)))
            while encoding:
                writing = write_next()
            if writing is not None:
                writing.result()

    def _encode_batch(self, batch: _Batch) -> Any:
        """A batch's vectors; in a collection with passages, its documents planned into
        passages and the passages' vectors."""
        if self.passages is None or self.count is None:
            return self._encode(batch.texts)
        planned = long_docs.plan(list(zip(batch.ids, batch.texts, batch.values,
                                          batch.metadata, strict=True)),
                                 self.passages, self.count, self.encoder, self.keywords)
        return planned, self._encode(planned.embed_texts)

    def _encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.encoder.dim if self.encoder else 0), np.float32)
        xb = np.asarray(self.embed(texts), dtype=np.float32)
        if xb.ndim != 2 or len(xb) != len(texts):
            raise ValueError(f"embed returned shape {xb.shape} for {len(texts)} texts")
        return xb

    def _batches(self) -> Iterator[_Batch]:
        st, cfg = self.state, self.config
        shard_i, n_shards = cfg.shard
        batch = _Batch(file=st.file, position=st.position)
        for fi in range(st.file, len(self.inputs)):
            path, start = self.inputs[fi], st.position if fi == st.file else Position()
            for rec in read_records(path, self.formats[fi], start, self.roots[fi]):
                self.summary.read += 1
                batch.file, batch.position = fi, rec.end
                parsed = parse_document(rec, cfg.fields, self.passages is not None)
                if isinstance(parsed, str):  # each bad row is reported by one shard only
                    if rec.line % n_shards == shard_i:
                        batch.rejects.append(reject(path, rec, parsed))
                    if parsed.startswith(("missing id field", "missing text field")) and \
                            rec.row is not None and len(self.seen) < 1000:
                        self.seen.update(rec.row)
                elif shard_of(parsed[0], n_shards) != shard_i:
                    self.summary.skipped_other_shards += 1
                else:
                    rid, text, value, meta = parsed
                    batch.ids.append(rid)
                    batch.texts.append(text)
                    batch.values.append(value)
                    batch.metadata.append(meta)
                if len(batch.ids) >= cfg.batch_size:
                    yield batch
                    batch = _Batch(file=fi, position=rec.end)
            batch.file, batch.position = fi + 1, Position()
        yield batch  # the tail, possibly empty: it moves the saved position to the end

    def _write(self, batch: _Batch, encoded: Any) -> None:
        cfg, st = self.config, self.state
        planned, vectors = encoded if isinstance(encoded, tuple) else (None, encoded)
        if batch.ids:
            if not self._created:
                dim = self.encoder.dim if self.encoder else vectors.shape[1]
                self._retry("create", lambda: self.store.create(
                    self.collection, dim, self.encoder,
                    hybrid=hybrid_default(self.store, self.collection, cfg.hybrid)))
                if self.passages is not None:
                    passages = self.passages.to_dict()
                    self._retry("create", lambda: self.store.set_passages(self.collection,
                                                                          passages))
                self._created = True
            if planned is not None:
                n = self._retry("upsert", lambda: long_docs.commit(
                    self.store, self.collection, planned, vectors, self.encoder))
            else:
                items = [Item(i, vectors[r], batch.texts[r], batch.values[r],
                              batch.metadata[r]) for r, i in enumerate(batch.ids)]
                n = self._retry("upsert", lambda: self.store.upsert(self.collection, items,
                                                                    self.encoder))
            st.written += n
            self.summary.written += n
        if batch.rejects:
            with open(cfg.rejects_path, "a", encoding="utf-8") as f:
                for r in batch.rejects:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
            st.rejected += len(batch.rejects)
            self.summary.rejected += len(batch.rejects)
            for r in batch.rejects:
                log.debug("rejected %s line %d: %s", r["file"], r["line"], r["reason"])
        st.rejects_bytes = cfg.rejects_path.stat().st_size if cfg.rejects_path.exists() else 0
        st.file, st.position = batch.file, batch.position
        _save_state(cfg.state_path, st)  # only now: the store has acknowledged the batch
        if self._bar is not None:
            self._bar.update(len(batch.ids))
            self._bar.set_postfix(written=st.written, rejected=st.rejected, refresh=False)

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        def saved() -> str:
            where = (f"{self.inputs[self.state.file]} line {self.state.position.line}"
                     if self.state.file < len(self.inputs) else "the end of the input")
            return f"Progress is saved at {where}"

        cfg = self.config
        return retry_unavailable(what, fn, cfg.retries, cfg.backoff_s, cfg.max_backoff_s,
                                 saved)


def retry_unavailable(what: str, fn: Callable[[], T], retries: int, backoff_s: float,
                      max_backoff_s: float, saved: Callable[[], str],
                      retried: Callable[[], None] = lambda: None) -> T:
    """``fn()``, tried again with exponential backoff while the store is unavailable
    (``retried`` is called at each retry); after ``retries`` retries, a
    ``StoreUnavailableError`` that says what is saved (``saved()``) and to run again."""
    for attempt in range(retries + 1):
        try:
            return fn()
        except StoreUnavailableError as e:
            if attempt == retries:
                raise StoreUnavailableError(
                    f"store unreachable, gave up after {retries + 1} tries ({what}): {e}. "
                    f"{saved()}; run the same command again to continue.") from e
            retried()
            delay = min(max_backoff_s, backoff_s * 2**attempt)
            log.warning("store unreachable (%s), retry %d/%d in %.1f s: %s", what,
                        attempt + 1, retries, delay, e)
            time.sleep(delay)
    raise AssertionError("unreachable")


def bulk_index(
    store: VectorStore,
    collection: str,
    inputs: Sequence[Path],
    embed: Embed,
    config: JobConfig,
    encoder: EncoderInfo | None = None,
    store_name: str = "",
    count: Count | None = None,
) -> JobSummary:
    """Index ``inputs`` into ``collection`` with ``embed(texts) -> (n, d) float32``.

    With ``count`` (texts → token counts), documents are cut into passages as the
    collection's are (a new one: as ``config.passages`` says; :mod:`index.passages`);
    without, each is one row. The collection is created on first use (recording
    ``encoder``). Resumes from
    ``config.state_path`` when it holds the progress of the same job.
    """
    job = job_identity(collection, inputs, config, store_name)
    return BulkJob(store, collection, inputs, embed, encoder, config, job, count).run()
