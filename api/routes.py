"""The HTTP routes: translate requests into :class:`api.service.Service` calls and results
into the response shapes (vector-heavy ones serialised with orjson, straight from numpy)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import orjson
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator

from api import schemas as s
from api.errors import ApiError, invalid, not_found, too_large
from api.service import Service
from index import (
    CollectionInfo,
    Hit,
    Item,
    collection_name,
    hybrid_default,
    parse_filter,
    resolve_mode,
    softmax,
)
from index import attend as attend_values

_ERROR_TEXTS = ((401, "Missing or wrong API key"), (404, "Unknown collection or item"),
                (409, "Encoder/dimension mismatch, existing collection, no decoder"),
                (413, "Body or batch over the limits"),
                (422, "Invalid request, or text over the token limit without truncate"),
                (429, "Encoder queue full (see Retry-After)"),
                (503, "Store unreachable (see Retry-After)"))
# the error responses of /v1/* (OpenAI's shape) and of the TEI routes (TEI's)
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": s.OpenAIErrorBody, "description": text} for code, text in _ERROR_TEXTS}
TEI_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": s.ErrorBody, "description": text} for code, text in _ERROR_TEXTS}
# {name} of every collection route: checked, then mapped to the stored name ('-' -> '_')
CollectionName = Annotated[str, Path(min_length=1, max_length=255,
                                     description=s.COLLECTION_NAME_HELP,
                                     json_schema_extra={"pattern": s.COLLECTION_NAME_PATTERN}),
                           AfterValidator(collection_name)]
_bearer = HTTPBearer(auto_error=False, description="QKV_API_KEY, when the server sets one.")


def service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


def require_key(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    key = request.app.state.settings.api_key
    if not key:
        return
    given = credentials.credentials if credentials else ""
    if not secrets.compare_digest(given.encode(), key.encode()):
        raise ApiError(401, "unauthorized",
                       "missing or wrong API key: send 'Authorization: Bearer <key>'",
                       {"WWW-Authenticate": "Bearer"})


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status,
                    media_type="application/json")


open_routes = APIRouter()
v1 = APIRouter(dependencies=[Depends(require_key)], responses=ERRORS)


# operations
@open_routes.get("/health", response_model=s.Health, tags=["operations"])
async def health() -> Response:
    """Liveness: the process answers."""
    return json_response({"status": "ok"})


@open_routes.get("/ready", response_model=s.Health, tags=["operations"],
                 responses={503: {"model": s.ErrorBody, "description": "Not ready"}})
async def ready(request: Request) -> Response:
    """Readiness: the model is loaded and the store answers."""
    ok, detail = await service(request).ready()
    if not ok:
        raise ApiError(503, "not_ready", detail, {"Retry-After": "1"})
    return json_response({"status": "ready", "detail": detail})


@open_routes.get("/metrics", tags=["operations"],
                 responses={200: {"content": {"text/plain": {}}, "description": "Prometheus"}})
async def metrics(request: Request) -> Response:
    m = service(request).metrics
    return Response(m.render(), media_type=m.content_type)


# collections
def _collection_out(svc: Service, info: CollectionInfo, count: int | None = None
                    ) -> dict[str, Any]:
    dec = svc.decoder_paths.get(info.name)
    return {"name": info.name, "dim": info.dim,
            "encoder": info.encoder.to_dict() if info.encoder else None, "count": count,
            "decoder": str(dec) if dec else None, "hybrid": info.hybrid}


@v1.post("/v1/collections", status_code=201, response_model=s.CollectionOut,
         tags=["collections"])
async def create_collection(body: s.CollectionCreate, request: Request) -> Response:
    """Create a collection for the served encoder; an existing name is 409. It is hybrid (a
    BM25 index of the text beside the vectors) unless ``hybrid`` is false or the store has
    no BM25; ``hybrid: true`` on such a store is 409."""
    svc = service(request)
    hybrid = await svc.call(hybrid_default, svc.store, body.name, body.hybrid)
    info = await svc.call(svc.store.create, body.name, svc.info.dim, svc.info, exist_ok=False,
                          hybrid=hybrid)
    return json_response(_collection_out(svc, info, 0), 201)


@v1.get("/v1/collections", response_model=s.CollectionList, tags=["collections"])
async def list_collections(request: Request) -> Response:
    svc = service(request)
    out = []
    for name in await svc.call(svc.store.list_collections):
        info = await svc.call(svc.store.describe, name)
        out.append(_collection_out(svc, info))
    return json_response({"collections": out})


@v1.get("/v1/collections/{name}", response_model=s.CollectionOut, tags=["collections"])
async def get_collection(name: CollectionName, request: Request) -> Response:
    """Dim, encoder, decoder and the exact document count."""
    svc = service(request)
    info = await svc.call(svc.store.describe, name)
    count = await svc.call(svc.store.count, name)
    return json_response(_collection_out(svc, info, count))


@v1.delete("/v1/collections/{name}", response_model=s.Deleted, tags=["collections"])
async def delete_collection(name: CollectionName, request: Request) -> Response:
    svc = service(request)
    await svc.call(svc.store.describe, name)  # 404 when absent
    await svc.call(svc.store.drop, name)
    return json_response({"deleted": name})


# documents
@v1.post("/v1/collections/{name}/documents", response_model=s.UpsertResult, tags=["documents"])
async def upsert_documents(name: CollectionName, body: s.DocumentsUpsert, request: Request
                           ) -> Response:
    """Embed and upsert documents (the last of duplicate ids wins). At most
    ``QKV_MAX_DOCUMENTS`` per request (413)."""
    svc = service(request)
    docs = body.documents
    if len(docs) > svc.settings.max_documents:
        raise too_large(f"{len(docs)} documents in one request; at most "
                        f"{svc.settings.max_documents} (QKV_MAX_DOCUMENTS)")
    await svc.call(svc.store.describe, name)  # 404 before any encoding
    emb = await svc.embed([d.text for d in docs], body.truncate)
    items = [Item(d.id, emb.vectors[i], d.text, d.value, d.metadata) for i, d in enumerate(docs)]
    n = await svc.call(svc.store.upsert, name, items, svc.info)
    cut = [d.id for d, t in zip(docs, emb.truncated, strict=True) if t]
    return json_response({"upserted": n, "truncated": cut})


@v1.delete("/v1/collections/{name}/documents", response_model=s.DeleteResult,
           tags=["documents"])
async def delete_documents(name: CollectionName, body: s.DocumentsDelete, request: Request
                           ) -> Response:
    svc = service(request)
    if len(body.ids) > svc.settings.max_documents:
        raise too_large(f"{len(body.ids)} ids in one request; at most "
                        f"{svc.settings.max_documents} (QKV_MAX_DOCUMENTS)")
    await svc.call(svc.store.delete, name, body.ids)
    return json_response({"deleted": len(set(body.ids))})


@v1.get("/v1/collections/{name}/documents/{doc_id}", response_model=s.DocumentOut,
        tags=["documents"])
async def get_document(name: CollectionName, doc_id: str, request: Request,
                       include_vector: Annotated[bool, Query()] = False) -> Response:
    svc = service(request)
    items = await svc.call(svc.store.get, name, [doc_id])
    if not items:
        raise not_found(f"no document {doc_id!r} in collection {name!r}")
    it = items[0]
    return json_response({"id": it.id, "text": it.text, "value": it.value,
                          "metadata": it.metadata,
                          "vector": it.vector if include_vector else None})


# search, attend, generate
@dataclass
class Neighbours:
    """One query's hits, the query vector, the mode that ran and whether the text was cut."""

    hits: list[Hit]
    xq: np.ndarray
    mode: str
    truncated: bool

    def cosines(self) -> np.ndarray:
        """Each hit's dense similarity to the query: its score in dense mode, else q·key
        (bm25 and hybrid searches fetch the vectors for it)."""
        if self.mode == "dense":
            return np.array([h.score for h in self.hits], np.float32)
        keys = [h.vector for h in self.hits if h.vector is not None]
        assert len(keys) == len(self.hits), "bm25/hybrid searches fetch the vectors"
        return (np.stack(keys) @ self.xq if keys else np.zeros(0)).astype(np.float32)


async def _neighbours(svc: Service, name: str, body: s.SearchRequest, with_vectors: bool
                      ) -> Neighbours:
    if (body.query is None) == (body.vector is None):
        raise invalid("give exactly one of `query` (text) or `vector`")
    filt = parse_filter(body.filter) if body.filter is not None else None
    info = await svc.call(svc.store.describe, name)  # 404 before any encoding
    if body.mode in ("bm25", "hybrid") and body.query is None:
        raise invalid(f"mode {body.mode!r} searches the query's words: give `query` (text), "
                      "or use mode 'dense' with `vector`")
    texts = [body.query] if body.query is not None else None
    mode = resolve_mode(info, body.mode, texts, 1)  # 409 on a collection without BM25
    truncated = False
    if body.query is not None:
        emb = await svc.embed([body.query], body.truncate)
        xq, truncated = emb.vectors[0], emb.truncated[0]
    else:
        with np.errstate(over="ignore"):  # beyond float32: inf, refused by the store (422)
            xq = np.asarray(body.vector, dtype=np.float32)
    hits = await svc.search(name, xq, body.top_k, filt, with_vectors or mode != "dense",
                            body.consistency, texts, mode, body.fusion, body.dense_weight)
    return Neighbours(hits, xq, mode, truncated)


def _hits_out(hits: list[Hit], weights: np.ndarray, fields: Sequence[str]) -> list[dict[str, Any]]:
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


@v1.post("/v1/collections/{name}/search", response_model=s.SearchResponse, tags=["retrieval"])
async def search(name: CollectionName, body: s.SearchRequest, request: Request) -> Response:
    """Neighbours of a text or vector by ``mode`` (dense, bm25 or hybrid), each with the
    sides that found it and its softmax weight over the cosines."""
    svc = service(request)
    nb = await _neighbours(svc, name, body, "vector" in body.fields)
    t = body.temperature or svc.settings.default_temperature
    weights = softmax(nb.cosines(), t)
    return json_response({"hits": _hits_out(nb.hits, weights, body.fields), "temperature": t,
                          "truncated": nb.truncated, "mode": nb.mode})


@v1.post("/v1/collections/{name}/attend", response_model=s.AttendResponse, tags=["retrieval"])
async def attend(name: CollectionName, body: s.SearchRequest, request: Request) -> Response:
    """The query-key-value view: neighbours (chosen by ``mode``; keys = their vectors),
    weights softmax(cosine / T) summing to 1, and the output Σ wᵢ vᵢ."""
    svc = service(request)
    nb = await _neighbours(svc, name, body, True)
    t = body.temperature or svc.settings.default_temperature
    if nb.hits:
        att = attend_values(nb.cosines(), np.stack([h.vector for h in nb.hits
                                             if h.vector is not None]), t)
        weights, output = att.weights, att.output
    else:
        weights, output = np.zeros(0, np.float32), np.zeros(svc.info.dim, np.float32)
    return json_response({"neighbours": _hits_out(nb.hits, weights, body.fields),
                          "weights": weights, "output": output, "temperature": t,
                          "truncated": nb.truncated, "mode": nb.mode})


@v1.post("/v1/collections/{name}/generate", response_model=s.GenerateResponse,
         tags=["retrieval"])
async def generate(name: CollectionName, body: s.GenerateRequest, request: Request
                   ) -> Response:
    """Retrieve ``top_k`` neighbours, weight them, and decode with the collection's decoder
    (each neighbour's value is read with its weight as an attention bias)."""
    svc = service(request)
    await svc.call(svc.store.describe, name)  # 404 first
    dec = svc.decoder_for(name)  # then 409 without a decoder
    if body.max_tokens is not None and body.max_tokens > svc.settings.max_generate_tokens:
        raise invalid(f"max_tokens must be at most {svc.settings.max_generate_tokens}")
    t = body.temperature or svc.settings.default_temperature
    hits: list[Hit] = []
    if body.top_k > 0:
        # dense neighbours, as the decoder was trained with (wiring.translation)
        search_body = s.SearchRequest(query=body.query, top_k=body.top_k, filter=body.filter,
                                      mode="dense")
        nb = await _neighbours(svc, name, search_body, False)
        hits, cosines = nb.hits, nb.cosines()
    else:
        cosines = np.zeros(0, np.float32)
    weights = softmax(cosines, t)
    neighbours = [(h.value or h.text, float(w)) for h, w in zip(hits, weights, strict=True)]
    gen = await svc.run(dec.generate, body.query, neighbours, beam=body.beam,
                        max_tokens=body.max_tokens, return_attention=body.return_attention)
    attention = None
    if body.return_attention and gen.attention is not None:
        attention = {"tokens": gen.tokens, "memory_tokens": gen.memory_tokens,
                     "memory_segments": gen.memory_segments, "weights": gen.attention}
    return json_response({"text": gen.text,
                          "neighbours": _hits_out(hits, weights, ["text", "value", "metadata"]),
                          "weights": weights, "attention": attention})
