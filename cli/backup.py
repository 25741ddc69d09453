"""``qkv backup`` and ``qkv restore``: collections to a directory and back, into any store
(:mod:`index.backup`); ``qkv export``: a collection's documents to a file
(:mod:`index.scroll`).

Exit status: 0 done; 2 a refused backup or restore (damaged backup, name taken: the message
says which file or collection, and why; nothing was created); 75 (EX_TEMPFAIL) the store is
unreachable or held by another process: run the same command again; 1 any other error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from index.store import explain

EXIT_REFUSED = 2
EXIT_UNAVAILABLE = 75
STORE = typer.Option("var/qkv.db", "--store", help="Milvus Lite file, http://host:port, or "
                     "faiss://DIR.")
TOKEN = typer.Option("", "--token", envvar="QKV_MILVUS_TOKEN", help="Milvus token.")


def _fail(e: Exception, store: str) -> typer.Exit:
    from index import StoreLockedError, StoreUnavailableError
    from index.backup import BackupError

    if isinstance(e, BackupError):
        typer.echo(f"error: {e}", err=True)
        return typer.Exit(EXIT_REFUSED)
    if isinstance(e, StoreLockedError):
        typer.echo(f"error: the Milvus Lite file {store} is held by another process (a "
                   "running qkv serve?): back up or restore through it (POST /v1/backups, "
                   "POST /v1/backups/NAME/restore), or stop it first", err=True)
        return typer.Exit(EXIT_UNAVAILABLE)
    typer.echo(f"error: {explain(e)}", err=True)
    return typer.Exit(EXIT_UNAVAILABLE if isinstance(e, StoreUnavailableError
                                                     | StoreLockedError) else 1)


def _progress(every_s: float = 5.0):  # type: ignore[no-untyped-def]
    last = [0.0]

    def say(name: str, rows: int) -> None:
        if time.monotonic() - last[0] >= every_s:
            last[0] = time.monotonic()
            typer.echo(f"  {name}: {rows:,} rows", err=True)

    return say


ENCODERS = typer.Option(None, "--encoders-dir", envvar="QKV_ENCODERS_DIR", help="The derived "
                       "encoders' directory (qkv adapt's; default: encoders/ beside a local "
                       "store, else var/encoders): a collection's own encoder goes into the "
                       "backup and back there on a restore.")
S3_ENDPOINT = typer.Option(None, "--s3-endpoint", envvar="QKV_S3_ENDPOINT", help="With an "
                          "s3:// location: the S3 API's address, http(s)://host:port (MinIO: "
                          "http://minio:9000); default AWS S3. Credentials: AWS_ACCESS_KEY_ID "
                          "and AWS_SECRET_ACCESS_KEY.")


def backup(
    to: str = typer.Option(..., "--to", help="The backup directory (replaced whole when the "
                           "backup is complete; kept as it was if it fails), or "
                           "s3://BUCKET/PREFIX."),
    collection: list[str] = typer.Option(None, "--collection", help="A collection or alias "
                                         "to back up (repeat); every collection when none."),
    store: str = STORE, token: str = TOKEN, s3_endpoint: str | None = S3_ENDPOINT,
    encoders: Path | None = ENCODERS,
) -> None:
    """Back up collections: their rows and vectors, settings, calibration, aliases and the
    derived encoder each was made with."""
    import tempfile

    from index import StoreError, collection_name, open_store
    from index.backup import backup as run

    try:
        names = [collection_name(c) for c in collection] if collection else None
        remote = _bucket(to, s3_endpoint, store)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    t0 = time.perf_counter()
    s = open_store(store, token=token)
    try:
        root = _encoders_dir(encoders, store)
        if remote is None:
            manifest = run(s, Path(to), names, _progress(), root)
        else:
            from wiring.backup_remote import upload

            with tempfile.TemporaryDirectory(prefix="qkv-backup-") as tmp:
                run(s, Path(tmp) / "b", names, _progress(), root)
                manifest = upload(Path(tmp) / "b", *remote)
    except StoreError as e:
        raise _fail(e, store) from e
    finally:
        s.close()
    rows = sum(c["rows"] for c in manifest["collections"])
    seconds = time.perf_counter() - t0
    for c in manifest["collections"]:
        typer.echo(f"{c['name']}: {c['rows']:,} rows, {len(c['parts'])} files"
                   + (f", aliases {', '.join(c['aliases'])}" if c["aliases"] else ""))
    typer.echo(f"backup {manifest['id'][:8]} in {to}: {rows:,} rows in {seconds:.1f} s "
               f"({rows / max(seconds, 1e-9):,.0f} rows/s)")


def _encoders_dir(given: Path | None, store: str) -> Path:
    from api.settings import Settings, encoders_dir

    return encoders_dir(Settings(store=store, encoders_dir=given))


def _bucket(where: str, endpoint: str | None, store: str) -> Any:
    """(bucket, client) for an s3:// location, reached and checked; None for a directory."""
    from index import StoreError
    from wiring.backup_remote import is_remote, open_bucket

    if not is_remote(where):
        return None
    try:
        return open_bucket(where, endpoint)
    except ModuleNotFoundError as e:
        typer.echo("error: an s3:// backup needs the minio client: pip install minio "
                   "(or the ray extra)", err=True)
        raise typer.Exit(1) from e
    except StoreError as e:
        raise _fail(e, store) from e


def restore(
    src: str = typer.Argument(..., help="A backup directory (qkv backup --to), or "
                              "s3://BUCKET/PREFIX."),
    collection: list[str] = typer.Option(None, "--collection", help="Restore this one of the "
                                         "backup's collections (repeat); all when none."),
    as_: str | None = typer.Option(None, "--as", help="The name to restore it under (one "
                                   "collection only); default its own."),
    replace: bool = typer.Option(False, "--replace", help="Move an alias of that name that "
                                 "points at another collection."),
    model: Path = typer.Option(Path("models/encoder-default"), "--model", help="The encoder "
                               "the target serves: stored vectors are reused when it made "
                               "them, else the texts are embedded again with it."),
    store: str = STORE, token: str = TOKEN, s3_endpoint: str | None = S3_ENDPOINT,
    encoders: Path | None = ENCODERS,
) -> None:
    """Restore collections from a backup into a store (any backend), atomically: each goes
    into a new collection, then its name becomes an alias of it; a derived encoder the
    backup holds goes into the encoders directory."""
    from contextlib import nullcontext

    from index import StoreError, collection_name

    try:
        names = [collection_name(c) for c in collection] if collection else None
        renamed = collection_name(as_) if as_ is not None else None
        remote = _bucket(src, s3_endpoint, store)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    try:
        if remote is None:
            where = nullcontext(Path(src))
        else:
            from wiring.backup_remote import download

            where = download(*remote)  # type: ignore[assignment]
        with where as local:
            _restore(local, names, renamed, replace, model, store, token,
                     _encoders_dir(encoders, store))
    except StoreError as e:
        raise _fail(e, store) from e


def _restore(src: Path, names: list[str] | None, as_: str | None, replace: bool, model: Path,
             store: str, token: str, encoders: Path) -> None:
    from index import open_store
    from index.backup import read_manifest
    from index.backup import restore as run

    rename = {}
    if as_ is not None:
        manifest = read_manifest(src)  # the parts are checked by the restore itself
        chosen = names or [c["name"] for c in manifest["collections"]]
        if len(chosen) != 1:
            raise typer.BadParameter("--as names one collection: pick it with --collection")
        rename = {chosen[0]: as_}
    import encoder
    from wiring.components import encoder_info

    # Its name and fingerprint decide whether the stored vectors are reused: the network it
    # encodes on (ONNX, built from the weights in about a second) only if texts need it
    enc = encoder.load(model, backend="torch")
    info = encoder_info(enc)
    network: list[bool] = []

    def embed(texts: Sequence[str]) -> Any:
        if not network:
            enc.use_backend(None)  # the default for this device
            network.append(True)
        return enc.encode(list(texts), batch_size=64)

    t0 = time.perf_counter()
    s = open_store(store, token=token, bulk=True)
    try:
        done = run(s, src, names, rename, info, embed, replace, _progress(), encoders)
    finally:
        s.close()
    for r in done:
        typer.echo(f"{r.name} -> {r.collection}: {r.rows:,} rows "
                   f"({'stored vectors' if r.reused_vectors else 'embedded again'}) in "
                   f"{r.seconds:.1f} s; aliases {', '.join(r.aliases)}")
        for what in r.dropped:
            typer.echo(f"  not restored: {what}")
    rows = sum(r.rows for r in done)
    seconds = time.perf_counter() - t0
    typer.echo(f"restored {rows:,} rows in {seconds:.1f} s "
               f"({rows / max(seconds, 1e-9):,.0f} rows/s)")


def export(
    collection: str = typer.Argument(..., help="The collection or alias to read out."),
    out: Path = typer.Option(..., "--out", help="A .jsonl, .jsonl.gz or .parquet file "
                             "(written beside, then moved into place)."),
    filter: str | None = typer.Option(None, "--filter", help="Only the documents that match "
                                      "this search filter (JSON)."),
    tenant: str | None = typer.Option(None, "--tenant", help="The tenant whose documents "
                                      "(a multi-tenant collection)."),
    vectors: bool = typer.Option(False, "--vectors", help="Each document's vector too."),
    store: str = STORE, token: str = TOKEN,
) -> None:
    """Read a collection out to a file: every document whole (a long one's passages
    joined), in id order, as `qkv index --value-field value` reads it back."""
    import json

    from index import StoreError, collection_name, open_store, parse_filter
    from index.scroll import export as run
    from index.scroll import export_kind

    try:
        name = collection_name(collection)
        export_kind(out)
        which = parse_filter(json.loads(filter)) if filter is not None else None
    except json.JSONDecodeError as e:
        raise typer.BadParameter(f"--filter: invalid JSON ({e})") from e
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    t0 = time.perf_counter()
    s = open_store(store, token=token)
    try:
        info = s.describe(name)
        n = run(s, info, out, which, tenant, vectors, _progress_of(name))
    except StoreError as e:
        raise _fail(e, store) from e
    except ValueError as e:  # a tenant the collection does not take
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(EXIT_REFUSED) from e
    finally:
        s.close()
    seconds = time.perf_counter() - t0
    typer.echo(f"{info.name}: {n:,} documents to {out} in {seconds:.1f} s "
               f"({n / max(seconds, 1e-9):,.0f} documents/s)")


def _progress_of(name: str):  # type: ignore[no-untyped-def]
    say = _progress()
    return lambda n: say(name, n)


def register(app: typer.Typer) -> None:
    app.command("backup")(backup)
    app.command("restore")(restore)
    app.command("export")(export)
