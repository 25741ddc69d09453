"""``qkv index --engine ray``: the bulk job on a Ray cluster (Ray Data, the optional ``ray``
extra). The driver plans the job into ranges (``index.bulk.ranges``: a manifest, resumable by
markers); a pool of long-lived encoder actors (``map_batches``, the checkpoint loaded once
per actor; ONNX on a CPU, torch on a GPU) reads and encodes one range per call; and

- on a Milvus server, a :class:`StoreSink` (a Ray ``Datasink``) upserts each range from the
  write tasks, in parallel, retrying with backoff while the store is unavailable;
- on Milvus Lite or FAISS, whose files one process owns, the driver writes what the actors
  encoded;
- with ``--load bulk-import`` (a new collection on a Milvus server), the driver writes each
  range as a Parquet file and then imports the files (``wiring.ray_bulk``).

Either way a range's marker is written only after its upsert was acknowledged, so a kill of
the driver, a worker or a node, and a rerun of the same command, lose nothing; ranges are
written at least once (a retried Ray task writes again), which upserts by id make
harmless, and ids repeated in the input keep their last occurrence (``index.bulk.ranges``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from index import (
    CollectionNotFoundError,
    EncoderInfo,
    Fields,
    Item,
    JobConfig,
    VectorStore,
    open_store,
)
from index import passages as long_docs
from index.bulk.job import retry_unavailable
from index.bulk.ranges import (
    Manifest,
    Range,
    done_reports,
    mark_done,
    pending,
    read_range,
    write_json,
)
from index.store import hybrid_default
from wiring import runtime
from wiring.index_job import IndexJob
from wiring.ray_progress import Progress, tick

log = logging.getLogger(__name__)
T = TypeVar("T")
RangeWriter = Callable[[Range, dict[str, Any], list[Item]], Any]


def is_server(store: str) -> bool:
    return store.startswith(("http://", "https://"))


@dataclass(frozen=True)
class RayJob:
    """Everything a worker needs, picklable: where the inputs, the model and the store are."""

    collection: str
    inputs: list[str]
    formats: list[str]
    fields: Fields
    model: str
    store: str
    token: str
    timeout: float
    encoder: EncoderInfo
    done_dir: str
    device: str | None = None
    retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    # how documents are cut into passages (index.passages.Settings as a dict; None: one row
    # a document): the job's for a new collection, an existing one's own (run_ray decides)
    passages: dict[str, Any] | None = None
    keywords: bool = False  # a hybrid collection's passages keep their windows' terms
    # the driver's process settings (wiring.runtime.current: QKV_NO_BF16 ...), which the
    # encoder actors, processes of their own, take on
    runtime: dict[str, Any] | None = None


def retrying(job: RayJob, what: str, fn: Callable[[], T], counter: list[int]) -> T:
    """``fn()`` with the job's retries (``index.bulk.job.retry_unavailable``), counted in
    ``counter[0]``."""
    def count() -> None:
        counter[0] += 1

    return retry_unavailable(what, fn, job.retries, job.backoff_s, job.max_backoff_s,
                             lambda: "What was written is recorded", count)


def encoded_range(job: RayJob, row: dict[str, Any]
                  ) -> tuple[Range, dict[str, Any], list[Item]]:
    """One encoded range (a row the encoder actors made) of one row a document: the range,
    its meta, its items."""
    meta = json.loads(row["meta"])
    vectors = np.frombuffer(row["vectors"], dtype=np.float32).reshape(-1, job.encoder.dim)
    items = [Item(i, vectors[n], t, v, m) for n, (i, t, v, m) in
             enumerate(zip(meta["ids"], meta["texts"], meta["values"], meta["metadata"],
                           strict=True))]
    return Range.from_dict(meta["range"]), meta, items


def planned_range(job: RayJob, row: dict[str, Any]
                  ) -> tuple[Range, dict[str, Any], long_docs.Planned, np.ndarray]:
    """One encoded range of documents cut into passages: the range, its meta, its plan
    (the passages' spans) and the passages' vectors."""
    meta = json.loads(row["meta"])
    vectors = np.frombuffer(row["vectors"], dtype=np.float32).reshape(-1, job.encoder.dim)
    spans = [[long_docs.Passage(a, b, "") for a, b in doc] for doc in meta["passages"]]
    planned = long_docs.Planned(meta["ids"], meta["texts"], meta["values"], meta["metadata"],
                                meta["versions"], spans, keywords=job.keywords)
    return Range.from_dict(meta["range"]), meta, planned, vectors


def write_encoded(job: RayJob, store: VectorStore, row: dict[str, Any]) -> dict[str, Any]:
    """Upsert one encoded range (documents cut into passages: committed whole, as the
    local job and the service commit them, ``index.passages.commit``) and then mark it
    done."""
    retries = [0]
    if job.passages is not None:
        r, meta, planned, vectors = planned_range(job, row)
        written = retrying(job, "upsert", lambda: long_docs.commit(
            store, job.collection, planned, vectors, job.encoder), retries) if planned.ids else 0
    else:
        r, meta, items = encoded_range(job, row)
        written = retrying(job, "upsert", lambda: store.upsert(
            job.collection, items, job.encoder), retries) if items else 0
    report = {"written": written, "rejects": meta["rejects"], "superseded": meta["superseded"],
              "worker": meta["worker"], "writer": f"{socket.gethostname()}:{os.getpid()}",
              "retries": retries[0], "encode_s": meta["encode_s"]}
    mark_done(Path(job.done_dir), r, report)
    return report


class EncodeRanges:
    """The Ray Data actor: loads the encoder once, then reads and encodes one range a call."""

    def __init__(self, job: RayJob, threads: int = 1) -> None:
        from wiring.components import load_encoder

        if job.runtime is not None:
            runtime.use(**job.runtime)
        self.job = job
        self.encoder = load_encoder(job.model, job.device, cpu_threads=threads)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.passages = long_docs.Settings.of(job.passages)
        self.count = long_docs.token_counter(self.encoder.tokenizer)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, list[Any]] = {"key": [], "meta": [], "vectors": []}
        for spec in batch["range"]:
            r = Range.from_dict(json.loads(spec))
            path, fmt = Path(self.job.inputs[r.file]), self.job.formats[r.file]
            t0 = time.perf_counter()
            docs = read_range(path, fmt, r, self.job.fields, self.passages is not None)
            meta: dict[str, Any] = {
                "range": r.to_dict(), "ids": docs.ids, "texts": docs.texts,
                "values": docs.values, "metadata": docs.metadata, "rejects": docs.rejects,
                "superseded": docs.superseded, "worker": self.worker}
            texts = docs.texts
            if self.passages is not None:  # cut as the local job and the service cut them
                planned = long_docs.plan(list(zip(docs.ids, docs.texts, docs.values,
                                                  docs.metadata, strict=True)),
                                         self.passages, self.count, self.job.encoder)
                texts = planned.embed_texts
                meta["versions"] = planned.versions
                meta["passages"] = [[[x.start, x.end] for x in doc]
                                    for doc in planned.passages]
            vectors = (self.encoder.encode(texts) if texts
                       else np.zeros((0, self.job.encoder.dim), np.float32))
            meta["encode_s"] = round(time.perf_counter() - t0, 3)
            out["key"].append(r.key)
            out["meta"].append(json.dumps(meta, ensure_ascii=False))
            out["vectors"].append(np.ascontiguousarray(vectors, np.float32).tobytes())
        return {k: np.array(v, dtype=object) for k, v in out.items()}


def _datasink_class() -> type:
    from ray.data import Datasink

    class StoreSink(Datasink):  # type: ignore[misc]
        """Upserts each encoded range into a Milvus server from Ray's write tasks, then
        marks it done: writes are at least once, and idempotent by id."""

        def __init__(self, job: RayJob) -> None:
            self.job = job

        @property
        def supports_distributed_writes(self) -> bool:
            return True

        def get_name(self) -> str:
            return f"qkv({self.job.collection})"

        def write(self, blocks: Iterable[Any], ctx: Any) -> list[dict[str, Any]]:
            from ray.data.block import BlockAccessor

            store = open_store(self.job.store, token=self.job.token, timeout=self.job.timeout)
            try:
                reports: list[dict[str, Any]] = []
                for block in blocks:
                    rows: Iterable[dict[str, Any]] = BlockAccessor.for_block(block).iter_rows(
                        public_row_format=True)
                    reports += [write_encoded(self.job, store, row) for row in rows]
                return reports
            finally:
                store.close()

    return StoreSink


def open_driver_store(job: RayJob, hybrid: bool | None
                      ) -> tuple[VectorStore, dict[str, Any] | None, bool]:
    """The driver's store, the collection made, how its documents are cut (an existing
    collection's way, else the job's: a new one is made so) and whether it is hybrid."""
    store = open_store(job.store, token=job.token, timeout=job.timeout, bulk=True)
    try:
        try:
            chosen = retrying(job, "describe", lambda: store.describe(job.collection),
                              [0]).passages
        except CollectionNotFoundError:
            chosen = job.passages
        info = retrying(job, "create", lambda: store.create(
            job.collection, job.encoder.dim, job.encoder,
            hybrid=hybrid_default(store, job.collection, hybrid)), [0])
        if chosen is not None and info.passages is None:
            retrying(job, "create", lambda: store.set_passages(job.collection, chosen), [0])
    except BaseException:
        store.close()
        raise
    return store, chosen, info.hybrid


def run_ray(job: RayJob, manifest: Manifest, state_path: Path, workers: int,
            gpus_per_worker: float, address: str | None, hybrid: bool | None,
            progress: Callable[[dict[str, Any]], None],
            write_range: RangeWriter | None = None, shutdown: bool = False,
            opened: Future[tuple[VectorStore, dict[str, Any] | None, bool]] | None = None
            ) -> dict[str, Any]:
    """Run the job's pending ranges on Ray; returns the final progress figures.
    ``write_range``: where the driver puts each encoded range (:func:`encoded_range`)
    instead of the store (the Parquet files of a bulk import, ``wiring.ray_bulk``).
    ``shutdown``: stop Ray when done, as the store closes (a Ray this call starts is
    always stopped).

    ``opened``: the driver's store already opening (:func:`open_driver_store`, as
    :func:`index_with_ray` starts it while Ray starts), closed here as one opened here is.

    The driver's store is opened and the collection made in a thread, while Ray starts
    the encoder actors (seconds: a worker process, then the checkpoint); where the driver
    writes, it waits for them at the first encoded range; a Milvus server is waited for
    first, as its write tasks need the collection. It is closed (sealing what waits) while
    Ray shuts down. In a timeline of a 50,000-document job into Lite (AMD EPYC, 2 cores)
    these took 1.9 s and 1.3 s, now behind Ray's; whole, the job took 31.9-32.5 s against
    31.7-33.5 s before, within the machine's noise."""
    import ray

    done_dir = Path(job.done_dir)
    todo = pending(manifest, done_dir)
    tracker = Progress(manifest.records)
    tracker.start(done_dir)

    pool = ThreadPoolExecutor(1, thread_name_prefix="qkv-driver-store")
    if opened is None:
        opened = pool.submit(open_driver_store, job, hybrid)
    started_here = False
    try:
        if todo:
            started_here = not ray.is_initialized()  # else index_with_ray started it
            if started_here:
                start_ray(address)
            workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
            stop = threading.Event()
            ticker = threading.Thread(target=tick, args=(tracker, done_dir, state_path,
                                                          progress, stop), daemon=True)
            ticker.start()
            try:
                # the encoders cut documents as the collection does: known once it is open
                # (on Lite, ~2 s that Ray's start of its actors used to hide)
                store, chosen, keywords = opened.result()
                _pipeline(replace(job, passages=chosen, keywords=keywords), todo, workers,
                          gpus_per_worker, lambda: store, write_range)
            finally:
                stop.set()
                ticker.join()
        opened.result()
    finally:
        closing = pool.submit(_close_opened, opened)
        try:
            if started_here or shutdown:
                ray.shutdown()
        finally:
            pool.shutdown(wait=True)
        closing.result()
    final = tracker.update(done_dir)
    final["complete"] = not pending(manifest, done_dir)
    final["driver"] = f"{socket.gethostname()}:{os.getpid()}"
    write_json(state_path, final)
    progress(final)
    return final


def _close_opened(opened: Future[tuple[VectorStore, Any, bool]]) -> None:
    """Close the driver's store if it opened (a store that failed to open is not there)."""
    if opened.exception() is None:
        opened.result()[0].close()


def start_ray(address: str | None, tries: int = 3) -> None:
    """``ray.init``; a local start that times out (seen on 2 busy cores right after another
    local Ray stopped) is tried again after a pause."""
    import ray

    for attempt in range(tries):
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            return
        except Exception as e:  # Ray raises a bare Exception for a start that timed out
            if address is not None or attempt == tries - 1:
                raise
            log.warning("Ray did not start (%s); trying again in 5 s", e)
            ray.shutdown()
            time.sleep(5)


def _pipeline(job: RayJob, todo: list[Range], workers: int, gpus: float,
              driver_store: Callable[[], VectorStore],
              write_range: RangeWriter | None = None) -> None:
    """``driver_store()``: the driver's store once it is open and the collection made."""
    import ray

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the job shows its own, from the markers
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.WARNING)

    items = [{"range": json.dumps(r.to_dict())} for r in todo]
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    encoded = ds.map_batches(
        EncodeRanges, fn_constructor_kwargs={"job": job}, batch_size=1, batch_format="numpy",
        concurrency=workers, num_cpus=0 if gpus else 1, num_gpus=gpus or None,
        max_restarts=-1, max_task_retries=-1)
    if write_range is not None:  # the driver writes each range (a bulk import's files)
        for row in encoded.iter_rows():
            driver_store()  # the collection exists before the first file
            if job.passages is not None:  # a new collection: every document's first version
                r, meta, planned, vectors = planned_range(job, row)
                write_range(r, meta, long_docs.new_rows(planned, vectors))
            else:
                write_range(*encoded_range(job, row))
    elif is_server(job.store):  # the write tasks upsert, in parallel
        driver_store()  # they need the collection
        # no CPU asked: the encoders hold every CPU, and the server does the writes' work
        encoded.write_datasink(_datasink_class()(job), concurrency=max(1, workers),
                               ray_remote_args={"num_cpus": 0, "max_retries": -1})
    else:  # one process owns a Lite file or a FAISS directory: the driver writes
        for row in encoded.iter_rows():
            write_encoded(job, driver_store(), row)


def index_with_ray(job: IndexJob, config: JobConfig) -> Any:
    """``qkv index --engine ray``: plan (or read) the job's manifest, run what is pending on
    Ray, write the rejects file from the markers; returns an ``index.JobSummary``. With
    ``job.ray.bulk_dir`` (a new collection on a Milvus server) the driver writes Parquet
    files there and imports them (``wiring.ray_bulk``) instead of upserting. Its files lie
    beside the local engine's (``config``'s progress path, less its suffix)."""
    import shutil

    import ray
    from tqdm import tqdm

    from index import JobSummary

    collection = job.collection
    assert collection is not None, "run_index names the collection"
    inputs, fields, fmt = job.inputs, config.fields, config.format
    store, model, token, timeout = job.store, job.model, job.token, job.timeout
    state_dir = config.state_path.parent
    stem = config.state_path.name.removesuffix(".progress.json")
    rejects_path, restart, per_range = config.rejects_path, job.restart, config.batch_size
    workers, gpus_per_worker = job.ray.workers, job.ray.gpus_per_worker
    address = job.ray.address
    hybrid, retries, backoff_s = config.hybrid, config.retries, config.backoff_s
    show, device = config.progress_bar, job.device
    bulk_dir, bulk_rows, s3_endpoint = job.ray.bulk_dir, job.ray.bulk_rows, job.ray.s3_endpoint
    from index.bulk.corpus import detect_format
    from index.bulk.ranges import load_or_plan
    from wiring.components import encoder_info, load_encoder
    from wiring.ray_bulk import BulkLoad

    manifest_path = state_dir / f"{stem}.manifest.json"
    done_dir = state_dir / f"{stem}.done"
    state_path = state_dir / f"{stem}.ray.json"
    imports_path = state_dir / f"{stem}.imports.json"
    if restart:
        manifest_path.unlink(missing_ok=True)
        imports_path.unlink(missing_ok=True)
        shutil.rmtree(done_dir, ignore_errors=True)
    t0 = time.perf_counter()
    bulk = BulkLoad(bulk_dir, stem, store, token, timeout, collection, imports_path,
                    bulk_rows, s3_endpoint) if bulk_dir is not None else None
    known = load_or_plan(manifest_path, inputs, fields, fmt, per_range) \
        if manifest_path.is_file() else None  # a rerun: read it now, nothing to count
    finished = known is not None and not pending(known, done_dir)

    def plan() -> tuple[Manifest, tuple[int, int], RayJob]:
        import ray.data  # noqa: F401  (0.4 s of imports, while Ray starts)

        manifest = known or load_or_plan(manifest_path, inputs, fields, fmt, per_range)
        earlier = done_reports(done_dir).values()
        before = sum(d["written"] for d in earlier), sum(d["records"] for d in earlier)
        enc = load_encoder(model, "cpu", backend="torch")
        return manifest, before, RayJob(
            collection, [f["path"] for f in manifest.inputs],
            [detect_format(p, fmt) for p in inputs], fields, str(model.resolve()), store, token,
            timeout, encoder_info(enc), str(done_dir.resolve()), device, retries, backoff_s,
            passages=config.fitted(enc.max_tokens).passages, runtime=runtime.current())

    def open_planned() -> tuple[VectorStore, dict[str, Any] | None, bool]:
        return open_driver_store(planned.result()[2], hybrid)

    started_here, handed = False, False
    # a local Ray takes seconds to start: the inputs are counted, the encoder read, and
    # then the driver's store opened and the collection made meanwhile (ray.init stays on
    # the calling thread, as Ray expects). Made after Ray's start, the collection held
    # the actors back 1.2 s on Lite, both cores idle most of it (100,000 documents, AMD
    # EPYC, AVX2 only).
    with ThreadPoolExecutor(2, thread_name_prefix="qkv-plan") as pool:
        planned = pool.submit(plan)
        opened = pool.submit(open_planned)
        try:
            if not finished and not ray.is_initialized():
                start_ray(address)
                started_here = True
            manifest, before, ray_job = planned.result()
            with tqdm(total=manifest.records, unit="doc", desc=collection,
                      disable=not show, dynamic_ncols=True) as bar:
                def show_progress(figures: dict[str, Any]) -> None:
                    bar.n = figures["records_done"]
                    bar.set_postfix(written=figures["written"], retries=figures["retries"],
                                    eta=f"{figures['eta_s']:.0f}s", refresh=True)

                handed = True  # run_ray closes the store
                final = run_ray(ray_job, manifest, state_path, workers, gpus_per_worker,
                                address, hybrid, show_progress,
                                bulk.writer(ray_job) if bulk else None, shutdown=started_here,
                                opened=opened)
        finally:
            try:
                if not handed:
                    _close_opened(opened)
            finally:
                if started_here:
                    ray.shutdown()
    if bulk is not None:
        try:
            if final["complete"]:
                bulk.run(done_dir, show)
        finally:
            bulk.close()
    reports = done_reports(done_dir)
    rejects = sorted((r for d in reports.values() for r in d["rejects"]),
                     key=lambda r: (r["file"], r["line"]))
    rejects_path.parent.mkdir(parents=True, exist_ok=True)
    with open(rejects_path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rejects)
    return JobSummary(read=final["records_done"] - before[1],
                      written=final["written"] - before[0],
                      rejected=len(rejects), seconds=time.perf_counter() - t0,
                      total_written=final["written"], total_rejected=len(rejects),
                      complete=final["complete"])

