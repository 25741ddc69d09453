"""The retrieval routes: search (one or a batch), attend and generate.

Every search goes through :func:`neighbours`: it checks each request, encodes the texts of
all of them together, and sends the store one search per group of requests that differ
only in their query (same filter, depth, mode, fusion, consistency), then pages
(``offset``) and cuts (``score_threshold``) each request's hits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from fastapi import APIRouter, Depends, Request, Response

from api import schemas as s
from api.errors import ApiError, conflict, invalid, too_large
from api.routes import (
    ERRORS,
    CollectionName,
    TenantHeader,
    json_response,
    require_key,
    service,
    tenant_of,
)
from api.service import Service
from decoder.knn import KnnMixer, KnnOptions, votes
from index import (
    CollectionInfo,
    CollectionNotFoundError,
    EncoderMismatchError,
    Filter,
    Hit,
    parse_filter,
    resolve_mode,
    softmax,
)
from index import attend as attend_values
from index.store import as_matrix  # the store's own checks: 409 wrong dim, 422 not finite
from index.tenancy import check_tenant

retrieval_v1 = APIRouter(dependencies=[Depends(require_key)], responses=ERRORS)


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
class _Plan:
    """One checked search request: its filter, the mode to run and how deep to search."""

    body: s.SearchRequest
    filter: Filter | None
    mode: str
    depth: int
    tenant: str | None


def _plan(svc: Service, info: CollectionInfo, body: s.SearchRequest, where: str,
          x_tenant: str | None) -> _Plan:
    """Check one request (``where`` names it in a batch) before anything is encoded."""
    try:
        tenant = tenant_of(x_tenant, body.tenant)
        check_tenant(info, tenant)
        if (body.query is None) == (body.vector is None):
            raise ValueError("give exactly one of `query` (text) or `vector`")
        if body.top_k > svc.settings.max_top_k:
            raise ValueError(f"top_k must be at most {svc.settings.max_top_k}, got {body.top_k}")
        if body.offset > svc.settings.max_offset:
            raise ValueError(f"offset must be at most {svc.settings.max_offset} "
                             f"(QKV_MAX_OFFSET), got {body.offset}")
        filt = parse_filter(body.filter) if body.filter is not None else None
        if body.mode in ("bm25", "hybrid") and body.query is None:
            raise ValueError(f"mode {body.mode!r} searches the query's words: give `query` "
                             "(text), or use mode 'dense' with `vector`")
        texts = [body.query] if body.query is not None else None
        mode = resolve_mode(info, body.mode, texts, 1)  # 409 on a collection without BM25
    except (ValueError, ApiError) as e:
        if isinstance(e, ApiError) and e.status == 403:  # the key's tenants: stays a 403
            e.message = f"{where}{e.message}"
            raise
        raise invalid(f"{where}{getattr(e, 'message', e)}") from e
    return _Plan(body, filt, mode, body.offset + body.top_k, tenant)


async def neighbours(svc: Service, name: str, bodies: Sequence[s.SearchRequest],
                     with_vectors: bool, x_tenant: str | None = None) -> list[Neighbours]:
    """:func:`_neighbours`, once more where an adapt job moved ``name`` onto its new
    collection between the lookup and the search (the old one gone, or made by another
    encoder): a search during the swap answers from the new one instead of failing."""
    try:
        return await _neighbours(svc, name, bodies, with_vectors, x_tenant)
    except (CollectionNotFoundError, EncoderMismatchError):
        if not svc.adapter.swapped_lately():
            raise
        return await _neighbours(svc, name, bodies, with_vectors, x_tenant)


async def _neighbours(svc: Service, name: str, bodies: Sequence[s.SearchRequest],
                      with_vectors: bool, x_tenant: str | None = None) -> list[Neighbours]:
    """Each request's neighbours (see the module docstring); 404 before any encoding."""
    info = await svc.call(svc.store.describe, name)
    name = info.name  # an alias's collection, the same one for every search of the request
    many = len(bodies) > 1
    plans = [_plan(svc, info, b, f"searches.{i}: " if many else "", x_tenant)
             for i, b in enumerate(bodies)]
    model = svc.encoder_of(info)  # 409 when the encoder that made it is gone
    xq = np.zeros((len(bodies), info.dim), np.float32)
    cut = [False] * len(bodies)
    for truncate in (True, False):  # one encoder call per truncate setting
        asked = [i for i, b in enumerate(bodies) if b.query is not None and b.truncate == truncate]
        if asked:
            emb = await svc.embed([bodies[i].query or "" for i in asked], truncate,
                                  dim=info.dim, model=model)
            for j, i in enumerate(asked):
                xq[i], cut[i] = emb.vectors[j], emb.truncated[j]
    for i, b in enumerate(bodies):
        if b.vector is not None:
            with np.errstate(over="ignore"):  # beyond float32: inf, refused here (422)
                xq[i] = as_matrix(np.asarray(b.vector, dtype=np.float32), info.dim)[0]
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, p in enumerate(plans):
        b = p.body
        key = (orjson.dumps(b.filter, option=orjson.OPT_SORT_KEYS), p.depth, p.mode,
               b.consistency, b.fusion, b.dense_weight, p.tenant)
        groups.setdefault(key, []).append(i)
    found: list[list[Hit]] = [[] for _ in bodies]
    weights = [svc.hybrid_weight(info, b.dense_weight) for b in bodies]
    for rows in groups.values():
        p = plans[rows[0]]
        texts = [bodies[i].query or "" for i in rows] if p.mode != "dense" else None
        res = await svc.search_many(name, xq[rows], p.depth, p.filter,
                                    with_vectors or p.mode != "dense", p.body.consistency,
                                    texts, p.mode, p.body.fusion, weights[rows[0]][0],
                                    p.tenant, model)
        for i, hits in zip(rows, res, strict=True):
            found[i] = hits
    out = []
    for i, p in enumerate(plans):
        hits = found[i][p.body.offset:p.depth]
        if p.body.score_threshold is not None:
            hits = [h for h in hits if h.score >= p.body.score_threshold]
        out.append(Neighbours(hits, xq[i], p.mode, cut[i],
                              weights[i] if p.mode == "hybrid" else None))
    return out


def hits_out(hits: list[Hit], weights: np.ndarray, fields: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for h, w in zip(hits, weights, strict=True):
        d: dict[str, Any] = {"id": h.id, "score": h.score, "weight": float(w),
                             "sources": h.sources or {"dense": h.score}}
        if "text" in fields:
            d["text"] = h.text
        if "value" in fields:
            d["value"] = h.value
        if "metadata" in fields:
            d["metadata"] = h.metadata
        if "vector" in fields and h.vector is not None:
            d["vector"] = h.vector
        out.append(d)
    return out


def reads_neighbours(dec: Any) -> bool:
    """Whether the decoder reads retrieved neighbours: unless its training record says it
    was trained without them (k = 0); a checkpoint without one (an untrained test
    decoder) reads them."""
    training = dec.meta.get("training")
    return not training or int(training.get("k", 0)) > 0


def with_seeding(svc: Service, name: str, out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with ``seeding`` while ``name`` is a demo collection still being filled."""
    seeding = svc.seeding_of(name)
    if seeding is not None:
        out["seeding"] = seeding
    return out


def _search_out(svc: Service, name: str, body: s.SearchRequest, nb: Neighbours
                ) -> dict[str, Any]:
    t = body.temperature or svc.settings.default_temperature
    weights = softmax(nb.cosines(), t)
    out = {"hits": hits_out(nb.hits, weights, body.fields), "temperature": t,
           "truncated": nb.truncated, "mode": nb.mode}
    if nb.weight is not None:
        out["dense_weight"], out["weight_source"] = nb.weight
    return with_seeding(svc, name, out)


@retrieval_v1.post("/v1/collections/{name}/search", response_model=s.SearchResponse,
                   tags=["retrieval"])
async def search(name: CollectionName, body: s.SearchRequest, request: Request,
                 x_tenant: TenantHeader = None) -> Response:
    """Neighbours of a text or vector by ``mode`` (dense, bm25 or hybrid), each with the
    sides that found it and its softmax weight over the cosines."""
    svc = service(request)
    (nb,) = await neighbours(svc, name, [body], "vector" in body.fields, x_tenant)
    return json_response(_search_out(svc, name, body, nb))


@retrieval_v1.post("/v1/collections/{name}/search/batch", response_model=s.SearchBatchResponse,
                   tags=["retrieval"])
async def search_batch(name: CollectionName, body: s.SearchBatchRequest, request: Request,
                       x_tenant: TenantHeader = None) -> Response:
    """Several searches of one collection in one request (at most ``QKV_MAX_SEARCHES``,
    413 above), answered in order; a bad one is a 422 naming it (``searches.N``)."""
    svc = service(request)
    if len(body.searches) > svc.settings.max_searches:
        raise too_large(f"{len(body.searches)} searches in one request; at most "
                        f"{svc.settings.max_searches} (QKV_MAX_SEARCHES)")
    found = await neighbours(svc, name, body.searches,
                             any("vector" in b.fields for b in body.searches), x_tenant)
    return json_response({"results": [_search_out(svc, name, b, nb)
                                      for b, nb in zip(body.searches, found, strict=True)]})


@retrieval_v1.post("/v1/collections/{name}/attend", response_model=s.AttendResponse,
                   tags=["retrieval"])
async def attend(name: CollectionName, body: s.SearchRequest, request: Request,
                 x_tenant: TenantHeader = None) -> Response:
    """The query-key-value view: neighbours (chosen by ``mode``; keys = their vectors),
    weights softmax(cosine / T) summing to 1, and the output Σ wᵢ vᵢ."""
    svc = service(request)
    (nb,) = await neighbours(svc, name, [body], True, x_tenant)
    t = body.temperature or svc.settings.default_temperature
    if nb.hits:
        att = attend_values(nb.cosines(), np.stack([h.vector for h in nb.hits
                                                    if h.vector is not None]), t)
        weights, output = att.weights, att.output
    else:
        weights, output = np.zeros(0, np.float32), np.zeros(len(nb.xq), np.float32)
    return json_response(with_seeding(svc, name, {
        "neighbours": hits_out(nb.hits, weights, body.fields), "weights": weights,
        "output": output, "temperature": t, "truncated": nb.truncated, "mode": nb.mode}))


@retrieval_v1.post("/v1/collections/{name}/generate", response_model=s.GenerateResponse,
                   tags=["retrieval"])
async def generate(name: CollectionName, body: s.GenerateRequest, request: Request,
                   x_tenant: TenantHeader = None) -> Response:
    """Retrieve ``top_k`` neighbours, weight them, and decode with the collection's decoder
    (a decoder trained with neighbours reads each one's value with its weight as an
    attention bias; one trained without them reads none), mixing in the votes of the
    collection's token memory when it has one."""
    svc = service(request)
    info = await svc.call(svc.store.describe, name)  # 404 first
    dec = svc.decoder_for(name, info.name)  # then 409 without a decoder
    if body.max_tokens is not None and body.max_tokens > svc.settings.max_generate_tokens:
        raise invalid(f"max_tokens must be at most {svc.settings.max_generate_tokens}")
    t = body.temperature or svc.settings.default_temperature
    try:  # checked here too: with top_k 0 no search checks it, and the token memory reads it
        tenant = tenant_of(x_tenant, body.tenant)
        check_tenant(info, tenant)
    except ValueError as e:
        raise invalid(str(e), "tenant") from e
    hits: list[Hit] = []
    if body.top_k > 0:
        # dense neighbours, as the decoder was trained with (wiring.translation)
        search_body = s.SearchRequest(query=body.query, top_k=body.top_k, filter=body.filter,
                                      mode="dense", tenant=body.tenant)
        (nb,) = await neighbours(svc, name, [search_body], False, x_tenant)
        hits, cosines = nb.hits, nb.cosines()
    else:
        cosines = np.zeros(0, np.float32)
    weights = softmax(cosines, t)
    # a decoder trained without neighbours (k = 0, the shipped one) reads none: they are
    # returned, and its retrieval is the token memory's
    neighbours_read = [(h.value or h.text, float(w)) for h, w in zip(hits, weights, strict=True)
                       if reads_neighbours(dec)]
    memory, options = knn_for(svc, name, info.name, body.knn)
    mix = (KnnMixer(memory, options, tenant) if memory is not None and options is not None
           else None)
    gen = await svc.run(dec.generate, body.query, neighbours_read, beam=body.beam,
                        max_tokens=body.max_tokens, return_attention=body.return_attention,
                        mix=mix)
    attention = None
    if body.return_attention and gen.attention is not None:
        attention = {"tokens": gen.tokens, "memory_tokens": gen.memory_tokens,
                     "memory_segments": gen.memory_segments, "weights": gen.attention}
    knn_out: dict[str, Any] | None = None
    if mix is not None and options is not None:
        knn_out = {"keys": mix.memory.keys_of(tenant),
                   "mean_lambda": round(mix.lam_sum / max(1, mix.steps), 4)}
        if body.knn is not None and body.knn.return_votes:
            knn_out["tokens"] = await svc.run(votes, dec, body.query, neighbours_read, gen.ids,
                                              mix.memory, options, tenant=tenant)
    return json_response(with_seeding(svc, name, {
        "text": gen.text, "neighbours": hits_out(hits, weights, ["text", "value", "metadata"]),
        "weights": weights, "attention": attention, "knn": knn_out}))


def knn_for(svc: Service, name: str, stored: str, req: s.KnnRequest | None
            ) -> tuple[Any, KnnOptions | None]:
    """The collection's token memory and the options to use it with: by default when it
    has one; ``{"enabled": false}`` turns it off; asking for it without one is a 409."""
    memory = svc.token_memory_for(name, stored)
    if req is not None and not req.enabled:
        return None, None
    if memory is None:
        if req is not None:
            raise conflict(f"collection {name!r} has no token memory (build one with qkv "
                           "build-token-memory and give it with QKV_TOKEN_MEMORIES); send "
                           '"knn": {"enabled": false} or leave knn out')
        return None, None
    if req is None:
        return memory, KnnOptions()
    return memory, KnnOptions(k=req.k, temperature=req.temperature, lam=req.lambda_,
                              adaptive=req.adaptive, reach=req.reach)
