"""``qkv index``: the bulk indexing job on the command line.

Exit status: 0 done; 3 done but some rows were rejected (see the rejects file); 75
(EX_TEMPFAIL) the store stayed unreachable, progress saved, run the same command again;
1 any other error.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from index.passages import DEFAULT_OVERLAP, DEFAULT_SIZE
from index.store import explain

log = logging.getLogger(__name__)

EXIT_REJECTED = 3
EXIT_UNAVAILABLE = 75
DEFAULT_MODEL = Path("models/encoder-default")


def index(
    collection: str | None = typer.Option(
        None, "--collection", help="Collection name (created on first use; '-' is stored as "
        "'_'). With --alias, default ALIAS_<hash of the job>, so the same command resumes."),
    input: list[Path] = typer.Option(
        ..., "--input", exists=True, help="Input files or folders: --input a.jsonl docs/, or "
        "repeat. Rows: JSONL, CSV, Parquet; documents, a file each: .txt, .md, .html, .pdf "
        "(a folder: every such file under it)."),
    more_inputs: list[Path] = typer.Argument(None, exists=True, hidden=True),
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
    chunking: bool = typer.Option(
        True, "--chunking/--no-chunking", help="Cut each document of a new collection into "
        "passages that follow its paragraphs and headings, so a document of any length (up "
        "to 10 MB of text) is searched whole (an existing collection keeps its own way)."),
    passage_tokens: int | None = typer.Option(
        None, "--passage-tokens", min=16, max=4096, help="A passage's size in tokens (at "
        f"most; default {DEFAULT_SIZE}, or what the encoder reads if less)."),
    passage_overlap: int | None = typer.Option(
        None, "--passage-overlap", min=0, help="Tokens shared by windows cut out of one "
        f"over-long sentence (default {DEFAULT_OVERLAP}, at most a quarter of the size)."),
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
    from index import (
        Fields,
        StoreError,
        StoreLockedError,
        StoreUnavailableError,
        collection_name,
    )
    from index.bulk.corpus import parse_shard
    from wiring.indexing import IndexJob, RayOptions, run_index

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
    elif drop_old:
        raise typer.BadParameter("--drop-old goes with --alias", param_hint="--drop-old")
    if collection is None and alias is None:
        raise typer.BadParameter("give --collection (or --alias)", param_hint="--collection")
    try:  # `tm-en-fr` is stored as `tm_en_fr`, as the API stores it
        collection = collection_name(collection) if collection is not None else None
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
    if engine == "ray" and any(p.is_dir() for p in inputs):
        raise typer.BadParameter("--engine ray reads files of rows (JSONL, CSV, Parquet); "
                                 "index a folder of documents with --engine local",
                                 param_hint="--input")
    if engine == "ray":
        try:
            import ray  # noqa: F401
        except ImportError as e:  # the optional extra
            raise typer.BadParameter(f"--engine ray needs Ray: pip install -e '.[ray]' ({e})",
                                     param_hint="--engine") from e
    job = IndexJob(
        inputs=inputs, store=store, model=model, collection=collection, alias=alias,
        drop_old=drop_old, token=token, timeout=timeout, fields=fields, format=format,
        batch_size=batch_size, shard=(shard_i, n_shards), state_dir=state_dir, rejects=rejects,
        restart=restart, retries=retries, backoff_s=backoff, progress=progress, hybrid=hybrid,
        passages=(passage_tokens, passage_overlap, None) if chunking else None, calibrate=tune,
        device=device, encode_workers=workers, engine=engine,
        ray=RayOptions(workers=ray_workers, gpus_per_worker=gpus_per_worker, address=address,
                       bulk_dir=bulk_dir, bulk_rows=bulk_rows, s3_endpoint=s3_endpoint))
    try:
        out = run_index(job)
    except (StoreUnavailableError, StoreLockedError) as e:
        typer.echo(f"error: {e if isinstance(e, StoreLockedError) else explain(e)}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from e
    except (StoreError, ValueError) as e:
        typer.echo(f"error: {explain(e)}", err=True)
        raise typer.Exit(1) from e
    typer.echo(out.summary.line())
    if out.calibration is not None:
        typer.echo(out.calibration)
    if out.calibration_error is not None:
        typer.echo(f"warning: hybrid calibration failed ({out.calibration_error}); run "
                   f"`qkv tune {out.collection}`", err=True)
    if out.alias_line is not None:
        typer.echo(out.alias_line)
    if out.alias_error is not None:
        typer.echo(f"error: the job is complete but alias {alias} did not move: "
                   f"{out.alias_error}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE if isinstance(out.alias_error, StoreUnavailableError)
                         else 1) from out.alias_error
    if out.summary.total_rejected:
        typer.echo(f"{out.summary.total_rejected} rows rejected; see "
                   f"{out.config.rejects_path}", err=True)
        hint = out.summary.field_hint(out.config.fields)
        if hint is not None:
            typer.echo(hint, err=True)
        raise typer.Exit(EXIT_REJECTED)


def register(app: typer.Typer) -> None:
    app.command("index")(index)
