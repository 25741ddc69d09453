"""The retrieval routes: search (one or a batch), attend and generate. Each parses its
request (and the caller's tenant), makes one call into the wiring's collections
(:class:`wiring.collections.Collections`: it plans, encodes and searches) and shapes the
answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from fastapi import APIRouter, Depends, Request, Response

from api import schemas as s
from api.errors import ApiError, invalid
from api.lean import Hot
from api.routes import (
    ERRORS,
    CollectionName,
    TenantHeader,
    collection_params,
    json_response,
    require_key,
    service,
    tenant_of,
)
from api.service import Service
from decoder.knn import KnnOptions
from index import Hit, softmax
from wiring.collections import Generation, KnnAsk, Neighbours, Search

retrieval_v1 = APIRouter(dependencies=[Depends(require_key)], responses=ERRORS)


def search_of(body: s.SearchRequest, x_tenant: str | None, where: str = "") -> Search:
    """The wiring's :class:`Search` of a request, with the caller's tenant (a key bound to
    tenants decides it: 403 for another; ``where`` names the search of a batch)."""
    try:
        tenant = tenant_of(x_tenant, body.tenant)
    except ApiError as e:
        if e.status == 403:  # the key's tenants: stays a 403
            e.message = f"{where}{e.message}"
            raise
        raise invalid(f"{where}{e.message}") from e
    return Search(query=body.query, vector=body.vector, top_k=body.top_k, offset=body.offset,
                  filter=body.filter, mode=body.mode, fusion=body.fusion,
                  dense_weight=body.dense_weight, consistency=body.consistency,
                  score_threshold=body.score_threshold, truncate=body.truncate, tenant=tenant,
                  group_by_document=body.group_by_document,
                  rerank=body.rerank.top if body.rerank is not None else None)


def hits_out(hits: list[Hit], weights: np.ndarray, fields: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for h, w in zip(hits, weights, strict=True):
        d: dict[str, Any] = {"id": h.id, "score": h.score, "weight": float(w),
                             "sources": h.sources or {"dense": h.score}}
        if h.relevance is not None:
            d["relevance"] = h.relevance
        if "text" in fields:
            d["text"] = h.text
        if "value" in fields:
            d["value"] = h.value
        if "metadata" in fields:
            d["metadata"] = h.metadata
        if "vector" in fields and h.vector is not None:
            d["vector"] = h.vector
        if h.passages is not None and "passages" in fields:
            d["passages"] = (h.passages if "text" in fields else
                             [{k: v for k, v in p.items() if k != "text"} for p in h.passages])
        out.append(d)
    return out


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
    if nb.mix is not None:
        out["query_weight"] = float(nb.mix.weight)
        if nb.mix.dense is not None and nb.mix.bm25 is not None:
            out["confidence"] = {"dense": float(nb.mix.dense), "bm25": float(nb.mix.bm25)}
    return with_seeding(svc, name, out)


@retrieval_v1.post("/v1/collections/{name}/search", response_model=s.SearchResponse,
                   tags=["retrieval"])
async def search(name: CollectionName, body: s.SearchRequest, request: Request,
                 x_tenant: TenantHeader = None) -> Response:
    """Neighbours of a text or vector by ``mode`` (dense, bm25 or hybrid), each with the
    sides that found it and its softmax weight over the cosines."""
    return await search_answer(service(request), name, body, x_tenant)


async def search_answer(svc: Service, name: str, body: s.SearchRequest,
                        x_tenant: str | None) -> Response:
    """``POST /v1/collections/{name}/search``'s answer to a request that parsed (and whose
    key passed), for the route and for :class:`api.lean.LeanRoutes` alike."""
    (nb,) = await svc.collections.search(name, [search_of(body, x_tenant)],
                                         "vector" in body.fields)
    return json_response(_search_out(svc, name, body, nb))


# answered past FastAPI's routing when the body and the name parse (api.lean): at 522,000
# documents in Lite, dense p50 5.51-5.79 -> 5.45-5.52 ms (throwaway, in turns, Intel Xeon)
def _from_request(answer: Callable[[Service, str, s.SearchRequest, str | None],
                                   Awaitable[Response]]
                  ) -> Callable[[Service, s.SearchRequest, Request], Awaitable[Response]]:
    """``answer`` as :class:`api.lean.Hot` calls it: the collection's name from the path
    (checked and mapped by :func:`api.routes.collection_params`), the tenant from its
    header."""
    async def call(svc: Service, body: s.SearchRequest, request: Request) -> Response:
        return await answer(svc, request.path_params["name"], body,
                            request.headers.get("x-tenant"))
    return call


HOT = [Hot(retrieval_v1, "/v1/collections/{name}/search", s.SearchRequest,
           _from_request(search_answer), params=collection_params)]


@retrieval_v1.post("/v1/collections/{name}/search/batch", response_model=s.SearchBatchResponse,
                   tags=["retrieval"])
async def search_batch(name: CollectionName, body: s.SearchBatchRequest, request: Request,
                       x_tenant: TenantHeader = None) -> Response:
    """Several searches of one collection in one request (at most ``QKV_MAX_SEARCHES``,
    413 above), answered in order; a bad one is a 422 naming it (``searches.N``)."""
    svc = service(request)
    many = len(body.searches) > 1
    labels = [f"searches.{i}: " if many else "" for i in range(len(body.searches))]
    found = await svc.collections.search(
        name, [search_of(b, x_tenant, w) for b, w in zip(body.searches, labels, strict=True)],
        any("vector" in b.fields for b in body.searches), labels)
    return json_response({"results": [_search_out(svc, name, b, nb)
                                      for b, nb in zip(body.searches, found, strict=True)]})


@retrieval_v1.post("/v1/collections/{name}/attend", response_model=s.AttendResponse,
                   tags=["retrieval"])
async def attend(name: CollectionName, body: s.SearchRequest, request: Request,
                 x_tenant: TenantHeader = None) -> Response:
    """The query-key-value view: neighbours (chosen by ``mode``; keys = their vectors),
    weights softmax(cosine / T) summing to 1, and the output Σ wᵢ vᵢ."""
    svc = service(request)
    a = await svc.collections.attend(name, search_of(body, x_tenant), body.temperature)
    nb = a.neighbours
    return json_response(with_seeding(svc, name, {
        "neighbours": hits_out(nb.hits, a.weights, body.fields), "weights": a.weights,
        "output": a.output, "temperature": a.temperature, "truncated": nb.truncated,
        "mode": nb.mode}))


@retrieval_v1.post("/v1/collections/{name}/generate", response_model=s.GenerateResponse,
                   tags=["retrieval"])
async def generate(name: CollectionName, body: s.GenerateRequest, request: Request,
                   x_tenant: TenantHeader = None) -> Response:
    """Retrieve ``top_k`` neighbours, weight them, and decode with the collection's decoder
    (a decoder trained with neighbours reads each one's value with its weight as an
    attention bias; one trained without them reads none), mixing in the votes of the
    collection's token memory when it has one."""
    svc = service(request)
    k = body.knn
    knn = None if k is None else KnnAsk(
        k.enabled, KnnOptions(k=k.k, temperature=k.temperature, lam=k.lambda_,
                              adaptive=k.adaptive, reach=k.reach), k.return_votes)
    g = await svc.collections.generate(name, Generation(
        query=body.query, top_k=body.top_k, filter=body.filter, temperature=body.temperature,
        beam=body.beam, max_tokens=body.max_tokens, return_attention=body.return_attention,
        knn=knn, tenant=tenant_of(x_tenant, body.tenant)))
    return json_response(with_seeding(svc, name, {
        "text": g.text, "neighbours": hits_out(g.hits, g.weights, ["text", "value", "metadata",
                                                                 "passages"]),
        "weights": g.weights, "attention": g.attention, "knn": g.knn}))
