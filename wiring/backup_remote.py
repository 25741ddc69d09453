"""Backups in an S3 bucket (issue 72): ``qkv backup --to s3://BUCKET/PREFIX`` and ``qkv
restore s3://BUCKET/PREFIX``, on MinIO, AWS S3 or any S3 API (what the bulk import speaks:
:class:`wiring.bulk_remote.Bucket`, the same endpoint option and credentials).

The backup is made as in a directory (:mod:`index.backup`), in a temporary one, then put in
the bucket::

    PREFIX/manifest.json                        the manifest, put last
    PREFIX/ID/COLLECTION/part-00000.parquet     its parts, under the backup's id

An S3 put is atomic and the manifest goes last, so a reader sees the previous backup whole
until the new one is complete, then the new one whole; a kill leaves at most some parts of
an unfinished backup under its own id, which the next complete backup to that prefix
removes (with the previous backup's parts). A restore downloads the manifest and the parts
it names into a temporary directory and restores from there: the checksums are checked
before anything is created, as for a directory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from index import StoreUnavailableError
from index.backup import MANIFEST, BackupError, read_manifest, verify
from wiring.bulk_remote import Bucket, is_remote

__all__ = ["download", "is_remote", "open_bucket", "upload"]


def open_bucket(url: str, endpoint: str | None) -> tuple[Bucket, Any]:
    """The bucket of ``s3://BUCKET/PREFIX`` and a client that reaches it; a
    ``StoreUnavailableError`` when it cannot, a :class:`BackupError` when there is no such
    bucket, a ``ValueError`` for a malformed URL or endpoint."""
    bucket = Bucket.parse(url, endpoint)
    client = bucket.client()
    if not bucket.exists(client):
        raise BackupError(f"no bucket {bucket.bucket!r} at {bucket.endpoint}: create it "
                          "first")
    return bucket, client


def _key(bucket: Bucket, *parts: str) -> str:
    return "/".join(p.strip("/") for p in (bucket.prefix, *parts) if p)


def _url(bucket: Bucket, key: str) -> str:
    return f"s3://{bucket.bucket}/{key}"


def upload(local: Path, bucket: Bucket, client: Any,
           progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Put the backup in the directory ``local`` under the bucket's prefix (see the module
    docstring), then remove what earlier backups there left; returns its manifest."""
    manifest = verify(local)
    ident = manifest["id"]
    try:
        for c in manifest["collections"]:
            for part in c["parts"]:
                client.fput_object(bucket.bucket, _key(bucket, ident, part["path"]),
                                   str(local / part["path"]))
                if progress is not None:
                    progress(part["path"])
        client.fput_object(bucket.bucket, _key(bucket, MANIFEST), str(local / MANIFEST))
        ours = {_key(bucket, MANIFEST)} | {
            _key(bucket, ident, p["path"]) for c in manifest["collections"] for p in c["parts"]}
        for obj in client.list_objects(bucket.bucket, prefix=_key(bucket, "") + "/"
                                       if bucket.prefix else None, recursive=True):
            rest = obj.object_name[len(bucket.prefix) + 1:] if bucket.prefix else \
                obj.object_name
            top = rest.split("/", 1)[0]
            # an earlier backup's parts: a directory named by a backup id (32 hex digits)
            if obj.object_name not in ours and len(top) == 32 and _hex(top) and "/" in rest:
                client.remove_object(bucket.bucket, obj.object_name)
    except Exception as e:
        if isinstance(e, BackupError):
            raise
        raise StoreUnavailableError(f"upload to {_url(bucket, _key(bucket, ''))} failed: "
                                    f"{e}; run the command again") from e
    return manifest


def _hex(s: str) -> bool:
    return all(ch in "0123456789abcdef" for ch in s)


@contextmanager
def download(bucket: Bucket, client: Any) -> Iterator[Path]:
    """The backup under the bucket's prefix, in a temporary directory (removed after)."""
    with tempfile.TemporaryDirectory(prefix="qkv-restore-") as tmp:
        into = Path(tmp)
        key = _key(bucket, MANIFEST)
        try:
            client.fget_object(bucket.bucket, key, str(into / MANIFEST))
        except Exception as e:
            if getattr(e, "code", "") in ("NoSuchKey", "NoSuchObject"):
                raise BackupError(f"{_url(bucket, key)}: no manifest (not a backup, or one "
                                  "that did not finish)") from e
            raise StoreUnavailableError(f"cannot read {_url(bucket, key)}: {e}") from e
        manifest = read_manifest(into)
        for c in manifest.get("collections", []):
            for part in c["parts"]:
                key = _key(bucket, manifest["id"], part["path"])
                try:
                    client.fget_object(bucket.bucket, key, str(into / part["path"]))
                except Exception as e:
                    if getattr(e, "code", "") in ("NoSuchKey", "NoSuchObject"):
                        raise BackupError(f"{_url(bucket, key)}: missing") from e
                    raise StoreUnavailableError(f"cannot read {_url(bucket, key)}: {e}") from e
        yield into
