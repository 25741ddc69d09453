"""The bulk indexing job with the qkv encoder: ``qkv index``'s work, in one call
(:func:`run_index` of an :class:`IndexJob`): the collection an alias fills, the job here or
on Ray, the hybrid calibration after it and the alias's move. The job itself
(``index.bulk.job``) takes any ``embed`` callable; here it gets the encoder, its progress
file is named after the job's identity, and the encoder's threads are laid out for it."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from index import (
    DROP_GRACE_S,
    Fields,
    JobConfig,
    JobSummary,
    StoreError,
    bulk_index,
    open_store,
)
from index.bulk.job import job_identity
from index.passages import DEFAULT_SIZE, Settings, token_counter
from wiring.components import encoder_info, load_encoder
from wiring.index_job import IndexJob, RayOptions

__all__ = ["IndexJob", "IndexOutcome", "RayOptions", "run_index"]

log = logging.getLogger(__name__)


def _job_key(collection: str, inputs: list[Path], config: JobConfig, store: str) -> str:
    """A hash of what makes a job the same job (``index.bulk.job.job_identity``)."""
    return hashlib.sha256(json.dumps(job_identity(collection, inputs, config, store),
                                     sort_keys=True).encode()).hexdigest()


def job_config(collection: str, inputs: list[Path], store: str, fields: Fields,
               format: str | None, batch_size: int, shard: tuple[int, int], state_dir: Path,
               rejects: Path | None, restart: bool, retries: int, backoff_s: float,
               progress: bool, hybrid: bool | None = None,
               passages: tuple[int | None, int | None, int | None] | None = (None, None,
                                                                                None)
               ) -> JobConfig:
    """The job's settings; its progress file ``state_dir/COLLECTION.shardIofN.KEY``, KEY a
    hash of what makes the job the same job (collection, inputs, fields, shard, store), so
    that running the same command again resumes it (``restart``: start over)."""
    base = JobConfig(state_path=Path(), rejects_path=Path(), fields=fields, format=format,
                     shard=shard)
    key = _job_key(collection, inputs, base, store)[:10]
    stem = f"{collection}.shard{shard[0]}of{shard[1]}.{key}"
    state_path = state_dir / f"{stem}.progress.json"
    if restart:
        state_path.unlink(missing_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    return JobConfig(
        state_path=state_path, rejects_path=rejects or state_dir / f"{stem}.rejects.jsonl",
        fields=fields, format=format, batch_size=batch_size, shard=shard, retries=retries,
        backoff_s=backoff_s, progress_bar=progress, hybrid=hybrid,
        passages=(Settings.sized(passages[0] or DEFAULT_SIZE, *passages[1:]).to_dict()
                  if passages is not None else None),
        passages_asked=passages is not None and passages[0] is not None)


def index_files(collection: str, inputs: list[Path], config: JobConfig, store: str,
                model: Path, token: str = "", timeout: float = 10.0,
                device: str | None = None, encode_workers: int = 0) -> JobSummary:
    """Encode ``inputs`` with the encoder at ``model`` and upsert them into ``collection``
    of ``store``. Raises ``StoreUnavailableError`` when the store stays down (progress is
    saved: run it again), ``StoreError`` or ``ValueError`` otherwise."""
    import torch

    text_encoder = load_encoder(model, device)
    workers = encode_workers
    if text_encoder.device.type == "cpu":
        # Several single-threaded encoders instead of one multi-threaded one: when the
        # writer (or Milvus on the same machine) takes a core, one encoder slows down
        # instead of every OpenMP barrier stalling (bench/history/, Ingest: 2048-doc calls
        # at 0.76x one call this way, 0.67x on one two-threaded encoder).
        workers = workers or torch.get_num_threads()
        torch.set_num_threads(1)
    config = replace(config, encode_workers=workers or 1)
    config = config.fitted(text_encoder.max_tokens)
    info = encoder_info(text_encoder)
    log.info("encoder %s (%s, dim %d) from %s", info.name, info.fingerprint, info.dim, model)

    def embed(texts: list[str]) -> np.ndarray:
        # One call per job batch (default 2048 docs): the encoder sorts them by length into
        # batches of 64, so big job batches waste little padding. At 256 docs per call the
        # encoder ran at 0.51x its one-call speed (an earlier run of bench/ingest.py, in
        # the history of bench/history/).
        return text_encoder.encode(texts)

    count = token_counter(text_encoder.tokenizer)

    vector_store = open_store(store, token=token, timeout=timeout, bulk=True)
    try:
        summary = bulk_index(vector_store, collection, inputs, embed, config, encoder=info,
                             store_name=store, count=count)
    except BaseException:
        vector_store.close()
        raise
    # The store's close seals the last rows and waits for the segments' graphs: the job's
    # time, which its docs/s counts (it took 43 s of 643 at 522,000 documents on Lite)
    t0 = time.perf_counter()
    vector_store.close()
    summary.seconds += time.perf_counter() - t0
    return summary


def alias_target(alias: str, inputs: list[Path], store: str, fields: Fields,
                 format: str | None) -> str:
    """The collection ``qkv index --alias ALIAS`` fills: ``ALIAS_<hash>`` of the job's
    identity, so that the same command run again resumes the same collection, and a job
    over other inputs builds another."""
    base = JobConfig(state_path=Path(), rejects_path=Path(), fields=fields, format=format)
    key = _job_key(alias, inputs, base, store)[:8]
    return f"{alias}_{key}"


def move_alias(store: str, token: str, timeout: float, alias: str, collection: str,
               drop_old: bool) -> str:
    """Seal and load ``collection``, point ``alias`` at it, and (``drop_old``) drop the
    collection it pointed at before once readers have seen the move
    (``index.DROP_GRACE_S``); returns what was done, in a line."""
    vector_store = open_store(store, token=token, timeout=timeout)
    try:
        flush = getattr(vector_store, "flush", None)
        if flush is not None:
            flush(collection)  # searched fast from the first query after the move
        n = vector_store.count(collection)  # loaded, so the first query does not wait
        before = vector_store.set_alias(alias, collection)
        line = f"alias {alias} -> {collection} ({n} documents; before: {before or 'none'})"
        if drop_old and before and before != collection:
            time.sleep(DROP_GRACE_S)
            if before in vector_store.list_aliases().values():
                return f"{line}; {before} kept: another alias points at it"
            vector_store.drop(before)
            line += f"; dropped {before}"
        return line
    finally:
        vector_store.close()


@dataclass
class IndexOutcome:
    """What a job did: its summary and settings, the collection it filled, the hybrid
    calibration after it (or why it failed), and the alias move (or why it failed)."""

    summary: JobSummary
    config: JobConfig
    collection: str
    calibration: str | None = None
    calibration_error: str | None = None
    alias_line: str | None = None
    alias_error: StoreError | None = None


def run_index(job: IndexJob) -> IndexOutcome:
    """``qkv index``: the whole job in one call. Raises ``StoreUnavailableError`` when the
    store stays down (progress is saved: run it again), ``StoreError`` or ``ValueError``
    otherwise; a failed calibration or alias move after a complete job is reported in the
    outcome, not raised (the index is complete)."""
    collection = job.collection
    if job.alias is not None:
        collection = collection or alias_target(job.alias, job.inputs, job.store, job.fields,
                                                job.format)
    if collection is None:
        raise ValueError("give a collection (or an alias)")
    config = job_config(collection, job.inputs, job.store, job.fields, job.format,
                        job.batch_size, job.shard, job.state_dir, job.rejects, job.restart,
                        job.retries, job.backoff_s, job.progress, job.hybrid, job.passages)
    job = replace(job, collection=collection)
    if job.engine == "ray":
        from wiring.ray_indexing import index_with_ray

        summary = index_with_ray(job, config)
    else:
        summary = index_files(collection, job.inputs, config, job.store, job.model, job.token,
                              job.timeout, job.device, job.encode_workers)
    out = IndexOutcome(summary, config, collection)
    if job.calibrate and summary.complete and job.shard[1] == 1 and summary.total_written:
        out.calibration, out.calibration_error = calibrate_after(job.store, collection, job.model,
                                                            job.token, job.timeout)
    if job.alias is not None and summary.complete:
        try:
            out.alias_line = move_alias(job.store, job.token, job.timeout, job.alias,
                                        collection, job.drop_old)
        except StoreError as e:
            out.alias_error = e
    return out


def calibrate_after(store: str, collection: str, model: Path, token: str, timeout: float
               ) -> tuple[str | None, str | None]:
    """Calibrate a just-indexed hybrid collection (a dense-only one has nothing to
    calibrate): (what was chosen, in a line; None) or (None, why it failed)."""
    from index import UnsupportedError
    from wiring.calibrating import calibrate_collection

    try:
        cal = calibrate_collection(store, collection, model, token, timeout)
    except UnsupportedError:
        return None, None
    except (StoreError, ValueError) as e:
        return None, str(e)
    return (f"hybrid calibration: dense weight {cal.dense_weight} ({cal.source}; "
            f"{cal.note}) in {cal.seconds:.1f} s"), None
