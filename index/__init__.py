"""The key-value memory: vector stores (Milvus, FAISS), filters, soft retrieval, bulk jobs.

Depends on numpy, pymilvus and faiss only: never torch, never FastAPI. The bulk job takes
an ``embed(texts) -> np.ndarray`` callable instead of an encoder. FAISS is imported when a
FAISS store is first used (``index.FaissStore``), pymilvus when a Milvus store connects: a
training run reads BEIR files (``index.beir``) on a machine that has neither.
"""

from typing import TYPE_CHECKING, Any

from index.aliases import ALIAS_TTL_S, DROP_GRACE_S, AliasError
from index.attend import Attention, attend, attend_hits, softmax
from index.bulk.corpus import Fields
from index.bulk.job import JobConfig, JobSummary, bulk_index
from index.filters import And, Condition, Filter, Or, matches, parse_filter, to_milvus_expr
from index.hybrid.fusion import DEFAULT_DENSE_WEIGHT, FUSIONS, RRF_K, fuse
from index.milvus.store import MilvusStore
from index.store import (
    SEARCH_MODES,
    CollectionExistsError,
    CollectionInfo,
    CollectionNotFoundError,
    EncoderInfo,
    EncoderMismatchError,
    Hit,
    Item,
    Mix,
    StoreDamagedError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreUnavailableError,
    UnsupportedError,
    VectorStore,
    collection_name,
    hybrid_default,
    resolve_mode,
)

if TYPE_CHECKING:
    from index.faiss.store import FaissStore


def __getattr__(name: str) -> Any:
    if name == "FaissStore":
        from index.faiss.store import FaissStore

        return FaissStore
    raise AttributeError(f"module 'index' has no attribute {name!r}")


def open_store(uri: str, token: str = "", timeout: float = 10.0, bulk: bool = False,
               ef: int | None = None) -> VectorStore:
    """A store from a URI: ``faiss://DIR`` (or ``faiss+hnsw://DIR``) is a :class:`FaissStore`;
    ``http(s)://host:port`` a Milvus server; anything else a Milvus Lite file. ``bulk``: for
    a bulk job (Milvus Lite seals every :data:`index.milvus.sealing.BULK_SEAL_ROWS` rows instead
    of every :data:`index.milvus.sealing.SEAL_ROWS`, fewer and larger segments to merge later, and
    not after a pause in the writes: :mod:`index.milvus.sealing`; and builds, as it closes,
    the HNSW graphs the next process to load the collections it wrote would otherwise build
    while serving: :func:`index.milvus.lite.speed.build_now`). ``ef``: how wide an HNSW
    index is searched (None: the store's default, :data:`index.milvus.store.LITE_EF` in
    Lite, :data:`index.milvus.store.EF` elsewhere)."""
    from index.faiss.store import FaissStore
    from index.milvus.store import EF

    if uri.startswith("faiss://"):
        return FaissStore(uri.removeprefix("faiss://"), index_type="flat", ef=ef or EF)
    if uri.startswith("faiss+hnsw://"):
        return FaissStore(uri.removeprefix("faiss+hnsw://"), index_type="hnsw", ef=ef or EF)
    from index.milvus.sealing import BULK_SEAL_ROWS, SEAL_QUIET_S, SEAL_ROWS

    return MilvusStore(uri, token=token, timeout=timeout, ef=ef,
                       seal_rows=BULK_SEAL_ROWS if bulk else SEAL_ROWS,
                       seal_quiet_s=None if bulk else SEAL_QUIET_S, bulk=bulk)


__all__ = [
    "ALIAS_TTL_S", "DROP_GRACE_S", "AliasError", "DEFAULT_DENSE_WEIGHT", "FUSIONS", "RRF_K",
    "SEARCH_MODES", "UnsupportedError", "fuse",
    "And", "Attention", "CollectionExistsError", "CollectionInfo", "CollectionNotFoundError",
    "Condition", "EncoderInfo", "EncoderMismatchError", "FaissStore", "Fields", "Filter", "Hit",
    "Item", "Mix", "JobConfig", "JobSummary", "MilvusStore", "Or", "StoreDamagedError",
    "StoreError", "StoreFullError", "StoreLockedError", "StoreUnavailableError", "VectorStore",
    "attend", "attend_hits", "bulk_index",
    "collection_name", "hybrid_default", "matches", "open_store", "parse_filter",
    "resolve_mode", "softmax", "to_milvus_expr",
]
