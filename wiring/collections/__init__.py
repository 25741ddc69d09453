"""The collections: the one place that plans and runs searches (one or a batch), attend and
generate, and performs writes and deletes with all their side effects (the disk guard, the
copy of a collection being re-indexed by an adapt job, the token memory, the calibrator's
count). HTTP routes parse a request, make one call here and shape the answer; the demo
seeding writes through here too.

:class:`Collections` is built from the store and the parts the server hands in: the
encoder registry, an ``embed`` that queues texts for an encoder (and charges the caller),
``call`` and ``run`` that take store and CPU work off the event loop, the calibration and adapt
job runners, the decoders and token memories, and a ``writable`` check that refuses writes
while the disk is full. Failures are the index's errors and :mod:`wiring.errors`.

A search checks each request, encodes the texts of all of them together, and sends the
store one search per group of requests that differ only in their query (same filter,
depth, mode, fusion, consistency, tenant), then pages (``offset``) and cuts
(``score_threshold``: on the score, or on a hybrid hit's relevance) each request's hits. A
search or a write that meets an adapt job's swap (the old collection gone, or made by
another encoder) is run once more on the new one.

Its parts: :mod:`~wiring.collections.requests` (what callers ask and get back),
:mod:`~wiring.collections.base` (the parts it is built from, what a collection is made
of), :mod:`~wiring.collections.searching` and :mod:`~wiring.collections.writing`; here,
the collections' own lifecycle (create, drop, aliases) and the starts of their jobs.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from index import CollectionInfo, hybrid_default
from index import passages as long_docs
from index.scale import backend
from wiring.calibrating import Labels, manual
from wiring.collections.requests import (
    Async,
    Attended,
    Document,
    Generated,
    Generation,
    Given,
    KnnAsk,
    Limits,
    Neighbours,
    Search,
)
from wiring.collections.searching import Searching, reads_neighbours
from wiring.collections.writing import Writing
from wiring.encoders import Served
from wiring.errors import ConflictError, InvalidError

__all__ = ["Async", "Attended", "Collections", "Document", "Generated", "Generation", "Given",
           "KnnAsk", "Limits", "Neighbours", "Search", "reads_neighbours"]


class Collections(Searching, Writing):
    """Search, attend, generate and the writes of every collection of one store (built as
    :class:`wiring.collections.base.Base` says), and the collections' own lifecycle."""

    # the collections themselves
    @property
    def backend(self) -> str:
        """The store's kind (index.scale): what a collection's size warning is about."""
        return backend(self.store)

    async def create(self, name: str, model: str | None = None, dimensions: int | None = None,
                     hybrid: bool | None = None, multi_tenant: bool = False,
                     passages: tuple[int | None, int | None, int | None] | None = (
                         None, None, None)
                     ) -> CollectionInfo:
        """A new collection for the encoder ``model`` (the default when None) at one of its
        sizes; hybrid unless the store has no BM25 (``hybrid: True`` there is a conflict);
        its documents cut into passages of ``passages`` = (size, overlap, pack) tokens, each
        None for its default (a size at most what the encoder reads); ``passages`` None: one
        row a document, cut at the encoder's limit. An existing name is a conflict; writes
        are refused while the disk is full."""
        self.writable()
        served: Served = await self.run(self.encoders.get, model)  # not found: a model it lacks
        window = int(getattr(served.encoder, "max_tokens", 0) or 0) or long_docs.DEFAULT_SIZE
        chunks = None
        if passages is not None:
            size, overlap, pack = passages
            if size is not None and size > window:
                raise InvalidError(f"passage_tokens must be at most {window} for "
                                   f"{served.name!r} (what it reads of a text), got {size}",
                                   "passage_tokens")
            try:
                chunks = long_docs.Settings.sized(size or min(long_docs.DEFAULT_SIZE, window),
                                                  overlap, pack)
            except ValueError as e:
                raise InvalidError(str(e), "passage_overlap") from e
        dims = served.encoder.dims
        dim = served.info.dim if dimensions is None else dimensions
        if dim not in dims:
            raise InvalidError(f"dimensions must be one of {', '.join(map(str, dims))} for "
                               f"{served.name!r} (the sizes it was trained to be cut to), "
                               f"got {dim}")
        hybrid = await self.call(hybrid_default, self.store, name, hybrid)
        info: CollectionInfo = await self.call(
            self.store.create, name, dim, self.info_for(dim, served), exist_ok=False,
            hybrid=hybrid, multi_tenant=multi_tenant)
        if chunks is not None:
            await self.call(self.store.set_passages, info.name, chunks.to_dict())
            info = await self.describe(info.name)
        return info

    async def all(self) -> list[CollectionInfo]:
        """Every collection, described."""
        names = await self.call(self.store.list_collections)
        return [await self.describe(n) for n in names]

    async def count(self, info: CollectionInfo, tenant: str | None = None) -> int | None:
        """The exact count of a collection's documents (the tenant's in a multi-tenant
        one; None there without a tenant)."""
        if tenant is None and info.multi_tenant:
            return None
        heads = long_docs.count_filter() if info.passages else None
        n: int = await self.call(self.store.count, info.name, tenant, heads)
        return n

    async def drop(self, name: str) -> None:
        """Drop a collection and its documents (an alias, or one aliases point at, is a
        conflict; an unknown name not found)."""
        await self.describe(name)
        await self.call(self.store.drop, name)

    async def aliases(self) -> dict[str, str]:
        """Every alias and the collection it points at."""
        aliases: dict[str, str] = await self.call(self.store.list_aliases)
        return aliases

    async def set_alias(self, alias: str, collection: str) -> str | None:
        """Point ``alias`` at ``collection`` in one step; the collection it pointed at."""
        self.writable()
        before: str | None = await self.call(self.store.set_alias, alias, collection)
        return before

    async def drop_alias(self, alias: str) -> None:
        await self.call(self.store.drop_alias, alias)

    # hybrid calibration (the calibration jobs: POST .../tune)
    async def calibrate_by_hand(self, name: str, dense_weight: float) -> dict[str, Any]:
        """Set hybrid's dense weight of a collection by hand; its stored calibration."""
        self.writable()
        info = await self.describe(name)
        cal = await self.call(manual, self.store, info.name, dense_weight)
        state = {"collection": info.name, "state": "done", "reason": "set by hand",
                 "calibration": cal.to_dict()}
        await self.call(self.calibrator.set_by_hand, info.name, state)
        return state

    async def start_calibration(self, name: str, labels: Labels | None, seed: int
                         ) -> tuple[CollectionInfo, Future[dict[str, Any]]]:
        """Queue a calibration of a collection's hybrid weight (from ``labels``, or from its
        own documents); a conflict while one of it runs, invalid without documents or
        with labels naming ids it lacks."""
        self.writable()
        info = await self.describe(name)
        await self.call(self.calibrator.check, info, labels)
        if self.calibrator.running(info.name):  # checked and started with no await between
            raise ConflictError(f"a tune of collection {info.name!r} is already running")
        return info, self.calibrator.start(info, labels, seed)

    def calibration_state(self, info: CollectionInfo) -> dict[str, Any] | None:
        """The collection's last calibration job, on this server or another replica on the
        same store (None when there was none)."""
        return self.calibrator.last(info)

    # adapting the encoder to a collection (the adapt jobs)
    async def start_adapt(self, name: str, budget_s: float, force: bool
                          ) -> tuple[dict[str, Any], Future[dict[str, Any]]]:
        """Queue an adapt job of a single-tenant collection of enough documents: the
        encoder fine-tuned to them, the collection re-indexed with it and calibrated, and
        the name moved onto the new one; a conflict while another adapt of it runs."""
        from encoder.domain import MIN_DOCS

        self.writable()
        info = await self.describe(name)
        if info.multi_tenant:
            raise InvalidError(f"collection {name!r} is multi-tenant: adapt is for "
                               "single-tenant collections")
        count = await self.count(info)
        if count is not None and count < MIN_DOCS:
            raise InvalidError(f"collection {name!r} holds {count} documents; adapting needs "
                               f"at least {MIN_DOCS}")
        return self.adapter.start(info, name, budget_s, force)
