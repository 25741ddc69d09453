"""``qkv index``: the bulk indexing job on the command line.

Exit status: 0 done; 3 done but some rows were rejected (see the rejects file); 75
(EX_TEMPFAIL) the store stayed unreachable, progress saved, run the same command again;
1 any other error.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import typer

from index.store import explain

log = logging.getLogger(__name__)

EXIT_REJECTED = 3
EXIT_UNAVAILABLE = 75
DEFAULT_MODEL = Path("models/encoder-default")


def index(
    collection: str | None = typer.Option(
        None, "--collection", help="Collection name (created on first use; '-' is stored as "
        "'_'). With --alias, default ALIAS_<hash of the job>, so the same command resumes."),
    input: list[Path] = typer.Option(..., "--input", exists=True, dir_okay=False,
                                     help="Input file(s): --input a.jsonl b.jsonl, or repeat."),
    more_inputs: list[Path] = typer.Argument(None, exists=True, dir_okay=False, hidden=True),
    store: str = typer.Option("var/qkv.db", "--store",
                              help="Milvus Lite file, http://host:port, or faiss://DIR."),
    token: str = typer.Option("", "--token", envvar="QKV_MILVUS_TOKEN",
                              help="Milvus token (user:password or API key)."),
    model: Path = typer.Option(DEFAULT_MODEL, "--model", help="Encoder checkpoint directory."),
    format: str | None = typer.Option(None, "--format",
                                      help="jsonl, csv or parquet (default: from the suffix)."),
    id_field: str = typer.Option("id", "--id-field"),
    text_field: str = typer.Option("text", "--text-field"),
    value_field: str | None = typer.Option(None, "--value-field",
                                           help="Field holding the value the decoder reads."),
    batch_size: int = typer.Option(2048, "--batch-size", min=1,
                                    help="Docs per encode call and per store write."),
    shard: str = typer.Option("0/1", "--shard", help="Run shard i of N (split by id hash)."),
    state_dir: Path = typer.Option(Path("var/index-jobs"), "--state-dir",
                                   help="Where progress and rejects files live."),
    rejects: Path | None = typer.Option(None, "--rejects", help="Rejects file (JSONL)."),
    restart: bool = typer.Option(False, "--restart", help="Ignore saved progress, start over."),
    retries: int = typer.Option(5, "--retries", min=0, help="Tries when the store is down."),
    backoff: float = typer.Option(1.0, "--backoff", min=0.0, help="First retry delay (s)."),
    timeout: float = typer.Option(10.0, "--timeout", min=0.1, help="Per-call store timeout (s)."),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda, ... (default: auto)."),
    workers: int = typer.Option(0, "--encode-workers", min=0,
                                help="Batches encoded at once (default: one per CPU thread, "
                                     "each single-threaded; 1 on a GPU)."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    hybrid: bool | None = typer.Option(
        None, "--hybrid/--no-hybrid", help="Create the collection with a BM25 index of the "
        "text beside the vectors (default: yes where the store has BM25; an existing "
        "collection is kept as it is)."),
    alias: str | None = typer.Option(
        None, "--alias", help="Zero-downtime re-index: fill a new collection while ALIAS "
        "answers from the old one, then, once the job is complete, point ALIAS at the new "
        "one in one step (created if new). Clients search ALIAS throughout."),
    drop_old: bool = typer.Option(False, "--drop-old", help="With --alias: drop the "
                                  "collection ALIAS pointed at before, a few seconds after "
                                  "the move (once no server still reads it)."),
    tune: bool = typer.Option(True, "--tune/--no-tune", help="Once the job is complete, "
                              "calibrate the collection's hybrid search from its documents "
                              "(`qkv tune`; a hybrid collection, one shard)."),
    engine: str = typer.Option(
        "local", "--engine", help="local: this process. ray: a pool of encoder workers on Ray "
        "(pip install -e '.[ray]'); on a Milvus server the workers write in parallel, on a "
        "Milvus Lite file or FAISS directory (one process's) they encode and this process "
        "writes. Inputs and --state-dir must be readable by every node."),
    address: str | None = typer.Option(
        None, "--address", help="With --engine ray: an existing Ray cluster (ray://HOST:10001 "
        "or auto); default a local Ray started here."),
    ray_workers: int = typer.Option(0, "--workers", min=0, help="With --engine ray: encoder "
                                    "workers (default one per CPU of the cluster)."),
    gpus_per_worker: float = typer.Option(0.0, "--gpus-per-worker", min=0.0,
                                          help="With --engine ray: GPUs per worker (torch on "
                                          "CUDA there)."),
    load: str = typer.Option(
        "upsert", "--load", help="upsert, or bulk-import (with --engine ray, a new collection "
        "on a Milvus server): Parquet files under --bulk-dir, then Milvus bulk imports, each "
        "recorded so a rerun never imports a file twice."),
    bulk_dir: str | None = typer.Option(
        None, "--bulk-dir", help="With --load bulk-import: where the Parquet files go. A "
        "directory the Milvus server reads at the same path (a standalone on local storage "
        "on this machine, or a volume mounted at the same path), or s3://BUCKET/PREFIX for a "
        "server on MinIO/S3 (the bucket it keeps its data in; credentials from "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)."),
    s3_endpoint: str | None = typer.Option(
        None, "--s3-endpoint", envvar="QKV_S3_ENDPOINT", help="With --bulk-dir s3://...: the "
        "S3 API's address, http(s)://host:port (MinIO: http://minio:9000); default AWS S3."),
    bulk_rows: int = typer.Option(250_000, "--bulk-rows", min=1, help="With --load "
                                  "bulk-import: rows per imported file (the ranges' files "
                                  "are merged up to this; each import costs seconds)."),
) -> None:
    """Encode a corpus and upsert it into a collection. Resumable: run it again after a kill."""
    # Encoding overlaps the write of the previous batch: see wiring.runtime.
    from wiring import runtime

    runtime.configure()
    from index import Fields, StoreError, StoreUnavailableError, collection_name
    from index.bulk.corpus import parse_shard
    from wiring.indexing import alias_target, index_files, job_config, move_alias

    inputs = [*input, *(more_inputs or [])]
    try:
        shard_i, n_shards = parse_shard(shard)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--shard") from e
    fields = Fields(id=id_field, text=text_field, value=value_field)
    if alias is not None:
        if n_shards != 1:
            raise typer.BadParameter(
                "an alias moves when the whole job is done: index the shards into "
                "--collection NAME, then `qkv alias set ALIAS NAME`", param_hint="--alias")
        try:
            alias = collection_name(alias)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--alias") from e
        collection = collection or alias_target(alias, inputs, store, fields, format)
    elif drop_old:
        raise typer.BadParameter("--drop-old goes with --alias", param_hint="--drop-old")
    if collection is None:
        raise typer.BadParameter("give --collection (or --alias)", param_hint="--collection")
    try:  # `tm-en-fr` is stored as `tm_en_fr`, as the API stores it
        collection = collection_name(collection)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--collection") from e
    if engine not in ("local", "ray"):
        raise typer.BadParameter("local or ray", param_hint="--engine")
    if load not in ("upsert", "bulk-import"):
        raise typer.BadParameter("upsert or bulk-import", param_hint="--load")
    if load == "bulk-import" and (engine != "ray" or bulk_dir is None):
        raise typer.BadParameter("bulk-import goes with --engine ray and --bulk-dir",
                                 param_hint="--load")
    if bulk_dir is not None and load != "bulk-import":
        raise typer.BadParameter("--bulk-dir goes with --load bulk-import",
                                 param_hint="--bulk-dir")
    if bulk_dir is not None and bulk_dir.startswith("s3://"):
        from wiring.bulk_remote import Bucket

        try:
            Bucket.parse(bulk_dir, s3_endpoint)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--bulk-dir") from e
    if engine == "ray" and n_shards != 1:
        raise typer.BadParameter("Ray splits the job itself: no --shard with --engine ray",
                                 param_hint="--shard")
    config = job_config(collection, inputs, store, fields, format, batch_size,
                        (shard_i, n_shards), state_dir, rejects, restart, retries, backoff,
                        progress, hybrid)
    try:
        if engine == "ray":
            summary = index_on_ray(collection, inputs, config, store, model, token, timeout,
                                   restart, ray_workers, gpus_per_worker, address, device,
                                   bulk_dir, bulk_rows, s3_endpoint)
        else:
            summary = index_files(collection, inputs, config, store, model, token, timeout,
                                  device, workers)
    except StoreUnavailableError as e:
        typer.echo(f"error: {explain(e)}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from e
    except (StoreError, ValueError) as e:
        typer.echo(f"error: {explain(e)}", err=True)
        raise typer.Exit(1) from e
    typer.echo(summary.line())
    if tune and summary.complete and n_shards == 1:
        tune_after(store, collection, model, token, timeout)
    if alias is not None and summary.complete:
        try:
            typer.echo(move_alias(store, token, timeout, alias, collection, drop_old))
        except StoreError as e:
            typer.echo(f"error: the job is complete but alias {alias} did not move: {e}",
                       err=True)
            raise typer.Exit(EXIT_UNAVAILABLE if isinstance(e, StoreUnavailableError)
                             else 1) from e
    if summary.total_rejected:
        typer.echo(f"{summary.total_rejected} rows rejected; see {config.rejects_path}", err=True)
        raise typer.Exit(EXIT_REJECTED)


def index_on_ray(collection: str, inputs: list[Path], config: Any, store: str, model: Path,
                 token: str, timeout: float, restart: bool, workers: int, gpus: float,
                 address: str | None, device: str | None, bulk_dir: str | None = None,
                 bulk_rows: int = 250_000, s3_endpoint: str | None = None) -> Any:
    """The job on Ray (wiring/ray_indexing.py), its files beside the local engine's."""
    try:
        import ray  # noqa: F401

        from wiring.ray_indexing import index_with_ray
    except ImportError as e:  # the optional extra
        raise typer.BadParameter(f"--engine ray needs Ray: pip install -e '.[ray]' ({e})",
                                 param_hint="--engine") from e
    stem = config.state_path.name.removesuffix(".progress.json")
    return index_with_ray(collection, inputs, config.fields, config.format, store, model,
                          token, timeout, config.state_path.parent, stem,
                          config.rejects_path, restart, config.batch_size, workers, gpus,
                          address, config.hybrid, config.retries, config.backoff_s,
                          config.progress_bar, device, bulk_dir, bulk_rows, s3_endpoint)


def tune_after(store: str, collection: str, model: Path, token: str, timeout: float) -> None:
    """Calibrate a just-indexed hybrid collection (a dense-only one has nothing to
    calibrate); a failure is said, not fatal (the index is complete: `qkv tune` can run
    again later)."""
    from index import StoreError, UnsupportedError
    from wiring.tuning import tune_collection

    try:
        cal = tune_collection(store, collection, model, token, timeout)
    except UnsupportedError:
        return
    except (StoreError, ValueError) as e:
        typer.echo(f"warning: hybrid calibration failed ({e}); run `qkv tune {collection}`",
                   err=True)
        return
    typer.echo(f"hybrid calibration: dense weight {cal.dense_weight} ({cal.source}; "
               f"{cal.note}) in {cal.seconds:.1f} s")


def register(app: typer.Typer) -> None:
    app.command("index")(index)
