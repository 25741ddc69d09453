"""Searches (one or a batch), attend and generate: planned, encoded together, sent to the
store one search per group of like requests, paged and cut (see
:mod:`wiring.collections`)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import numpy as np

from decoder.knn import KnnMixer, KnnOptions, votes
from index import (
    CollectionInfo,
    CollectionNotFoundError,
    EncoderInfo,
    EncoderMismatchError,
    Hit,
    Mix,
    parse_filter,
    resolve_mode,
    softmax,
)
from index import attend as attend_values
from index import passages as long_docs
from index.hybrid.relevance import (
    Relevance,
    coverage,
    distinct_terms,
    model_relevance,
    spread,
)
from index.store import as_matrix  # the store's own checks: 409 wrong dim, 422 not finite
from index.tenancy import check_tenant
from wiring.collections.base import Base
from wiring.collections.requests import (
    Attended,
    Generated,
    Generation,
    KnnAsk,
    Neighbours,
    Plan,
    Search,
)
from wiring.encoders import Served
from wiring.errors import ConflictError, InvalidError, TooLargeError


def reads_neighbours(dec: Any) -> bool:
    """Whether the decoder reads retrieved neighbours: unless its training record says it
    was trained without them (k = 0); a checkpoint without one (an untrained test
    decoder) reads them."""
    training = dec.meta.get("training")
    return not training or int(training.get("k", 0)) > 0


class Searching(Base):
    """The read side of :class:`wiring.collections.Collections`."""

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

    def _plan(self, info: CollectionInfo, s: Search, where: str) -> Plan:
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
            if s.rerank is not None:
                if s.query is None:
                    raise ValueError("rerank reads the query's text beside each hit's: give "
                                     "`query` (text), not `vector`")
                if s.rerank > lim.max_top_k:
                    raise ValueError(f"rerank.top must be at most {lim.max_top_k} "
                                     f"(QKV_MAX_TOP_K), got {s.rerank}")
                if s.rerank < s.offset + s.top_k:
                    raise ValueError(f"rerank.top ({s.rerank}) must be at least offset + top_k "
                                     f"({s.offset + s.top_k}): the hits returned are reranked "
                                     "ones")
        except ValueError as e:
            raise InvalidError(f"{where}{e}") from e
        if s.rerank is not None and self.rerank is None:
            raise ConflictError(f"{where}this server has no reranker: start it with "
                                "QKV_RERANKER=DIR (a checkpoint of `qkv train-reranker`), or "
                                "search without `rerank`")
        return Plan(s, filt, mode, max(s.offset + s.top_k, s.rerank or 0))

    async def _search(self, name: str, searches: Sequence[Search], with_vectors: bool,
                      labels: Sequence[str] | None) -> list[Neighbours]:
        info = await self.describe(name)
        name = info.name  # an alias's collection, the same one for every search
        plans = [self._plan(info, s, labels[i] if labels else "")
                 for i, s in enumerate(searches)]
        model = self.encoder_of(info)  # a conflict when the encoder that made it is gone
        # The queries are encoded meanwhile: a search with a BM25 side starts it at once and
        # waits for its vectors in the store's thread (index.steps.search)
        encoding = asyncio.ensure_future(self._query_vectors(info, model, searches))
        ready: Future[np.ndarray] = Future()
        encoding.add_done_callback(functools.partial(_hand_over, ready))
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, p in enumerate(plans):
            s = p.search
            key = (json.dumps(s.filter, sort_keys=True), p.depth, p.mode, s.consistency,
                   s.fusion, s.dense_weight, s.tenant)
            groups.setdefault(key, []).append(i)
        found: list[list[Hit]] = [[] for _ in searches]
        mixes: list[Mix | None] = [None] * len(searches)  # each query's, from its fusion
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
                x: Any = (functools.partial(_rows_of, ready, todo)
                          if texts is not None and not encoding.done()
                          else (await encoding)[0][todo])
                res = await self.call(
                    self._store_search, info, name, [searches[i] for i in todo], x,
                    depth, p, self.info_for(info.dim, model), with_vectors, texts,
                    weights[rows[0]][0])
                deeper = []
                for i, (hits, shaped) in zip(todo, res, strict=True):
                    if len(shaped) < p.depth and len(hits) >= depth and depth < cap:
                        deeper.append(i)
                        continue
                    found[i], mixes[i] = shaped, hits[0].mix if hits else None
                todo, depth = deeper, min(cap, depth * 4)
        xq, cut = await encoding
        spreads = await self._spreads(model, plans, found)
        out = []
        for i, p in enumerate(plans):
            s = p.search
            # reranked: every hit of the plan's depth is a candidate, paged once reordered
            hits = found[i][s.offset:p.depth] if s.rerank is None else found[i][:p.depth]
            if p.mode == "hybrid":
                hits = self._with_relevance(model, hits, xq[i], s.query or "", spreads[i])
            threshold = s.score_threshold
            if threshold is not None:  # on the relevance in hybrid, the score otherwise
                hits = [h for h in hits
                        if (h.score if h.relevance is None else h.relevance) >= threshold]
            if s.rerank is not None:
                hits = (await self._reranked(s.query or "", hits, p.mode)
                        )[s.offset:s.offset + s.top_k]
            out.append(Neighbours(hits, xq[i], p.mode, cut[i],
                                  weights[i] if p.mode == "hybrid" else None,
                                  mixes[i] if p.mode == "hybrid" else None))
        return out

    async def _query_vectors(self, info: CollectionInfo, model: Served,
                             searches: Sequence[Search]) -> tuple[np.ndarray, list[bool]]:
        """The searches' query vectors (their texts encoded, one encoder call per truncate
        setting; their vectors checked) and which texts were cut."""
        xq = np.zeros((len(searches), info.dim), np.float32)
        cut = [False] * len(searches)
        for truncate in (True, False):
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
        return xq, cut

    async def _reranked(self, query: str, hits: list[Hit], mode: str) -> list[Hit]:
        """``hits`` reordered by the reranker's score of the query with each one's text
        (a passage's: a document's best), which becomes its ``score`` and is added to its
        ``sources`` (``rerank``) beside the first stage's sides. Ties keep the first
        stage's order."""
        if not hits:
            return hits
        assert self.rerank is not None
        scores = await self.rerank(query, [h.text or "" for h in hits])
        out = []
        for j in np.argsort(-scores, kind="stable"):
            h, x = hits[int(j)], float(scores[int(j)])
            out.append(replace(h, score=x, sources={**(h.sources or {mode: h.score}),
                                                    "rerank": x}))
        return out

    def _relevance_of(self, model: Served) -> Relevance:
        rel = self._relevance.get(model.path)
        if rel is None:
            rel = self._relevance[model.path] = model_relevance(model.path)
        return rel

    async def _spreads(self, model: Served, plans: Sequence[Plan], found: list[list[Hit]]
                       ) -> list[float]:
        """Each search's query spread (:func:`index.hybrid.relevance.spread`: how evenly
        the encoder pools it) where its relevance asks for it: a hybrid search whose terms
        were scattered over the BM25 side's best texts (all its hits say so), under an
        encoder whose fit holds such queries back; 0 for the others. The texts asking are
        encoded together, once, outside the batcher."""
        asking = [i for i, p in enumerate(plans)
                  if p.mode == "hybrid" and found[i] and found[i][0].scattered]
        out = [0.0] * len(plans)
        if not asking or self._relevance_of(model).spread_max >= 1.0:
            return out
        texts = [plans[i].search.query or "" for i in asking]  # cut as they were encoded
        weights = await self.aside(texts, model.encoder.pooling_weights, texts)
        for i, w in zip(asking, weights, strict=True):
            out[i] = spread(w)
        return out

    def _with_relevance(self, model: Served, hits: list[Hit], xq: np.ndarray, query: str,
                        query_spread: float = 0.0) -> list[Hit]:
        """Hybrid hits with their relevance (:mod:`index.hybrid.relevance`): from how far
        each hit's cosine (its dense score, else q·key: hybrid searches fetch the keys)
        stands above the query's floor, how many of the query's terms its text has, and the
        query's spread where its terms were scattered, on the scale of the collection's
        encoder."""
        rel = self._relevance_of(model)
        distinct = distinct_terms(query)
        out = []
        for h in hits:
            cos = (h.sources or {}).get("dense")
            if cos is None:
                cos = float(h.vector @ xq) if h.vector is not None else -1.0
            floor = h.floor if h.floor is not None else cos
            out.append(replace(h, relevance=rel.hit(cos, floor, coverage(distinct, h.text),
                                                    query_spread)))
        return out

    def _store_search(self, info: CollectionInfo, name: str, searches: Sequence[Search],
                      xq: np.ndarray, depth: int, p: Plan, enc: EncoderInfo,
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


def _hand_over(ready: Future[np.ndarray], encoding: asyncio.Future[Any]) -> None:
    """The encoded queries (or why not) to the store's thread waiting on ``ready``."""
    if encoding.cancelled():
        ready.set_exception(asyncio.CancelledError())
    elif (e := encoding.exception()) is not None:
        ready.set_exception(e)
    else:
        ready.set_result(encoding.result()[0])


def _rows_of(ready: Future[np.ndarray], rows: list[int]) -> np.ndarray:
    """Those rows of the query vectors, once encoded (called in the store's thread)."""
    return ready.result()[rows]
