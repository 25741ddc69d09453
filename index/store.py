"""The key-value memory's contract: items, hits, the ``VectorStore`` protocol, its errors.

A store holds named collections. Each stored item is an ``id`` (the caller's string), a
unit ``vector`` (the key), its ``text``, an optional ``value`` (what the decoder reads) and
a JSON ``metadata`` object. Scores are inner products of unit vectors, i.e. cosines:
higher is better. Every collection records the encoder that made its vectors
(:class:`EncoderInfo`); writing or searching with another encoder is refused.

A *hybrid* collection also keeps a BM25 index of ``text`` (where the backend has one) and
is searchable by ``mode``: ``dense`` (the vectors), ``bm25`` (the query text's keywords)
or ``hybrid`` (both, fused: see :mod:`index.hybrid.fusion`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from index.filters import Filter

MAX_ID_BYTES = 512
MAX_TEXT_BYTES = 65_535  # Milvus VARCHAR limit; `value` shares it
# objects and lists nested in metadata: deeper ones were stored and then broke every read of
# the collection (JSON encoders stop at ~255 levels; issue 68)
MAX_METADATA_DEPTH = 32
CONSISTENCY_LEVELS = ("Strong", "Session", "Bounded", "Eventually")
SEARCH_MODES = ("dense", "bm25", "hybrid")


class StoreError(Exception):
    """Base of every error the index package raises about a store or a collection. The
    message names collections and fields, never a file path or the store's own exception
    text: those go in ``detail``, which the CLI prints and the API only logs."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def explain(e: BaseException) -> str:
    """An error's message with its detail, for a person at the command line."""
    detail = getattr(e, "detail", "")
    return f"{e} ({detail})" if detail else str(e)


class CollectionNotFoundError(StoreError):
    """The named collection does not exist."""


class CollectionExistsError(StoreError):
    """A collection of that name exists with a different dimension or encoder."""


class EncoderMismatchError(StoreError):
    """The vectors come from another encoder (name, fingerprint or dimension) than the
    collection's."""


class UnsupportedError(StoreError):
    """The store or the collection lacks a feature asked for: BM25 on a Milvus server older
    than 2.5, a ``bm25``/``hybrid`` search of a collection made without it."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached (server down, timeout). Retrying later may succeed."""


class StoreLockedError(StoreError):
    """A Milvus Lite file another process holds: retrying does not help while it runs."""


class StoreDamagedError(StoreUnavailableError):
    """The store failed at the file level (full disk, I/O error) and is being re-opened from
    its write-ahead log: writes wait until every collection answers again."""


class StoreFullError(StoreError):
    """The store refuses writes for lack of space (a Milvus server's disk quota)."""


@dataclass(frozen=True)
class EncoderInfo:
    """Which encoder made a collection's vectors: name, fingerprint (weights + tokenizer)
    and dimension."""

    name: str
    fingerprint: str
    dim: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "fingerprint": self.fingerprint, "dim": self.dim}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncoderInfo:
        return cls(name=str(d["name"]), fingerprint=str(d["fingerprint"]), dim=int(d["dim"]))


@dataclass(frozen=True)
class CollectionInfo:
    """A collection's dimension, its encoder when it was created with one, whether it has a
    BM25 index of its text (``hybrid``) and whether each document belongs to a tenant."""

    name: str
    dim: int
    encoder: EncoderInfo | None
    hybrid: bool = False
    multi_tenant: bool = False  # see index.tenancy
    # hybrid's calibration (index.hybrid.calibration.Calibration as a dict), None until tuned
    calibration: dict[str, Any] | None = None
    # how its documents are cut into passages (index.passages.Settings as a dict); None: a
    # document is one row, cut at the encoder's token limit
    passages: dict[str, Any] | None = None
    # the state of its last calibration job, as the server running it wrote it: what every
    # replica of the service answers for it (wiring.calibrator); None: none ran
    calibration_job: dict[str, Any] | None = None


@dataclass
class Item:
    """One stored entry. ``vector`` is a float32 (d,) unit row."""

    id: str
    vector: np.ndarray
    text: str = ""
    value: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    tenant: str | None = None  # in a multi-tenant collection (index.tenancy)
    # the terms a hybrid collection's BM25 indexes for it (analysed, joined by spaces:
    # index.hybrid.analysis.analyzed) where they are not its text's: a passage's read with
    # its neighbours' (index.passages); None: its text's. Stores that read rows back whole
    # (scans) give them back, so a copy indexes the same terms.
    keywords: str | None = None


class Mix(NamedTuple):
    """Hybrid: the dense weight one query's fusion used (``convex``: the request's or the
    collection's ``w`` moved by this query's confidence in each side, see
    :mod:`index.hybrid.fusion`), and the two confidences it was mixed from: how far each
    side's best score stands above what a hit it missed gets (cosine units on the dense
    side, relative on BM25's); None where the fusion has none (``weighted``)."""

    weight: float
    dense: float | None = None
    bm25: float | None = None


@dataclass
class Hit:
    """One neighbour of a query: ``score`` (higher is better: the cosine in ``dense`` mode,
    the BM25 score in ``bm25`` mode, the fused score in ``hybrid`` mode) and the item's
    fields; ``vector`` only when the search asked for vectors. ``sources`` maps each side
    that found the hit (``"dense"``, ``"bm25"``) to its score there."""

    id: str
    score: float
    text: str
    value: str | None
    metadata: dict[str, Any]
    vector: np.ndarray | None = None
    sources: dict[str, float] | None = None
    # a document of a collection with passages: its passages that matched (index.passages)
    passages: list[dict[str, Any]] | None = None
    # hybrid: the query's CANDIDATES-th best cosine, recorded by the fusion, whether the
    # BM25 side's best texts hold the query's terms only apart, never two in one
    # (index.hybrid.relevance.scattered), and the hit's calibrated match quality in (0, 1)
    floor: float | None = None
    scattered: bool | None = None
    relevance: float | None = None
    mix: Mix | None = None  # hybrid: the query's fusion weight (None for rrf)


@runtime_checkable
class VectorStore(Protocol):
    """A set of named collections of :class:`Item` searchable by inner product."""

    def create(
        self, collection: str, dim: int, encoder: EncoderInfo | None = None,
        exist_ok: bool = True, hybrid: bool = False, multi_tenant: bool = False,
    ) -> CollectionInfo:
        """Create ``collection``; an existing one with the same dim, encoder, ``hybrid`` and
        ``multi_tenant`` is kept. ``hybrid`` adds a BM25 index of the text
        (:class:`UnsupportedError` where the backend has none); ``multi_tenant`` makes every
        item belong to a tenant (:mod:`index.tenancy`): then every method below takes one."""
        ...

    def bm25_available(self) -> bool:
        """Whether ``create(..., hybrid=True)`` can work here (a Milvus server older than 2.5
        has no BM25); collections are hybrid by default where it can."""
        ...

    def drop(self, collection: str) -> None:
        """Delete ``collection`` and everything in it (no error if absent)."""
        ...

    def list_collections(self) -> list[str]:
        """Names of all collections, sorted."""
        ...

    def describe(self, collection: str) -> CollectionInfo:
        """The collection's info; given an alias, the info of the collection it points at
        (``name`` is the collection's). Every method below takes an alias too."""
        ...

    def described(self, collection: str) -> CollectionInfo | None:
        """``describe``'s answer when the store holds it fresh in memory, given without
        waiting or reading anything (an event loop calls it in place of a thread's
        ``describe``); None: ask ``describe``."""
        ...

    def list_aliases(self) -> dict[str, str]:
        """Every alias and the collection it points at (see :mod:`index.aliases`)."""
        ...

    def set_alias(self, alias: str, collection: str) -> str | None:
        """Point ``alias`` at ``collection``, creating it or moving it in one step; returns
        the collection it pointed at before (None when new)."""
        ...

    def drop_alias(self, alias: str) -> None:
        """Delete the alias (:class:`CollectionNotFoundError` if there is none)."""
        ...

    def upsert(
        self, collection: str, items: Sequence[Item], encoder: EncoderInfo | None = None
    ) -> int:
        """Insert or replace by id (the last of duplicate ids wins); returns rows written.
        Durable and visible to strong reads when it returns."""
        ...

    def delete(self, collection: str, ids: Sequence[str], tenant: str | None = None) -> None: ...

    def get(self, collection: str, ids: Sequence[str], tenant: str | None = None,
            consistency: str = "Strong", brief: bool = False) -> list[Item]:
        """The items with these ids that exist, in the order asked (a strong read, unless
        a search's reads ask for its own ``consistency``; ``brief``: their ids, values and
        metadata, text and vector left empty where the backend can skip them)."""
        ...

    def search(
        self,
        collection: str,
        xq: np.ndarray | Callable[[], np.ndarray],
        k: int,
        filter: Filter | None = None,
        encoder: EncoderInfo | None = None,
        with_vectors: bool = False,
        consistency: str = "Session",
        query_text: Sequence[str] | None = None,
        mode: str | None = None,
        fusion: str = "convex",
        dense_weight: float = 0.5,
        tenant: str | None = None,
    ) -> list[list[Hit]]:
        """For each query row of ``xq`` (nq, d), up to ``k`` hits, best first. ``mode``
        defaults to ``hybrid`` on a hybrid collection when ``query_text`` (one per row) is
        given, else ``dense``; ``bm25`` and ``hybrid`` need ``query_text``. ``xq`` may be a
        function that waits for the vectors (still being encoded): the BM25 side starts
        before them (:func:`index.steps.search`)."""
        ...

    def count(self, collection: str, tenant: str | None = None, filter: Filter | None = None
              ) -> int:
        """Exact number of items (the tenant's, in a multi-tenant collection; those matching
        ``filter`` when given; strong read)."""
        ...

    def ids(self, collection: str, after: str | None = None, limit: int = 1000,
            filter: Filter | None = None, tenant: str | None = None) -> list[str]:
        """The ids (the tenant's own) of up to ``limit`` items that match ``filter``, in
        id order, after ``after`` (from the first when None): a page of a collection read
        out, the last id the cursor of the next. Read with strong consistency."""
        ...

    def set_calibration(self, collection: str, calibration: dict[str, Any] | None) -> None:
        """Store hybrid's calibration with the collection (a JSON object; None removes it):
        every later ``describe`` of it, from any client, returns it as ``calibration``."""
        ...

    def set_passages(self, collection: str, passages: dict[str, Any] | None) -> None:
        """Store how the collection's documents are cut into passages (a JSON object; None:
        not cut): every later ``describe`` returns it as ``passages``."""
        ...

    def set_calibration_job(self, collection: str, job: dict[str, Any] | None) -> None:
        """Store the state of the collection's last calibration job (a JSON object): every
        later ``describe``, from any client, returns it as ``calibration_job``."""
        ...

    def sample(self, collection: str, n: int, seed: int = 0) -> tuple[list[Item], int]:
        """Up to ``n`` items drawn at random (``seed``) from the whole collection, every
        tenant's, with their vectors; and how many items it holds."""
        ...

    def scan(self, collection: str, after: str | None = None, batch_size: int = 1000,
             every_tenant: bool = False) -> Iterator[list[Item]]:
        """Every item of a (single-tenant) collection whose id sorts after ``after`` (all
        when None), with its vector, in pages of up to ``batch_size`` in id order: a job
        that remembers the last id of the pages it finished resumes from there. With
        ``every_tenant``, a multi-tenant collection too: every tenant's items, each with
        its tenant, in the order of their stored ids (``tenant:id``, what ``after`` is
        then)."""
        ...

    def close(self) -> None: ...


def as_matrix(x: np.ndarray, dim: int) -> np.ndarray:
    """The store-boundary array contract: C-contiguous float32 (n, dim), finite."""
    x = np.asarray(x)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != dim:
        raise EncoderMismatchError(
            f"vectors have shape {x.shape}, the collection expects (n, {dim})")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise ValueError("vectors contain NaN or infinity")
    return x


def check_item(item: Item) -> None:
    """Validate one item's id, text and value sizes; raises ``ValueError`` naming the limit."""
    if not isinstance(item.id, str) or not item.id:
        raise ValueError(f"item id must be a non-empty string, got {item.id!r}")
    if len(item.id.encode()) > MAX_ID_BYTES:
        raise ValueError(f"item id is longer than {MAX_ID_BYTES} bytes: {item.id[:40]!r}...")
    for name, text in (("text", item.text), ("value", item.value or ""),
                       ("keywords", item.keywords or "")):
        if len(text.encode()) > MAX_TEXT_BYTES:
            raise ValueError(f"item {item.id!r}: {name} is longer than {MAX_TEXT_BYTES} bytes")
    if not isinstance(item.metadata, dict):
        raise ValueError(f"item {item.id!r}: metadata must be a JSON object")
    _check_json(item.metadata, f"item {item.id!r}: metadata")


def _check_json(v: Any, where: str, depth: int = 0) -> None:
    """Refuse JSON that some backend cannot store as given, or that could not be read back:
    integers beyond 64 bits (Milvus' JSON field refuses them), non-finite numbers, strings or
    keys that are not valid UTF-8 (lone surrogates), keys that are not strings, and objects
    or lists nested deeper than :data:`MAX_METADATA_DEPTH`."""
    if v is None or isinstance(v, bool):
        return
    if isinstance(v, str):
        v.encode()  # a lone surrogate raises UnicodeEncodeError, a ValueError
    elif isinstance(v, int):
        if not -(2**63) <= v < 2**63:
            raise ValueError(f"{where}: integer {v} is outside the 64-bit range")
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{where}: numbers must be finite, got {v}")
    elif isinstance(v, dict | list | tuple):
        if depth >= MAX_METADATA_DEPTH:
            raise ValueError(f"{where}: objects and lists nest at most {MAX_METADATA_DEPTH} "
                             "deep")
        if isinstance(v, dict):
            for key, x in v.items():
                if not isinstance(key, str):
                    raise ValueError(f"{where}: keys must be strings, got {key!r}")
                key.encode()
                _check_json(x, where, depth + 1)
        else:
            for x in v:
                _check_json(x, where, depth + 1)


def dedupe_last(items: Iterable[Item]) -> list[Item]:
    """Items with duplicate ids resolved to the last one, in first-seen order (an id is its
    tenant's: two tenants' ``a`` in one call are two items)."""
    by_id: dict[tuple[str | None, str], Item] = {}
    for it in items:
        by_id.pop((it.tenant, it.id), None)
        by_id[(it.tenant, it.id)] = it
    return list(by_id.values())


def check_encoder(info: CollectionInfo, encoder: EncoderInfo | None) -> None:
    """Refuse an encoder other than the one the collection was built with."""
    if encoder is None or info.encoder is None:
        if encoder is not None and encoder.dim != info.dim:
            raise EncoderMismatchError(
                f"collection {info.name!r} has dim {info.dim}, encoder {encoder.name!r} "
                f"makes dim {encoder.dim}"
            )
        return
    if encoder != info.encoder:
        raise EncoderMismatchError(
            f"collection {info.name!r} was built with encoder {info.encoder.name!r} "
            f"(fingerprint {info.encoder.fingerprint}, dim {info.encoder.dim}); got "
            f"{encoder.name!r} (fingerprint {encoder.fingerprint}, dim {encoder.dim})"
        )


def check_same(info: CollectionInfo, exist_ok: bool, dim: int, encoder: EncoderInfo | None,
               hybrid: bool, multi_tenant: bool) -> None:
    """Refuse to create a collection that exists (``exist_ok`` false) or exists otherwise."""
    def named(e: EncoderInfo | None) -> str:
        return f"{e.name} (fingerprint {e.fingerprint})" if e is not None else "none"

    differ = [f"{what} {has} (asked: {asked})" for what, has, asked in (
        ("dimensions", info.dim, dim), ("encoder", named(info.encoder), named(encoder)),
        ("hybrid", info.hybrid, hybrid), ("multi_tenant", info.multi_tenant, multi_tenant))
        if has != asked]
    if differ:
        raise CollectionExistsError(f"collection {info.name!r} already exists with "
                                    f"{', '.join(differ)}")
    if not exist_ok:
        raise CollectionExistsError(f"collection {info.name!r} already exists with the same "
                                    "settings; use it, or delete it first to start over")


def check_search_args(k: int, consistency: str) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if consistency not in CONSISTENCY_LEVELS:
        raise ValueError(f"consistency must be one of {CONSISTENCY_LEVELS}, got {consistency!r}")


def check_collection_name(name: str) -> None:
    """Milvus's rule for names, applied to every store so the contract is one."""
    ok = bool(name) and len(name) <= 255 and (name[0].isalpha() or name[0] == "_")
    if not ok or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
        raise ValueError(
            f"collection name must start with a letter or '_' and contain only ASCII letters, "
            f"digits and '_' (at most 255), got {name!r}"
        )


def collection_name(name: str) -> str:
    """The stored name of the collection a caller calls ``name``: each ``-`` becomes ``_``,
    so ``tm-en-fr`` and ``tm_en_fr`` name the same collection, stored as ``tm_en_fr``
    (Milvus accepts only ``[A-Za-z_][A-Za-z0-9_]*``); responses show the stored name.

    Every place a name enters from outside (HTTP paths and bodies, settings, the command
    line) goes through here; the stores themselves take stored names only. A name that does
    not start with a letter or ``_``, or has other characters than ASCII letters, digits,
    ``_`` and ``-``, raises ``ValueError``.
    """
    ok = bool(name) and len(name) <= 255 and (name[0].isalpha() or name[0] == "_")
    if not ok or not all(c.isascii() and (c.isalnum() or c in "_-") for c in name):
        raise ValueError(
            f"collection name must start with a letter or '_' and contain only ASCII letters, "
            f"digits, '_' and '-' (at most 255; '-' is stored as '_'), got {name!r}"
        )
    stored = name.replace("-", "_")
    check_collection_name(stored)
    return stored


def hybrid_default(store: VectorStore, collection: str, hybrid: bool | None) -> bool:
    """Whether to create ``collection`` hybrid: as asked; when not asked, as it already is,
    else wherever the store has BM25 (collections are hybrid by default)."""
    if hybrid is not None:
        return hybrid
    try:
        return store.describe(collection).hybrid
    except CollectionNotFoundError:
        return store.bm25_available()


def resolve_mode(info: CollectionInfo, mode: str | None, query_text: Sequence[str] | None,
                 nq: int) -> str:
    """The search mode to run: the default for the collection, or ``mode`` once checked to
    be possible (``ValueError`` for a bad one, :class:`UnsupportedError` for a collection
    without BM25)."""
    if mode is None:
        return "hybrid" if info.hybrid and query_text is not None else "dense"
    if mode not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {SEARCH_MODES}, got {mode!r}")
    if mode == "dense":
        return mode
    if not info.hybrid:
        raise UnsupportedError(
            f"collection {info.name!r} has no BM25 index (it was created without hybrid), "
            f"so mode {mode!r} is not available; use mode 'dense' or recreate it with hybrid")
    if query_text is None or len(query_text) != nq:
        raise ValueError(f"mode {mode!r} needs the query text, one per query vector")
    return mode
