"""``MilvusStore``: the key-value memory in Milvus through pymilvus ``MilvusClient``.

A URI without a scheme is a file of embedded Milvus Lite (the default); ``http://host:port``
is a Milvus server or cluster (optionally with a ``token``). Schema: ``id`` VARCHAR primary
key, ``vector`` FLOAT_VECTOR with an inner-product index (HNSW by default), ``text`` and
``value`` VARCHAR, ``metadata`` JSON. The encoder that made the vectors is kept in the
collection's properties. Writes are upserts; counts and gets are strong reads; searches
default to Session consistency (sees this client's writes, fast otherwise).

A hybrid collection adds full-text search: the store fills a hidden ``bm25_text`` field with
:func:`index.hybrid.analysis.analyzed` (lower-cased, stop words dropped, Snowball-stemmed:
Milvus' analyzers do not stem), or with an item's own ``keywords`` (a passage's window), and
Milvus' BM25 function turns it into a ``sparse``
SPARSE_FLOAT_VECTOR field (inverted index, BM25 metric, k1/b as bm25s), in Milvus Lite 3.x
and Milvus ≥ 2.5. Queries are analysed the same way, so Milvus' BM25 ranks as bm25s does. A
hybrid search runs the dense and the BM25 search in Milvus, each ``candidates(k)`` deep, and
fuses them (the steps every backend shares: :func:`index.steps.search`). (Hybrid
collections made before ``bm25_text`` analyse ``text`` itself and are still searched,
without stemming.)

On Milvus Lite the store seals what it writes (:mod:`index.milvus.sealing`), its searches run
on :mod:`index.milvus.lite.speed`'s paths (no per-search rescan of the collection), and its
searches, reads by id and upserts call Lite's engine in this process without the gRPC loopback
(:mod:`index.milvus.lite.direct`)."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from typing import Any, TypeVar

import numpy as np

from index import steps
from index.aliases import AliasCache, check_drop, checked_set
from index.filters import Filter, quote, to_milvus_expr
from index.hybrid.fusion import DEFAULT_DENSE_WEIGHT, DEFAULT_FUSION
from index.milvus.conn import connect, failure, is_io_failure, restart_lite, version_at_least
from index.milvus.lite import direct as lite_direct
from index.milvus.lite import speed as lite_speed
from index.milvus.reads import ids_after, read_aliases, rows_of
from index.milvus.schema import (
    BM25_FIELD,
    CALIBRATION_JOB_PROPERTY,
    CALIBRATION_PROPERTY,
    OUTPUT_FIELDS,
    PASSAGES_PROPERTY,
    bm25_of,
    create_collection,
    described,
    item,
    item_fields,
)
from index.milvus.sealing import SEAL_QUIET_S, SEAL_ROWS, Sealer
from index.milvus.search import bm25_search, dense_search
from index.steps import Vectors, check_new, check_search, writable
from index.store import (
    CollectionInfo,
    CollectionNotFoundError,
    EncoderInfo,
    Hit,
    Item,
    StoreDamagedError,
    StoreError,
    StoreUnavailableError,
    UnsupportedError,
    check_same,
    check_search_args,
)
from index.tenancy import TENANT_FIELD, check_tenant, local_id, stored_id, tenant_expr

log = logging.getLogger(__name__)

INDEX_TYPES = ("HNSW", "FLAT", "AUTOINDEX")
# HNSW's M (links a node): on a Milvus 2.3.5 server, M 16 found 0.9685 of the exact top 10
# at the default ef 128 on 100,000 of the shipped encoder's vectors and M 32 0.9925, p50 3.7
# against 4.6 ms; M 32 at ef 64 found more (0.979) than M 16 at 128 (bench/server_hnsw.py,
# recorded at ee7a028); the graph costs 128 bytes more a vector (1 KiB). Lite builds its
# graphs in this process, on the writes' cores (index.milvus.lite.speed), where they bounded
# a bulk job's speed: there M 20 with efConstruction 100 finds as much at the search's ef of
# 64 as M 16 with 200 did, for about half the build. Throwaway scripts (2 threads to build,
# one query at a time, ef 64; Intel Xeon, 2026-12-02): on 60,000 of bench/workload.py's
# texts (1,000 held-out ones as queries) recall@10 0.926 against 0.916, build 7.7 against
# 11.9 s, a search 178 against 162 us; on 80,000 Multi30k captions 0.982 against 0.982,
# 7.2 against 13.8 s. M 24 with 80 found more on the texts (0.931) and built faster (6.4 s)
# but searched 17-20 % slower; M 16 with efConstruction 100 lost 0.9-2.2 points. (Lite
# built every graph at M 16, efConstruction 200 until index.milvus.lite.fixes passed it the
# parameters: a Lite file's collections made before keep those.)
SERVER_HNSW_M, LITE_HNSW_M = 32, 20
SERVER_EF_CONSTRUCTION, LITE_EF_CONSTRUCTION = 200, 100
# How wide an HNSW graph is searched by default (at least the hits asked for): in Lite at
# 522,000 documents (M 16), recall@10 0.973 at 64 and 0.986 at 128, the store's dense search
# p50 4.5 against 8.6 ms (throwaway scripts on bench/scale.py's store, Intel Xeon,
# 2026-11-29); on a server (M 32) 0.979 at 64 and 0.9925 at 128 at 100,000 documents
# (bench/server_hnsw.py), where 128 stays.
EF, LITE_EF = 128, 64
UPSERT_CHUNK = 512
BM25_MIN_VERSION = (2, 5)  # the first Milvus server with the BM25 function
# Milvus 2.3.5 lost rows under a partition-key filter once they were upserted (count 0 of
# 20 for `tenant == "acme"`, in a /tmp script): there the tenant is a plain field
PARTITION_KEY_MIN_VERSION = (2, 4)
# How long a collection's description is trusted before it is read again (another server
# on the same store may have re-tuned its calibration since)
INFO_TTL_S = 5.0
T = TypeVar("T")


class MilvusStore:
    """:class:`index.store.VectorStore` on Milvus Lite (a file path) or a Milvus server."""

    def __init__(
        self,
        uri: str = "var/qkv.db",
        token: str = "",
        timeout: float = 10.0,
        index_type: str = "HNSW",
        hnsw_m: int | None = None,
        ef_construction: int | None = None,
        ef: int | None = None, seal_rows: int = SEAL_ROWS,
        seal_quiet_s: float | None = SEAL_QUIET_S, bulk: bool = False,
    ) -> None:
        if index_type not in INDEX_TYPES:
            raise ValueError(f"index_type must be one of {INDEX_TYPES}, got {index_type!r}")
        self.uri, self.token, self.timeout = uri, token, timeout
        self.is_lite = "://" not in uri
        if hnsw_m is None:
            hnsw_m = LITE_HNSW_M if self.is_lite else SERVER_HNSW_M
        if ef is None:
            ef = LITE_EF if self.is_lite else EF
        if ef_construction is None:
            ef_construction = LITE_EF_CONSTRUCTION if self.is_lite else SERVER_EF_CONSTRUCTION
        self.index_type, self.hnsw_m, self.ef_construction, self.ef = (
            index_type, hnsw_m, ef_construction, ef)
        self.backend = "milvus-lite" if self.is_lite else "milvus"  # index.scale
        self._client: Any = None
        self._info: dict[str, CollectionInfo] = {}
        self._info_at: dict[str, float] = {}  # when each was described (INFO_TTL_S)
        self._loaded: set[str] = set()
        self._analysed: dict[str, bool] = {}  # hybrid collection -> has BM25_FIELD
        self._bm25: bool | None = None  # (close() flushes under the write lock, below)
        self._sealer = Sealer(self.flush, rows=seal_rows, quiet_s=seal_quiet_s)  # Lite only
        # A bulk job's Lite file: the collections it wrote get, before close() returns, the
        # HNSW graphs the next process to load them would otherwise build while it serves;
        # none is built before (lite_speed.defer_graphs)
        self.bulk, self._written = bulk, set[str]()
        # One write at a time (upserts, deletes, flushes, and counts, which miss rows while a
        # flush moves them): Lite lost acknowledged rows of concurrent writers on kill -9
        self._flushing, self._connecting = threading.RLock(), threading.RLock()  # re-entrant
        self._aliases = AliasCache(self._read_aliases)
        # After a Lite write failed at the file level (a full disk), its write-ahead log may
        # end in a torn record, and Lite's replay stops at the first invalid one: a write
        # appended after it would be acknowledged and then lost. So from the failure until
        # reopen() every write is refused (``broken`` says why) and ``io_failures`` counts
        # (a read in flight meanwhile may have missed rows: index.guarded reads it again).
        self.broken: str | None = None
        self.io_failures = 0
        self.reopens_itself = True  # at the failure; index.guarded re-opens it instead

    # -- connection -------------------------------------------------------------------
    def _connect(self) -> Any:
        with self._connecting:  # two first calls at once started Lite twice (one failed)
            if self._client is None:
                self._client = connect(self.uri, self.token, self.timeout)
            return self._client

    def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        """Run ``fn(client)``, turning pymilvus failures into the store's errors."""
        try:
            return fn(self._connect())
        except StoreError:
            raise
        except Exception as e:
            raise self._failed(what, e) from e

    def _failed(self, what: str, e: Exception) -> StoreError:
        """The store's error for a failed Milvus call, after what the failure asks for: the
        caches dropped, a reconnection, or a Lite that failed a write marked broken (and
        re-opened here unless ``reopens_itself`` is off)."""
        err = failure(what, e, self.uri)
        if isinstance(err, CollectionNotFoundError):  # dropped by another client
            self._info.clear()
            self._loaded.clear()
            self._aliases.invalidate()
        elif isinstance(err, StoreUnavailableError):
            if not (self.is_lite and is_io_failure(e)):
                self.close(seal=False)  # reconnect from scratch on the next call
            else:
                self.broken, self.io_failures = str(err), self.io_failures + 1
                if self.reopens_itself:
                    self.reopen()
        return err

    def reopen(self) -> None:
        """Close the connection and, on a Lite file, stop this process's Lite server: the
        next call starts it again, and Lite's recovery replays its write-ahead log into a
        new one (after a failed write its memory may no longer match its files: a full disk
        hid 1,000 of 1,300 acknowledged documents until a restart, issue 44). Writes are
        taken again after it. Nothing else may call the store meanwhile: a call that
        connects while the old server lets go of the file fails as "held by another
        process" (index.guarded holds every other call; on its own the store re-opens
        itself at the failure, under whatever is in flight)."""
        with self._flushing:
            self.close(seal=False)
            if self.is_lite:
                restart_lite(self.uri)
            self.broken = None

    def _check_writable(self) -> None:
        """Under ``_flushing``: refuse a write while the store waits for reopen()."""
        if self.broken is not None:
            raise StoreDamagedError(
                "Milvus Lite failed a write and is being re-opened from its write-ahead "
                "log; try again", self.broken)

    def close(self, seal: bool = True) -> None:  # seal=False: after a failure, no flush
        pending = self._sealer.stop()
        for collection in pending if self._client is not None and seal else []:
            try:  # seal what waits, so the next start searches it fast
                self.flush(collection)
            except StoreError as e:
                log.warning("could not seal collection %s on close: %s", collection, e)
        if self.bulk and seal and self._client is not None:
            for collection in sorted(self._written):
                engine = lite_direct.collection(self.uri, collection)
                if engine is not None:
                    lite_speed.build_now(engine, reason="before the bulk job ends")
        self._written.clear()
        if self._client is not None:
            try:
                self._client.close()
            except Exception as e:  # a dead connection may fail to close; nothing to keep
                log.debug("closing Milvus client: %s", e)
            self._client = None
            self._loaded.clear()

    # -- collections ------------------------------------------------------------------
    def create(
        self, collection: str, dim: int, encoder: EncoderInfo | None = None,
        exist_ok: bool = True, hybrid: bool = False, multi_tenant: bool = False,
    ) -> CollectionInfo:
        check_new(collection, dim, encoder, self._aliases.get())
        if self._call("has_collection", lambda c: c.has_collection(collection)):
            info = self.describe(collection)
            check_same(info, exist_ok, dim, encoder, hybrid, multi_tenant)
            return info
        if hybrid:
            self._check_bm25()
        build = ({"M": self.hnsw_m, "efConstruction": self.ef_construction}
                 if self.index_type == "HNSW" else {})
        self._call("create_collection", lambda c: create_collection(
            c, collection, dim, encoder, hybrid, self.index_type, build, self.timeout,
            multi_tenant,
            multi_tenant and self._version_at_least(PARTITION_KEY_MIN_VERSION)))
        self._info.pop(collection, None)
        log.info("created Milvus collection %s (dim %d, %s%s) at %s", collection, dim,
                 self.index_type, ", BM25" if hybrid else "", self.uri)
        return self.describe(collection)

    def server_version(self) -> str:  # e.g. v2.5.16
        return str(self._call("get_server_version", lambda c: c.get_server_version()))

    def bm25_available(self) -> bool:
        """Milvus Lite and servers >= 2.5 have BM25 (asked once per store)."""
        if self._bm25 is None:
            self._bm25 = version_at_least(self.server_version(), BM25_MIN_VERSION)
        return self._bm25

    def _version_at_least(self, least: tuple[int, int]) -> bool:
        return version_at_least(self.server_version(), least)

    def _check_bm25(self) -> None:
        """Refuse, naming the version, a server without the BM25 function (Milvus < 2.5)."""
        version = self.server_version()
        if not version_at_least(version, BM25_MIN_VERSION):
            raise UnsupportedError(
                f"Milvus {version} has no BM25 full-text search (it came in "
                "Milvus 2.5); create the collection without hybrid, or use Milvus Lite or a "
                "Milvus >= 2.5 server")

    def drop(self, collection: str) -> None:
        self._aliases.invalidate()
        check_drop(self._aliases.get(), collection)
        self._call("drop_collection",
                   lambda c: c.drop_collection(collection, timeout=self.timeout))
        self._info.pop(collection, None)
        self._loaded.discard(collection)
        self._sealer.forget(collection)

    def list_collections(self) -> list[str]:
        return sorted(self._call("list_collections", lambda c: c.list_collections()))

    # -- aliases (index.aliases) -------------------------------------------------------
    def _read_aliases(self) -> dict[str, str]:
        return dict(self._call("list_aliases", read_aliases))

    def list_aliases(self) -> dict[str, str]:
        return self._aliases.fresh()

    def set_alias(self, alias: str, collection: str) -> str | None:
        before = checked_set(self, alias, collection).get(alias)
        if before is None:
            self._call("create_alias", lambda c: c.create_alias(collection, alias))
        elif before != collection:
            self._call("alter_alias", lambda c: c.alter_alias(collection, alias))
        self._aliases.invalidate()
        return before

    def drop_alias(self, alias: str) -> None:
        if alias not in self.list_aliases():
            raise CollectionNotFoundError(f"no alias {alias!r}")
        self._call("drop_alias", lambda c: c.drop_alias(alias))
        self._aliases.invalidate()

    def described(self, collection: str) -> CollectionInfo | None:
        name = self._aliases.cached(collection)
        if name is None or time.monotonic() - self._info_at.get(name, -INFO_TTL_S) >= INFO_TTL_S:
            return None
        return self._info.get(name)

    def describe(self, collection: str) -> CollectionInfo:
        collection = self._aliases.resolve(collection)
        if (collection in self._info
                and time.monotonic() - self._info_at.get(collection, 0.0) < INFO_TTL_S):
            return self._info[collection]
        if not self._call("has_collection", lambda c: c.has_collection(collection)):
            raise CollectionNotFoundError(f"no collection {collection!r}")
        d = self._call("describe_collection",
                       lambda c: c.describe_collection(collection, timeout=self.timeout))
        info, self._analysed[collection] = described(collection, d)
        self._info[collection], self._info_at[collection] = info, time.monotonic()
        return info

    def set_calibration(self, collection: str, calibration: dict[str, Any] | None) -> None:
        self._set_property(collection, CALIBRATION_PROPERTY, calibration)

    def set_passages(self, collection: str, passages: dict[str, Any] | None) -> None:
        self._set_property(collection, PASSAGES_PROPERTY, passages)

    def set_calibration_job(self, collection: str, job: dict[str, Any] | None) -> None:
        self._set_property(collection, CALIBRATION_JOB_PROPERTY, job)

    def _set_property(self, collection: str, key: str, value: dict[str, Any] | None) -> None:
        collection = self._aliases.resolve(collection)
        self.describe(collection)  # 404 first
        raw = json.dumps(value)
        self._call("alter_collection_properties", lambda c: c.alter_collection_properties(
            collection, properties={key: raw}, timeout=self.timeout))
        self._info.pop(collection, None)

    def sample(self, collection: str, n: int, seed: int = 0) -> tuple[list[Item], int]:
        collection = self._aliases.resolve(collection)
        info = self._ready(collection)
        ids = self._ids_after(collection, "")
        pick = sorted(random.Random(seed).sample(ids, min(n, len(ids))))
        rows = rows_of(self._call, collection, pick, item_fields(info.multi_tenant), self.timeout,
                       engine=self._engine(collection))
        return sorted((item(r, info.multi_tenant) for r in rows),
                      key=lambda it: (it.tenant or "", it.id)), len(ids)

    def _ready(self, collection: str) -> CollectionInfo:
        """Describe (cached) and make sure the collection is loaded (the encoder is checked
        with the rest of a write's or a search's opening, :mod:`index.steps`)."""
        info = self.describe(collection)
        with self._connecting:  # one load at a time: a second one answered before Lite had
            if collection not in self._loaded:  # loaded (queries: "state 'released'")
                self._call("load_collection", lambda c: c.load_collection(
                    collection, timeout=self.timeout))
                self._loaded.add(collection)
        return info

    def flush(self, collection: str) -> None:
        """Seal the collection's growing segment now (see the module docstring); Milvus
        builds the indexes of sealed segments in the background."""
        collection = self._aliases.resolve(collection)
        self._ready(collection)
        if self.is_lite:
            self._sealer.forget(collection)
        with self._flushing:
            self._check_writable()
            self._call("flush", lambda c: c.flush(collection, timeout=self.timeout))

    def settle(self, collection: str, timeout: float = 600.0) -> bool:
        """On a Milvus server: flush, wait until the vector index covers every row, and load
        the collection again, so that its searches run on the index. For a while after the
        writes, the server searches the new segments without it: recall@10 0.93 right after
        a restore of 100,000 documents, and 0.87-0.90 at every ``ef`` right after its index
        was built but before a load (a first run of ``bench/server_hnsw.py``). Whether it
        settled within ``timeout`` s. A compaction 15-60 s later (of the upserts' deletes)
        writes a new segment; readers stay on the old, indexed one until its index is built.
        Nothing to do on Lite (its sealing: :mod:`index.milvus.sealing`)."""
        if self.is_lite or self.index_type == "FLAT":
            return True
        collection = self._aliases.resolve(collection)
        self._ready(collection)
        deadline = time.monotonic() + timeout
        self._call("flush", lambda c: c.flush(collection, timeout=timeout))
        index = self._call("list_indexes", lambda c: c.list_indexes(
            collection, field_name="vector"))[0]
        while True:
            d = self._call("describe_index", lambda c: c.describe_index(collection, index))
            if int(d.get("pending_index_rows", 0)) == 0 and \
                    int(d.get("indexed_rows", 0)) >= int(d.get("total_rows", 0)):
                break
            if time.monotonic() > deadline:
                log.warning("collection %s: its index covers %s of %s rows after %.0f s; "
                            "searched meanwhile without it", collection,
                            d.get("indexed_rows"), d.get("total_rows"), timeout)
                return False
            time.sleep(1.0)
        with self._connecting:
            self._call("release_collection", lambda c: c.release_collection(
                collection, timeout=self.timeout))
            self._loaded.discard(collection)
        self._ready(collection)
        return True

    def _engine(self, collection: str) -> Any:
        """Lite's collection object when this process serves the file (searches, reads by id
        and upserts skip the gRPC loopback: :mod:`index.milvus.lite.direct`), else None."""
        return lite_direct.collection(self.uri, collection) if self.is_lite else None

    def _upserted_directly(self, collection: str, rows: list[dict[str, Any]]) -> bool:
        """Whether ``rows`` were upserted into the engine directly; False without one, or
        when that failed (the client's upsert then says it as the store maps it)."""
        engine = self._engine(collection)
        if engine is None:
            return False
        try:
            lite_direct.upsert(engine, rows)
            return True
        except Exception as e:
            if is_io_failure(e):  # not again through gRPC: after a torn log record
                raise self._failed("upsert", e) from e
            log.debug("direct Milvus Lite upsert failed, going through gRPC: %s", e)
            return False

    def _wrote(self, collection: str, rows: int) -> None:
        if self.is_lite:
            if self.bulk and rows > 0:
                self._written.add(collection)  # its graphs wait for close(): said before
                # the sealer's flush below could make a segment
                engine = self._engine(collection)
                if engine is not None:
                    lite_speed.defer_graphs(engine)
            self._sealer.wrote(collection, rows)

    # -- items ------------------------------------------------------------------------
    def upsert(
        self, collection: str, items: Sequence[Item], encoder: EncoderInfo | None = None
    ) -> int:
        collection = self._aliases.resolve(collection)
        info = self._ready(collection)
        items, xb = writable(info, items, encoder)
        if not items:
            return 0
        # Lite's engine, called directly, takes each vector as a float32 numpy row (Arrow
        # copies it in one go); Python floats for gRPC (see _upserted_directly)
        direct = self._engine(collection) is not None
        rows = [{"id": stored_id(it.tenant, it.id), "vector": xb[i] if direct else xb[i].tolist(),
                 "text": it.text, "value": it.value or "", "metadata": it.metadata}
                for i, it in enumerate(items)]
        if info.multi_tenant:
            for row, it in zip(rows, items, strict=True):
                row[TENANT_FIELD] = it.tenant
        if self._analysed.get(collection):
            for row, it in zip(rows, items, strict=True):
                row[BM25_FIELD] = bm25_of(it)
        for start in range(0, len(rows), UPSERT_CHUNK):
            chunk = rows[start : start + UPSERT_CHUNK]
            with self._flushing:
                self._check_writable()
                if not self._upserted_directly(collection, chunk):
                    if direct:  # it failed: through gRPC after all
                        chunk = [{**r, "vector": r["vector"].tolist()} for r in chunk]
                    self._call("upsert", lambda c, ch=chunk: c.upsert(  # type: ignore[misc]
                        collection, ch, timeout=self.timeout))
            self._wrote(collection, len(chunk))
        return len(rows)

    def delete(self, collection: str, ids: Sequence[str], tenant: str | None = None) -> None:
        collection = self._aliases.resolve(collection)
        check_tenant(self._ready(collection), tenant)
        if ids:
            expr = "id in [" + ", ".join(quote(stored_id(tenant, i)) for i in ids) + "]"
            with self._flushing:
                self._check_writable()
                self._call("delete", lambda c: c.delete(collection, filter=expr,
                                                        timeout=self.timeout))
            self._wrote(collection, len(ids))

    def get(self, collection: str, ids: Sequence[str], tenant: str | None = None,
            consistency: str = "Strong", brief: bool = False) -> list[Item]:
        collection = self._aliases.resolve(collection)
        info = self._ready(collection)
        check_tenant(info, tenant)
        check_search_args(1, consistency)
        if not ids:
            return []
        keys = {stored_id(tenant, i): i for i in ids}
        fields = item_fields(info.multi_tenant, brief)
        rows = rows_of(self._call, collection, list(keys), fields, self.timeout, consistency,
                       self._engine(collection))
        by_id = {str(r["id"]): r for r in rows}
        return [item(by_id[k], info.multi_tenant) for k in keys if k in by_id]

    def count(self, collection: str, tenant: str | None = None, filter: Filter | None = None
              ) -> int:
        collection = self._aliases.resolve(collection)
        check_tenant(self._ready(collection), tenant)
        expr = tenant_expr(tenant, to_milvus_expr(filter) if filter is not None else "")
        with self._flushing:
            engine = self._engine(collection) if expr else None  # (fast without a filter)
            if engine is not None:
                try:
                    return lite_direct.count(engine, expr)
                except Exception as e:  # the client's query says it the way the store maps
                    log.debug("direct Milvus Lite count failed, going through gRPC: %s", e)
            res = self._call("count", lambda c: c.query(
                collection, filter=expr, output_fields=["count(*)"],
                consistency_level="Strong",
                timeout=self.timeout))
        return int(res[0]["count(*)"])

    def ids(self, collection: str, after: str | None = None, limit: int = 1000,
            filter: Filter | None = None, tenant: str | None = None) -> list[str]:
        # Every matching id after the cursor, then the first ``limit`` of them: a query
        # with a limit does not page in id order on every backend (see scan)
        collection = self._aliases.resolve(collection)
        info = self._ready(collection)
        check_tenant(info, tenant)
        expr = tenant_expr(tenant, to_milvus_expr(filter) if filter is not None else "")
        with self._flushing:
            keys = self._ids_after(collection, stored_id(tenant, after or ""), expr)
        return [local_id(k, info.multi_tenant) for k in keys[:limit]]

    def _ids_after(self, collection: str, after: str, expr: str = "") -> list[str]:
        """Every stored key after ``after`` that matches ``expr``, sorted; on Lite under the
        write lock (counts and lists miss rows while a flush moves them) and from the engine
        when this process serves the file."""
        with self._flushing if self.is_lite else nullcontext():
            return ids_after(self._call, collection, after, self.timeout,
                             self._engine(collection), expr)

    def scan(self, collection: str, after: str | None = None, batch_size: int = 1000,
             every_tenant: bool = False) -> Iterator[list[Item]]:
        # The ids first, then pages of gets: neither a query with a limit nor pymilvus'
        # query_iterator pages in id order on every backend (2.3.5 skipped half the rows)
        collection = self._aliases.resolve(collection)
        info = self._ready(collection)
        if not (every_tenant and info.multi_tenant):
            check_tenant(info, None)
        ids = self._ids_after(collection, after or "")
        # a hybrid collection's analysed terms too: a copy of its rows indexes the same
        fields = item_fields(info.multi_tenant, keywords=bool(self._analysed.get(collection)))
        for start in range(0, len(ids), batch_size):
            page = ids[start : start + batch_size]
            rows = {str(r["id"]): r for r in rows_of(self._call, collection, page, fields,
                                                      self.timeout,
                                                      engine=self._engine(collection))}
            yield [item(rows[i], info.multi_tenant) for i in page if i in rows]

    def search(self, collection: str, xq: Vectors, k: int, filter: Filter | None = None,
               encoder: EncoderInfo | None = None, with_vectors: bool = False,
               consistency: str = "Session", query_text: Sequence[str] | None = None,
               mode: str | None = None, fusion: str = DEFAULT_FUSION,
               dense_weight: float = DEFAULT_DENSE_WEIGHT, tenant: str | None = None,
               ) -> list[list[Hit]]:
        check_search(k, consistency, fusion, dense_weight)
        collection = self._aliases.resolve(collection)
        info = self._ready(collection)
        fields = [*OUTPUT_FIELDS, "vector"] if with_vectors else OUTPUT_FIELDS
        expr = tenant_expr(tenant, to_milvus_expr(filter) if filter is not None else "")

        def dense(x: np.ndarray, depth: int) -> list[list[Hit]]:
            ef = max(self.ef, depth) if self.index_type == "HNSW" else None
            return self._call("search", lambda c: dense_search(
                c, collection, x, depth, expr, fields, consistency, self.timeout, ef,
                info.hybrid, with_vectors, info.multi_tenant, self._engine(collection)))

        def bm25(texts: Sequence[str], depth: int) -> list[list[Hit]]:
            analysed = self._analysed.get(collection, False)
            return self._call("bm25 search", lambda c: bm25_search(
                c, collection, texts, analysed, depth, expr, fields, consistency,
                self.timeout, with_vectors, info.multi_tenant, self._engine(collection)))

        return steps.search(info, xq, k, encoder=encoder, tenant=tenant, mode=mode,
                            query_text=query_text, fusion=fusion, dense_weight=dense_weight,
                            dense=dense, bm25=bm25, together=not self.is_lite)
