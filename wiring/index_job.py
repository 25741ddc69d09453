"""What ``qkv index`` asks for, as one typed value: the bulk job's inputs, its collection (or
the alias it fills one for), the store and the encoder, how it runs (here or on Ray, as one
shard of several, in batches, with retries) and what follows it (calibration, the alias's
move). :func:`wiring.indexing.run_index` runs it; the Ray engine reads it too."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from index import Fields


@dataclass(frozen=True)
class RayOptions:
    """``qkv index --engine ray``: encoder workers (0: one per CPU of the cluster), GPUs a
    worker, the cluster's address (None: a local Ray started here), and for Milvus bulk
    imports the directory (or ``s3://``) the Parquet files go to, rows per file and S3's
    address."""

    workers: int = 0
    gpus_per_worker: float = 0.0
    address: str | None = None
    bulk_dir: str | None = None
    bulk_rows: int = 250_000
    s3_endpoint: str | None = None


@dataclass(frozen=True)
class IndexJob:
    """Everything ``qkv index`` asks for: what to read, into which collection of which
    store, with which encoder, and how (engine, shard, batch, retries); ``alias`` fills a
    new collection and moves the alias onto it once complete; ``calibrate`` calibrates hybrid
    search after."""

    inputs: list[Path]
    store: str
    model: Path
    collection: str | None = None
    alias: str | None = None
    drop_old: bool = False
    token: str = ""
    timeout: float = 10.0
    fields: Fields = field(default_factory=Fields)
    format: str | None = None
    batch_size: int = 2048
    shard: tuple[int, int] = (0, 1)
    state_dir: Path = Path("var/index-jobs")
    rejects: Path | None = None
    restart: bool = False
    retries: int = 5
    backoff_s: float = 1.0
    progress: bool = True
    hybrid: bool | None = None
    # a new collection's passages (tokens, overlap); None: one row a document
    passages: tuple[int | None, int | None, int | None] | None = (None, None, None)
    calibrate: bool = True
    device: str | None = None
    encode_workers: int = 0
    engine: str = "local"
    ray: RayOptions = field(default_factory=RayOptions)
