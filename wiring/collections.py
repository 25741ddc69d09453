"""The collections: the one place that plans and runs searches (one or a batch), attend and
generate, and performs writes and deletes with all their side effects (the disk guard, the
copy of a collection being re-indexed by an adapt job, the token memory, the calibrator's
count). HTTP routes parse a request, make one call here and shape the answer. (``qkv index``
and the demo seeding still write through the bulk job, ``index.bulk.job``.)

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
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from decoder.knn import KnnMixer, KnnOptions, votes
from index import (
    CollectionInfo,
    CollectionNotFoundError,
    EncoderInfo,
    EncoderMismatchError,
    Filter,
    Hit,
    Item,
    VectorStore,
    hybrid_default,
    parse_filter,
    resolve_mode,
    softmax,
)
from index import attend as attend_values
from index import passages as long_docs
from index.hybrid.fusion import DEFAULT_FUSION
from index.hybrid.relevance import Relevance, coverage, distinct_terms, model_relevance
from index.scale import backend
from index.store import as_matrix  # the store's own checks: 409 wrong dim, 422 not finite
from index.tenancy import check_tenant, stored_id
from wiring.adapter import Adapter
from wiring.calibrating import Labels, manual
from wiring.calibrator import Calibrator
from wiring.encoders import Encoders, Served
from wiring.errors import ConflictError, InvalidError, TooLargeError

log = logging.getLogger(__name__)
Async = Callable[..., Coroutine[Any, Any, Any]]


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (the server's settings)."""

    max_top_k: int = 1000
    max_offset: int = 10_000
    max_documents: int = 1000
    max_searches: int = 64
    max_generate_tokens: int = 128
    default_temperature: float = 0.05


@dataclass(frozen=True)
class Search:
    """One search: a text ``query`` or a ``vector``, how many hits (``top_k`` after
    ``offset``), and how (``mode``, ``fusion``, ``dense_weight``; None: the collection's)."""

    query: str | None = None
    vector: Sequence[float] | None = None
    top_k: int = 10
    offset: int = 0
    filter: dict[str, Any] | None = None
    mode: str | None = None
    fusion: str = DEFAULT_FUSION
    dense_weight: float | None = None
    consistency: str = "Session"
    score_threshold: float | None = None
    truncate: bool = True
    tenant: str | None = None
    group_by_document: bool = True  # a collection with passages: documents (else passages)


@dataclass
class Neighbours:
    """One query's hits, the query vector, the mode that ran and whether the text was cut."""

    hits: list[Hit]
    xq: np.ndarray
    mode: str
    truncated: bool
    weight: tuple[float, str] | None = None  # hybrid's w and where it came from

    def cosines(self) -> np.ndarray:
        """Each hit's dense similarity to the query: its score in dense mode, else q·key
        (bm25 and hybrid searches fetch the vectors for it)."""
        if self.mode == "dense":
            return np.array([h.score for h in self.hits], np.float32)
        keys = [h.vector for h in self.hits if h.vector is not None]
        assert len(keys) == len(self.hits), "bm25/hybrid searches fetch the vectors"
        return (np.stack(keys) @ self.xq if keys else np.zeros(0)).astype(np.float32)


@dataclass
class Attended:
    """The query-key-value view: the neighbours, their weights and the output Σ wᵢ vᵢ."""

    neighbours: Neighbours
    weights: np.ndarray
    output: np.ndarray
    temperature: float


@dataclass(frozen=True)
class KnnAsk:
    """A generate's word on the token memory: off (``enabled`` false), or these options."""

    enabled: bool = True
    options: KnnOptions = field(default_factory=KnnOptions)
    return_votes: bool = False


@dataclass(frozen=True)
class Generation:
    """A generate: retrieve ``top_k`` dense neighbours of ``query``, weight them at
    ``temperature``, decode (``beam``, ``max_tokens``); ``knn`` None uses the collection's
    token memory with its defaults when it has one."""

    query: str
    top_k: int = 4
    filter: dict[str, Any] | None = None
    temperature: float | None = None
    beam: int = 4
    max_tokens: int | None = None
    return_attention: bool = False
    knn: KnnAsk | None = None
    tenant: str | None = None


@dataclass
class Generated:
    text: str
    hits: list[Hit]
    weights: np.ndarray
    attention: dict[str, Any] | None
    knn: dict[str, Any] | None


@dataclass
class Document:
    """A document to write: the caller's id, its text, the value a decoder reads."""

    id: str
    text: str
    value: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Plan:
    """One checked search: its filter, the mode to run and how deep to search."""

    search: Search
    filter: Filter | None
    mode: str
    depth: int


def reads_neighbours(dec: Any) -> bool:
    """Whether the decoder reads retrieved neighbours: unless its training record says it
    was trained without them (k = 0); a checkpoint without one (an untrained test
    decoder) reads them."""
    training = dec.meta.get("training")
    return not training or int(training.get("k", 0)) > 0


class Collections:
    """Search, attend, generate and the writes of every collection of one store."""

    def __init__(self, store: VectorStore, encoders: Encoders, embed: Async, call: Async,
                 run: Async, calibrator: Calibrator, adapter: Adapter, decoders: dict[str, Any],
                 token_memories: dict[str, Any], writable: Callable[[], None],
                 default_weight: float, limits: Limits) -> None:
        """``embed(texts, truncate, dim=, model=)`` returns the vectors, token counts and
        cut flags of ``texts`` by the encoder ``model`` (:class:`Served`); ``call`` runs a
        store call off the event loop (and counts its failures), ``run`` CPU work;
        ``writable()`` raises while writes must be refused."""
        self.store, self.encoders, self.embed = store, encoders, embed
        self.call, self.run, self.calibrator, self.adapter = call, run, calibrator, adapter
        self.decoders, self.token_memories = decoders, token_memories
        self.writable, self.default_weight, self.limits = writable, default_weight, limits
        self._relevance: dict[Path, Relevance] = {}  # each encoder's, by its directory

    # what a collection is made of
    async def describe(self, name: str) -> CollectionInfo:
        """The collection ``name`` is (an alias's target); ``CollectionNotFoundError``."""
        info: CollectionInfo = await self.call(self.store.describe, name)
        return info

    def encoder_of(self, info: CollectionInfo) -> Served:
        """The encoder that made collection ``info``; a conflict when this server lacks it."""
        return self.encoders.of(info)

    def info_for(self, dim: int, model: Served | None = None) -> EncoderInfo:
        """An encoder (the default when None) as a collection of ``dim`` records it: its
        vectors cut to ``dim`` (a Matryoshka size) are another space than the full ones."""
        info = (model or self.encoders.default).info
        return info if dim == info.dim else EncoderInfo(info.name, info.fingerprint, dim)

    def hybrid_weight(self, info: CollectionInfo, requested: float | None
                      ) -> tuple[float, str]:
        """Hybrid's dense weight for a search of ``info``, and where it came from: the
        request's, else the collection's calibration, else the encoder's default."""
        if requested is not None:
            return requested, "request"
        cal = info.calibration
        if cal is not None and "dense_weight" in cal:
            source = "encoder default" if cal.get("source") == "encoder default" else "collection"
            return float(cal["dense_weight"]), source
        return self.default_weight, "encoder default"

    def decoder_for(self, collection: str, *names: str) -> Any:
        """The decoder configured for ``collection``, or for another name of it (the
        alias the request used, or the collection an alias points at)."""
        dec = next((self.decoders[n] for n in (collection, *names) if n in self.decoders), None)
        if dec is None:
            configured = ", ".join(sorted(self.decoders)) or "none"
            raise ConflictError(
                f"collection {collection!r} has no decoder (collections with one: "
                f"{configured}); configure one with QKV_DECODERS='{{\"{collection}\": "
                "\"models/DECODER\"}'")
        return dec

    def token_memory_for(self, collection: str, *names: str) -> Any:
        """The token memory configured for ``collection`` (or another name of it), or None."""
        return next((self.token_memories[n] for n in (collection, *names)
                     if n in self.token_memories), None)

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
        self.calibrator.set_by_hand(info.name, state)
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
        """This server's last calibration job of the collection (None when there was none)."""
        return self.calibrator.state(info.name)

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

    # searches
    async def search(self, name: str, searches: Sequence[Search], with_vectors: bool = False,
                     labels: Sequence[str] | None = None) -> list[Neighbours]:
        """Each search's neighbours (see the module docstring); the collection's 404 before
        any encoding. ``labels`` name the searches in errors (``searches.N: ``)."""
        if len(searches) > self.limits.max_searches:
            raise TooLargeError(f"{len(searches)} searches in one request; at most "
                                f"{self.limits.max_searches} (QKV_MAX_SEARCHES)")
        try:
            return await self._search(name, searches, with_vectors, labels)
        except (CollectionNotFoundError, EncoderMismatchError):
            if not self.adapter.swapped_lately():
                raise
            return await self._search(name, searches, with_vectors, labels)

    def _plan(self, info: CollectionInfo, s: Search, where: str) -> _Plan:
        """Check one search before anything is encoded (``where`` names it in a batch)."""
        lim = self.limits
        try:
            check_tenant(info, s.tenant)
            if (s.query is None) == (s.vector is None):
                raise ValueError("give exactly one of `query` (text) or `vector`")
            if s.top_k > lim.max_top_k:
                raise ValueError(f"top_k must be at most {lim.max_top_k}, got {s.top_k}")
            if s.offset > lim.max_offset:
                raise ValueError(f"offset must be at most {lim.max_offset} (QKV_MAX_OFFSET), "
                                 f"got {s.offset}")
            filt = parse_filter(s.filter) if s.filter is not None else None
            if s.mode in ("bm25", "hybrid") and s.query is None:
                raise ValueError(f"mode {s.mode!r} searches the query's words: give `query` "
                                 "(text), or use mode 'dense' with `vector`")
            texts = [s.query] if s.query is not None else None
            mode = resolve_mode(info, s.mode, texts, 1)  # 409 on a collection without BM25
        except ValueError as e:
            raise InvalidError(f"{where}{e}") from e
        return _Plan(s, filt, mode, s.offset + s.top_k)

    async def _search(self, name: str, searches: Sequence[Search], with_vectors: bool,
                      labels: Sequence[str] | None) -> list[Neighbours]:
        info = await self.describe(name)
        name = info.name  # an alias's collection, the same one for every search
        plans = [self._plan(info, s, labels[i] if labels else "")
                 for i, s in enumerate(searches)]
        model = self.encoder_of(info)  # a conflict when the encoder that made it is gone
        xq = np.zeros((len(searches), info.dim), np.float32)
        cut = [False] * len(searches)
        for truncate in (True, False):  # one encoder call per truncate setting
            asked = [i for i, s in enumerate(searches)
                     if s.query is not None and s.truncate == truncate]
            if asked:
                emb = await self.embed([searches[i].query or "" for i in asked], truncate,
                                       dim=info.dim, model=model)
                for j, i in enumerate(asked):
                    xq[i], cut[i] = emb.vectors[j], emb.truncated[j]
        for i, s in enumerate(searches):
            if s.vector is not None:
                with np.errstate(over="ignore"):  # beyond float32: inf, refused here (422)
                    xq[i] = as_matrix(np.asarray(s.vector, dtype=np.float32), info.dim)[0]
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, p in enumerate(plans):
            s = p.search
            key = (json.dumps(s.filter, sort_keys=True), p.depth, p.mode, s.consistency,
                   s.fusion, s.dense_weight, s.tenant)
            groups.setdefault(key, []).append(i)
        found: list[list[Hit]] = [[] for _ in searches]
        weights = [self.hybrid_weight(info, s.dense_weight) for s in searches]
        for rows in groups.values():
            p = plans[rows[0]]
            depth, cap = p.depth, p.depth
            if info.passages:  # passages, enough of them to make ``depth`` documents
                cap = min(long_docs.MAX_PASSAGES_SEARCHED, max(p.depth * 64, 1000))
                depth = long_docs.depth(p.depth, cap)
            todo = list(rows)
            while todo:  # deeper while a document-heavy top holds too few documents
                texts = [searches[i].query or "" for i in todo] if p.mode != "dense" else None
                res = await self.call(
                    self._store_search, info, name, [searches[i] for i in todo], xq[todo],
                    depth, p, self.info_for(info.dim, model), with_vectors, texts,
                    weights[rows[0]][0])
                deeper = []
                for i, (hits, shaped) in zip(todo, res, strict=True):
                    if len(shaped) < p.depth and len(hits) >= depth and depth < cap:
                        deeper.append(i)
                        continue
                    found[i] = shaped
                todo, depth = deeper, min(cap, depth * 4)
        out = []
        for i, p in enumerate(plans):
            hits = found[i][p.search.offset:p.depth]
            if p.mode == "hybrid":
                hits = self._with_relevance(model, hits, xq[i], searches[i].query or "")
            threshold = p.search.score_threshold
            if threshold is not None:  # on the relevance in hybrid, the score otherwise
                hits = [h for h in hits
                        if (h.score if h.relevance is None else h.relevance) >= threshold]
            out.append(Neighbours(hits, xq[i], p.mode, cut[i],
                                  weights[i] if p.mode == "hybrid" else None))
        return out

    def _with_relevance(self, model: Served, hits: list[Hit], xq: np.ndarray, query: str
                        ) -> list[Hit]:
        """Hybrid hits with their relevance (:mod:`index.hybrid.relevance`): from how far
        each hit's cosine (its dense score, else q·key: hybrid searches fetch the keys)
        stands above the query's floor, and how many of the query's terms its text has, on
        the scale of the collection's encoder."""
        rel = self._relevance.get(model.path)
        if rel is None:
            rel = self._relevance[model.path] = model_relevance(model.path)
        distinct = distinct_terms(query)
        out = []
        for h in hits:
            cos = (h.sources or {}).get("dense")
            if cos is None:
                cos = float(h.vector @ xq) if h.vector is not None else -1.0
            floor = h.floor if h.floor is not None else cos
            out.append(replace(h, relevance=rel.hit(cos, floor, coverage(distinct, h.text))))
        return out

    def _store_search(self, info: CollectionInfo, name: str, searches: Sequence[Search],
                      xq: np.ndarray, depth: int, p: _Plan, enc: EncoderInfo,
                      with_vectors: bool, texts: list[str] | None, weight: float
                      ) -> list[tuple[list[Hit], list[Hit]]]:
        """One store search of a group (on a worker thread), and each query's hits as they
        came and as the request wants them: in a collection with passages, grouped into
        documents (or kept as passages), in the same thread."""
        s = p.search
        res = self.store.search(name, xq, depth, p.filter, enc, with_vectors or p.mode != "dense",
                                s.consistency, texts, p.mode, s.fusion, weight, s.tenant)
        if not info.passages:
            return [(hits, hits) for hits in res]
        return [(hits, long_docs.group(self.store, name, hits, s.tenant, s.consistency, p.depth)
                 if one.group_by_document else
                 long_docs.as_passages(self.store, name, hits, s.tenant, s.consistency))
                for one, hits in zip(searches, res, strict=True)]

    async def attend(self, name: str, search: Search, temperature: float | None = None
                     ) -> Attended:
        """The neighbours of ``search`` (chosen by its mode; keys = their vectors), weights
        softmax(cosine / T) summing to 1, and the output Σ wᵢ vᵢ."""
        (nb,) = await self.search(name, [search], with_vectors=True)
        t = temperature or self.limits.default_temperature
        if nb.hits:
            att = attend_values(nb.cosines(), np.stack([h.vector for h in nb.hits
                                                        if h.vector is not None]), t)
            return Attended(nb, att.weights, att.output, t)
        return Attended(nb, np.zeros(0, np.float32), np.zeros(len(nb.xq), np.float32), t)

    async def generate(self, name: str, g: Generation) -> Generated:
        """Retrieve ``top_k`` dense neighbours, weight them, and decode with the collection's
        decoder (one trained with neighbours reads each one's value with its weight as an
        attention bias; one trained without them reads none), mixing in the votes of the
        collection's token memory (the tenant's pairs only) when it has one."""
        info = await self.describe(name)  # 404 first
        dec = self.decoder_for(name, info.name)  # then a conflict without a decoder
        if g.max_tokens is not None and g.max_tokens > self.limits.max_generate_tokens:
            raise InvalidError(f"max_tokens must be at most {self.limits.max_generate_tokens}")
        try:  # checked here too: with top_k 0 no search checks it, and the token memory reads it
            check_tenant(info, g.tenant)
        except ValueError as e:
            raise InvalidError(str(e), "tenant") from e
        t = g.temperature or self.limits.default_temperature
        hits: list[Hit] = []
        cosines = np.zeros(0, np.float32)
        if g.top_k > 0:  # dense neighbours, as the decoder was trained with
            (nb,) = await self.search(name, [Search(query=g.query, top_k=g.top_k,
                                                    filter=g.filter, mode="dense",
                                                    tenant=g.tenant)])
            hits, cosines = nb.hits, nb.cosines()
        weights = softmax(cosines, t)
        # a decoder trained without neighbours (k = 0, the shipped one) reads none: they are
        # returned, and its retrieval is the token memory's
        read = [(h.value or h.text, float(w)) for h, w in zip(hits, weights, strict=True)
                if reads_neighbours(dec)]
        memory, options = self._knn(name, info.name, g.knn)
        mix = KnnMixer(memory, options, g.tenant) if options is not None else None
        gen = await self.run(dec.generate, g.query, read, beam=g.beam, max_tokens=g.max_tokens,
                             return_attention=g.return_attention, mix=mix)
        attention = None
        if g.return_attention and gen.attention is not None:
            attention = {"tokens": gen.tokens, "memory_tokens": gen.memory_tokens,
                         "memory_segments": gen.memory_segments, "weights": gen.attention}
        knn: dict[str, Any] | None = None
        if mix is not None and options is not None:
            knn = {"keys": mix.memory.keys_of(g.tenant),
                   "mean_lambda": round(mix.lam_sum / max(1, mix.steps), 4)}
            if g.knn is not None and g.knn.return_votes:
                knn["tokens"] = await self.run(votes, dec, g.query, read, gen.ids, mix.memory,
                                               options, tenant=g.tenant)
        return Generated(gen.text, hits, weights, attention, knn)

    def _knn(self, name: str, stored: str, ask: KnnAsk | None
             ) -> tuple[Any, KnnOptions | None]:
        """The collection's token memory and the options to use it with: by default when it
        has one; ``enabled`` false turns it off; asking for it without one is a conflict."""
        memory = self.token_memory_for(name, stored)
        if ask is not None and not ask.enabled:
            return None, None
        if memory is None:
            if ask is not None:
                raise ConflictError(
                    f"collection {name!r} has no token memory (build one with qkv "
                    "build-token-memory and give it with QKV_TOKEN_MEMORIES); send "
                    '"knn": {"enabled": false} or leave knn out')
            return None, None
        return memory, (KnnOptions() if ask is None else ask.options)

    # writes
    async def upsert(self, name: str, docs: Sequence[Document], tenant: str | None = None,
                     truncate: bool = True) -> tuple[int, list[str]]:
        """Embed and upsert ``docs`` (the last of duplicate ids wins) with every side
        effect: refused while the disk is full; into the copy too while an adapt job
        re-indexes the collection (and into the new collection when its swap comes
        between); the token memory learns the pairs; the calibrator counts the writes. Returns
        the rows written and the ids whose text was cut."""
        self.writable()
        if len(docs) > self.limits.max_documents:
            raise TooLargeError(f"{len(docs)} documents in one request; at most "
                                f"{self.limits.max_documents} (QKV_MAX_DOCUMENTS)")
        info = await self.describe(name)  # 404 before any encoding
        check_tenant(info, tenant)  # a ValueError: 422
        if info.passages:
            return await self._upsert_documents(name, info, docs, tenant)
        for again in (False, True):
            model = self.encoder_of(info)  # a conflict when the encoder that made it is gone
            emb = await self.embed([d.text for d in docs], truncate, dim=info.dim, model=model)
            items = [Item(d.id, emb.vectors[i], d.text, d.value, d.metadata, tenant)
                     for i, d in enumerate(docs)]
            try:
                n: int = await self.call(self.store.upsert, name, items,
                                         self.info_for(info.dim, model))
                break
            except (CollectionNotFoundError, EncoderMismatchError):
                # an adapt job moved the name onto its new collection meanwhile: embed again
                # with that one's encoder and write there
                if again or not self.adapter.swapped_lately():
                    raise
                info = await self.describe(name)
        if self.adapter.shadow(info) is not None:  # being re-indexed: its copy too
            await self.call(self.adapter.mirror_upsert, info, items)
        await self._remember(name, info.name, docs, emb.vectors, tenant, model=model)
        self.calibrator.wrote(info, n)  # calibrated in the background once it has grown enough
        return n, [d.id for d, cut in zip(docs, emb.truncated, strict=True) if cut]

    async def _upsert_documents(self, name: str, info: CollectionInfo,
                                docs: Sequence[Document], tenant: str | None
                                ) -> tuple[int, list[str]]:
        """Upsert into a collection with passages (:mod:`index.passages`): each document cut
        into passages, embedded, and written whole (none is cut at the token limit)."""
        settings = long_docs.Settings.of(info.passages)
        assert settings is not None
        changed: list[tuple[list[Item], list[str]]] = []

        def note(rows: list[Item], gone: list[str]) -> None:
            changed[:] = [(rows, gone)]
        for again in (False, True):
            model = self.encoder_of(info)
            enc = self.info_for(info.dim, model)
            count = long_docs.token_counter(model.encoder.tokenizer)
            try:
                planned = await self.run(long_docs.plan, [(d.id, d.text, d.value, d.metadata)
                                                          for d in docs], settings, count, enc)
            except OverflowError as e:
                raise TooLargeError(str(e)) from e
            except ValueError as e:
                raise InvalidError(str(e)) from e
            emb = await self.embed(planned.embed_texts, True, dim=info.dim, model=model)
            try:
                n: int = await self.call(long_docs.commit, self.store, name, planned,
                                         emb.vectors, enc, tenant, note)
                break
            except (CollectionNotFoundError, EncoderMismatchError):
                if again or not self.adapter.swapped_lately():
                    raise
                info = await self.describe(name)
        if self.adapter.shadow(info) is not None and changed:  # being re-indexed: its copy too
            rows, gone = changed[0]
            await self.call(self.adapter.mirror_upsert, info, rows)
            if gone:
                await self.call(self.adapter.mirror_delete, info, gone)
        firsts = np.cumsum([0] + [len(x) for x in planned.passages[:-1]])
        kept = list({d.id: d for d in docs}.values())  # as planned: the last of an id wins
        await self._remember(name, info.name, kept, emb.vectors[firsts], tenant, model=model)
        self.calibrator.wrote(info, n)
        return n, []

    async def upsert_file(self, name: str, filename: str, data: bytes,
                          tenant: str | None = None, doc_id: str | None = None) -> Document:
        """Upsert one document file (text, Markdown, HTML, PDF: its text read as ``qkv
        index`` reads it) as the document ``doc_id`` (default: ``filename``), its metadata
        naming the file and its format. A file without text is invalid."""
        from index.bulk.documents import text_of

        try:
            kind, text = await self.run(text_of, filename, data)
        except ValueError as e:
            raise InvalidError(f"file {filename!r}: {e}", "file") from e
        doc = Document(doc_id or filename, text, None, {"source": filename, "format": kind})
        await self.upsert(name, [doc], tenant)
        return doc

    async def delete(self, name: str, ids: Sequence[str], tenant: str | None = None) -> int:
        """Delete documents by id (the tenant's) with all their passages, from the copy an
        adapt job is making too, and their pairs from the token memory; returns the distinct
        ids asked for."""
        if len(ids) > self.limits.max_documents:
            raise TooLargeError(f"{len(ids)} ids in one request; at most "
                                f"{self.limits.max_documents} (QKV_MAX_DOCUMENTS)")
        info = await self.describe(name)
        rows = list(ids)
        if info.passages:
            rows = await self.call(long_docs.remove, self.store, name, ids, tenant)
        else:
            await self.call(self.store.delete, name, ids, tenant)
        if self.adapter.shadows:  # a collection being re-indexed by an adapt job: its copy too
            await self.call(self.adapter.mirror_delete, info, rows)
        if self.token_memories:  # the deleted pairs' tokens stop voting (the tenant's)
            stored = (await self.describe(name)).name
            await self._remember(name, stored, removed=list(ids), tenant=tenant)
        return len(set(ids))

    async def get(self, name: str, doc_id: str, tenant: str | None = None) -> Item | None:
        """The document ``doc_id`` (the tenant's), whole, or None."""
        info = await self.describe(name)
        if info.passages:
            found = await self.call(long_docs.read, self.store, name, doc_id, tenant)
            return found[0] if found else None
        items: list[Item] = await self.call(self.store.get, name, [doc_id], tenant)
        return items[0] if items else None

    async def _remember(self, collection: str, stored: str, docs: Sequence[Document] = (),
                        vectors: np.ndarray | None = None, tenant: str | None = None,
                        removed: Sequence[str] = (), model: Served | None = None) -> None:
        """Documents just upserted into (``docs``, with their ``vectors``) or deleted from
        (``removed`` ids) a collection with a token memory: upserted pairs' tokens join it,
        deleted ones stop voting, and so do a document's without a value (no pair). A
        decoder that reads neighbours gets each new pair's nearest other pairs, as in
        training. In a multi-tenant collection the memory holds a pair under
        ``tenant:id``, as the store does, so a tenant's writes touch its own pairs only."""
        from wiring.token_memory import remember, trained_retrieval

        memory = self.token_memory_for(collection, stored)
        if memory is None:
            return
        dec = self.decoder_for(collection, stored)
        valued = [d for d in docs if d.value]
        pairs = [(stored_id(tenant, d.id), d.text, d.value or "") for d in valued]
        rows = [i for i, d in enumerate(docs) if d.value]
        removed = [stored_id(tenant, i) for i in (*removed, *(d.id for d in docs
                                                              if not d.value))]
        k, t = trained_retrieval(dec)
        nbrs = None
        if k > 0 and pairs and vectors is not None:
            found = await self.call(self.store.search, collection, vectors[rows], k + 1, None,
                                    self.info_for(vectors.shape[1], model), False, "Session",
                                    None, "dense", DEFAULT_FUSION, self.default_weight, tenant)
            nbrs = []
            for d, hits in zip(valued, found, strict=True):
                kept = [h for h in hits if h.id != d.id][:k]
                w = softmax(np.array([h.score for h in kept], np.float32), t)
                nbrs.append([(h.value or h.text or "", float(x))
                             for h, x in zip(kept, w, strict=True)])
        await self.run(remember, dec, memory, pairs, nbrs, removed)
