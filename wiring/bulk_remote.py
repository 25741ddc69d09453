"""A bulk import's files in an S3 bucket (MinIO, AWS S3, any S3 API), for a Milvus server
that keeps its data in object storage, as the docker-compose stack's and a cluster's do:
such a server reads import files from its own bucket (its ``minio.bucketName``), not from
the driver's disk.

``--bulk-dir s3://BUCKET/PREFIX``: the driver writes and merges the Parquet files on its
own disk as for a local ``--bulk-dir`` (under the job's state directory, ``STEM.bulk/``),
then uploads each merged file to ``PREFIX/STEM/import-NNNNN.parquet`` in BUCKET and asks
Milvus to import that key. An object is whole or absent (an S3 put is atomic), so a kill
mid-upload leaves nothing half-written. Each upload is recorded in the job's imports file
once the put returned; a rerun uploads what is not recorded (an object an earlier plan
left under the same key, after ``--restart``, is overwritten) and imports each key at
most once (``wiring.ray_bulk``). Once the job is complete, the local
copies are removed; the objects stay (delete ``PREFIX/STEM/`` when you like).

The endpoint is ``--s3-endpoint`` or ``QKV_S3_ENDPOINT`` (``http://minio:9000``;
``https://`` for TLS; without one, AWS S3), the credentials the usual
``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_REGION``) from the
environment, never a flag. Uses the ``minio`` client.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from index import StoreError, StoreUnavailableError

SCHEME = "s3://"


def is_remote(bulk_dir: str) -> bool:
    return bulk_dir.startswith(SCHEME)


@dataclass(frozen=True)
class Bucket:
    """Where the files go: a bucket, a key prefix and the endpoint that serves them."""

    bucket: str
    prefix: str
    endpoint: str  # host:port
    secure: bool

    @classmethod
    def parse(cls, url: str, endpoint: str | None) -> Bucket:
        """``s3://BUCKET[/PREFIX]`` and an endpoint (``http(s)://host:port``, or none for
        AWS S3); a ``ValueError`` saying what is wrong otherwise."""
        if not is_remote(url):
            raise ValueError(f"not an s3:// URL: {url!r}")
        bucket, _, prefix = url[len(SCHEME):].partition("/")
        if not bucket:
            raise ValueError(f"--bulk-dir {url!r} names no bucket (s3://BUCKET/PREFIX)")
        endpoint = endpoint or "https://s3.amazonaws.com"
        parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"--s3-endpoint {endpoint!r}: give http(s)://host:port")
        return cls(bucket, prefix.strip("/"), parsed.netloc, parsed.scheme == "https")

    def key(self, stem: str, local: str) -> str:
        """The object key of a merged file: PREFIX/STEM/NAME."""
        return "/".join(p for p in (self.prefix, stem, Path(local).name) if p)

    def client(self) -> Any:
        from minio import Minio

        return Minio(self.endpoint, access_key=os.environ.get("AWS_ACCESS_KEY_ID"),
                     secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
                     session_token=os.environ.get("AWS_SESSION_TOKEN"),
                     secure=self.secure, region=os.environ.get("AWS_REGION"))

    def exists(self, client: Any) -> bool:
        """Whether the bucket is there, asked with ``client``; ``StoreUnavailableError``
        when the endpoint or these credentials do not reach it."""
        try:
            return bool(client.bucket_exists(self.bucket))
        except Exception as e:  # S3Error (credentials), urllib3's (no endpoint)
            raise StoreUnavailableError(
                f"cannot reach bucket {self.bucket!r} at {self.endpoint}: {e} (credentials: "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)") from e

    def check(self) -> None:
        """Before anything is encoded: the bucket exists and these credentials reach it."""
        if not self.exists(self.client()):
            raise StoreError(
                f"no bucket {self.bucket!r} at {self.endpoint}: give the bucket the Milvus "
                "server keeps its data in (its minio.bucketName), which it imports from")

    def upload(self, files: list[tuple[str, int]], stem: str, skip: set[str],
               uploaded: Callable[[str], None]) -> list[tuple[str, int]]:
        """Each merged file's key, uploaded (overwriting an object an earlier run left
        there) unless it is in ``skip`` (this plan uploaded it, or its import is done);
        ``uploaded(key)`` records each once the put returned."""
        client = self.client()
        out: list[tuple[str, int]] = []
        for local, rows in files:
            key = self.key(stem, local)
            out.append((key, rows))
            if key in skip:
                continue
            if not Path(local).exists():
                raise StoreError(f"{local} is gone and {key} is not imported: drop the "
                                 "collection, then run the command again with --restart")
            try:
                client.fput_object(self.bucket, key, local)
            except Exception as e:
                raise StoreUnavailableError(f"upload of {local} to {self.bucket}/{key} "
                                            f"failed: {e}; run the command again") from e
            uploaded(key)
        return out
