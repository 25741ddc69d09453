"""Backups in an S3 bucket (issue 72): ``qkv backup --to s3://BUCKET/PREFIX`` and ``qkv
restore s3://BUCKET/PREFIX``, on MinIO, AWS S3 or any S3 API (what the bulk import speaks:
:class:`wiring.bulk_remote.Bucket`, the same endpoint option and credentials).

The backup is made as in a directory (:mod:`index.backup`), in a temporary one, then put in
the bucket::

    PREFIX/manifest.json                        the manifest, put last
    PREFIX/ID/COLLECTION/part-00000.parquet     its parts, under the backup's id
    PREFIX/ID/encoders/NAME/...                 the derived encoders its collections use

An S3 put is atomic and the manifest goes last, so a reader sees the previous backup whole
until the new one is complete, then the new one whole; a kill leaves at most some parts of
an unfinished backup under its own id, which the next complete backup to that prefix
removes (with the previous backup's parts). A restore downloads the manifest and the parts
it names into a temporary directory and restores from there: the checksums are checked
before anything is created, as for a directory.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from index import StoreUnavailableError
from index.backup import MANIFEST, BackupError, read_manifest, verify
from wiring.bulk_remote import Bucket, is_remote

__all__ = ["BackupBucket", "download", "is_remote", "open_bucket", "upload"]


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


def _files(manifest: dict[str, Any]) -> list[str]:
    """Every file a backup's manifest names: the collections' parts and encoder files."""
    return [f["path"] for c in manifest.get("collections", [])
            for f in [*c["parts"], *(c.get("encoder_files") or [])]]


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
        for path in _files(manifest):
            client.fput_object(bucket.bucket, _key(bucket, ident, path), str(local / path))
            if progress is not None:
                progress(path)
        client.fput_object(bucket.bucket, _key(bucket, MANIFEST), str(local / MANIFEST))
        ours = {_key(bucket, MANIFEST)} | {_key(bucket, ident, p) for p in _files(manifest)}
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
        for path in _files(manifest):
            key = _key(bucket, manifest["id"], path)
            try:
                client.fget_object(bucket.bucket, key, str(into / path))
            except Exception as e:
                if getattr(e, "code", "") in ("NoSuchKey", "NoSuchObject"):
                    raise BackupError(f"{_url(bucket, key)}: missing") from e
                raise StoreUnavailableError(f"cannot read {_url(bucket, key)}: {e}") from e
        try:
            yield into
        except BackupError as e:  # name the bucket's objects, not the temporary copies
            said = str(e).replace(f"{into}/{MANIFEST}", _url(bucket, _key(bucket, MANIFEST)))
            said = said.replace(f"{into}/", _url(bucket, _key(bucket, manifest["id"])) + "/")
            raise type(e)(said) from e


class BackupBucket:
    """The service's backups in a bucket (``QKV_BACKUP_DIR=s3://BUCKET/PREFIX``): the backup
    ``NAME`` under ``PREFIX/NAME/`` as :func:`upload` puts it, each background job's state
    under ``PREFIX/.jobs/``, so every replica that reaches the bucket sees both."""

    def __init__(self, url: str, endpoint: str | None) -> None:
        self.base = Bucket.parse(url, endpoint)  # a ValueError for a malformed one
        self.url = url.rstrip("/")
        self._client: Any = None

    def client(self) -> Any:
        """A client that reaches the bucket, checked once; ``StoreUnavailableError`` (503)
        when it cannot or there is no such bucket."""
        if self._client is None:
            client = self.base.client()
            if not self.base.exists(client):
                raise StoreUnavailableError(f"no bucket {self.base.bucket!r} at "
                                            f"{self.base.endpoint} (QKV_BACKUP_DIR): create it")
            self._client = client
        return self._client

    def of(self, name: str) -> Bucket:
        """Where the backup ``name`` lives."""
        return replace(self.base, prefix=_key(self.base, name))

    def put(self, local: Path, name: str) -> dict[str, Any]:
        """Upload the backup made in ``local`` as ``name``; its manifest."""
        return upload(local, self.of(name), self.client())

    def fetch(self, name: str) -> Any:
        """A context: the backup ``name`` downloaded into a temporary directory."""
        return download(self.of(name), self.client())

    def _get(self, key: str) -> bytes | None:
        """The object at ``key``, None when there is none."""
        try:
            response = self.client().get_object(self.base.bucket, key)
        except Exception as e:
            if getattr(e, "code", "") in ("NoSuchKey", "NoSuchObject"):
                return None
            raise StoreUnavailableError(f"cannot read {_url(self.base, key)}: {e}") from e
        try:
            return bytes(response.read())
        finally:
            response.close()
            response.release_conn()

    def manifest(self, name: str) -> dict[str, Any] | None:
        """The manifest of the backup ``name`` (format and version checked, parts not: a
        restore checks them), None when there is no such backup."""
        key = _key(self.of(name), MANIFEST)
        data = self._get(key)
        if data is None:
            return None
        with tempfile.TemporaryDirectory(prefix="qkv-manifest-") as tmp:
            (Path(tmp) / MANIFEST).write_bytes(data)
            try:
                return read_manifest(tmp)
            except BackupError as e:
                raise BackupError(str(e).replace(f"{tmp}/", f"{_url(self.base, '')}"
                                                 f"{self.of(name).prefix}/")) from e

    def names(self) -> list[str]:
        """The names under the prefix (a backup's, or parts a killed first one left)."""
        prefix = _key(self.base, "") + "/" if self.base.prefix else None
        try:
            found = list(self.client().list_objects(self.base.bucket, prefix=prefix))
        except StoreUnavailableError:
            raise
        except Exception as e:
            raise StoreUnavailableError(f"cannot list {self.url}: {e}") from e
        cut = len(prefix or "")
        return sorted(o.object_name[cut:].strip("/") for o in found
                      if o.is_dir and not o.object_name[cut:].startswith("."))

    def save_json(self, key: str, value: dict[str, Any]) -> None:
        data = json.dumps(value, indent=1, default=str).encode()
        try:
            self.client().put_object(self.base.bucket, _key(self.base, key), io.BytesIO(data),
                                     len(data), content_type="application/json")
        except StoreUnavailableError:
            raise
        except Exception as e:
            raise StoreUnavailableError(f"cannot write {_url(self.base, key)}: {e}") from e

    def load_json(self, key: str) -> dict[str, Any] | None:
        data = self._get(_key(self.base, key))
        return None if data is None else dict(json.loads(data))
