"""The HTTP routes: translate requests into :class:`api.service.Service` calls and results
into the response shapes (vector-heavy ones serialised with orjson, straight from numpy)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from pydantic import AfterValidator

from api import schemas as s
from api import tune_schemas as ts
from api.access import authorize, bound_tenant, current, may_use, redacted
from api.errors import ApiError, conflict, invalid, not_found, too_large
from api.service import Service
from index import (
    CollectionInfo,
    CollectionNotFoundError,
    EncoderMismatchError,
    Item,
    collection_name,
    hybrid_default,
)
from index.scale import backend, size_warning
from index.tenancy import check_tenant
from wiring.tuning import labels_from, manual

_ERROR_TEXTS = ((401, "Missing, unknown or revoked API key"),
                (403, "The key's scope, tenants or collections do not allow it"),
                (404, "Unknown collection or item"),
                (409, "Encoder/dimension mismatch, existing collection, no decoder"),
                (413, "Body or batch over the limits"),
                (422, "Invalid request, or text over the token limit without truncate"),
                (429, "Encoder queue full, or the key over its limit (see Retry-After)"),
                (502, "The store failed (the answer names the request id of the log line)"),
                (503, "Store unreachable (see Retry-After)"),
                (507, "The store's disk is under the flood mark: writes refused (Retry-After)"))
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


def service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


require_key = authorize  # every /v1, TEI and web route: the key, its scope and grants


TenantHeader = Annotated[str | None, Header(alias="X-Tenant", description="The tenant, in a "
                                           "multi-tenant collection (or `tenant` in the body).")]


def tenant_of(header: str | None, body: str | None) -> str | None:
    """The request's tenant: the X-Tenant header or the body's ``tenant`` (422 if both are
    given and differ); a key bound to tenants decides within them (api.access)."""
    if header is not None and body is not None and header != body:
        raise invalid(f"the X-Tenant header ({header!r}) and `tenant` ({body!r}) differ",
                      "tenant")
    return bound_tenant(body if body is not None else header)


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
    """Readiness: the model is loaded and the store answers. On a first start the demo
    collections exist from the start and are filled in the background: ``seeding`` says
    how far."""
    svc = service(request)
    ok, detail = await svc.ready()
    if not ok:
        raise ApiError(503, "not_ready", detail, {"Retry-After": "1"})
    out: dict[str, Any] = {"status": "ready", "detail": detail}
    if svc.seeding:
        out["seeding"] = [p.to_dict() for p in svc.seeding.values()]
    return json_response(out)


@open_routes.get("/metrics", tags=["operations"],
                 responses={200: {"content": {"text/plain": {}}, "description": "Prometheus"}})
async def metrics(request: Request) -> Response:
    m = service(request).metrics
    return Response(m.render(), media_type=m.content_type)


# collections
def _collection_out(svc: Service, info: CollectionInfo, aliases: dict[str, str],
                    count: int | None = None) -> dict[str, Any]:
    pointing = sorted(a for a, c in aliases.items() if c == info.name)
    dec = next((svc.decoder_paths[n] for n in (info.name, *pointing) if n in svc.decoder_paths),
               None)
    return {"name": info.name, "dim": info.dim,
            "encoder": info.encoder.to_dict() if info.encoder else None, "count": count,
            "decoder": str(dec) if dec else None, "hybrid": info.hybrid, "aliases": pointing,
            "multi_tenant": info.multi_tenant, "calibration": redacted(info, info.calibration),
            "tuning": redacted(info, svc.tuner.state(info.name)), "backend": backend(svc.store),
            # the whole collection's size: a tenant's count says nothing of the backend's load
            "size_warning": size_warning(backend(svc.store), None if info.multi_tenant
                                         else count)}


@v1.post("/v1/collections", status_code=201, response_model=s.CollectionOut,
         tags=["collections"])
async def create_collection(body: s.CollectionCreate, request: Request) -> Response:
    """Create a collection for an encoder (``model``: one of GET /v1/models, default the
    service's); an existing name is 409. It is hybrid (a BM25 index of the text beside the
    vectors) unless ``hybrid`` is false or the store has no BM25; ``hybrid: true`` on such a
    store is 409."""
    svc = service(request)
    svc.disk.check()
    model = await svc.run(svc.encoders.get, body.model)  # 404 for a model it lacks
    dims = model.encoder.dims
    dim = model.info.dim if body.dimensions is None else body.dimensions
    if dim not in dims:
        raise invalid(f"dimensions must be one of {', '.join(map(str, dims))} for "
                      f"{model.name!r} (the sizes it was trained to be cut to), got {dim}")
    hybrid = await svc.call(hybrid_default, svc.store, body.name, body.hybrid)
    info = await svc.call(svc.store.create, body.name, dim, svc.info_for(dim, model),
                          exist_ok=False, hybrid=hybrid, multi_tenant=body.multi_tenant)
    return json_response(_collection_out(svc, info, {}, 0), 201)


@v1.get("/v1/collections", response_model=s.CollectionList, tags=["collections"])
async def list_collections(request: Request) -> Response:
    svc = service(request)
    out = []
    aliases = await svc.call(svc.store.list_aliases)
    key = current.get()
    for name in await svc.call(svc.store.list_collections):
        info = await svc.call(svc.store.describe, name)
        if may_use(key, info):  # a key bound to tenants or collections sees its own
            out.append(_collection_out(svc, info, aliases))
    return json_response({"collections": out})


@v1.get("/v1/collections/{name}", response_model=s.CollectionOut, tags=["collections"])
async def get_collection(name: CollectionName, request: Request,
                         x_tenant: TenantHeader = None) -> Response:
    """Dim, encoder, decoder, aliases and the exact document count (of the X-Tenant's
    documents in a multi-tenant collection; null without one). ``name`` may be an alias:
    the answer is the collection it points at."""
    svc = service(request)
    info = await svc.call(svc.store.describe, name)
    tenant = tenant_of(x_tenant, None)
    count = (await svc.call(svc.store.count, info.name, tenant)
             if tenant is not None or not info.multi_tenant else None)
    aliases = await svc.call(svc.store.list_aliases)
    return json_response(_collection_out(svc, info, aliases, count))


@v1.delete("/v1/collections/{name}", response_model=s.Deleted, tags=["collections"])
async def delete_collection(name: CollectionName, request: Request) -> Response:
    """Drop a collection and its documents; an alias, or a collection that aliases point
    at, is 409."""
    svc = service(request)
    await svc.call(svc.store.describe, name)  # 404 when absent
    await svc.call(svc.store.drop, name)
    return json_response({"deleted": name})


@v1.post("/v1/collections/{name}/tune", response_model=ts.TuneState, tags=["collections"],
         responses={202: {"model": ts.TuneState, "description": "Tune started."}})
async def tune_collection(name: CollectionName, body: ts.TuneRequest, request: Request
                          ) -> Response:
    """Calibrate hybrid search for this collection and store the result with it: from its
    own documents (no labels: pseudo-queries, see ``index.calibration``), from judged
    ``labels`` (chosen by nDCG@10), or by hand (``dense_weight``). Runs in the background
    (202; ``GET`` this path or the collection for its state) unless ``wait``. A collection
    without BM25 is 409; labels naming ids it lacks, or an empty collection, 422; a tune of
    it already running, 409."""
    svc = service(request)
    svc.disk.check()
    info = await svc.call(svc.store.describe, name)
    if body.dense_weight is not None:
        if body.labels is not None:
            raise invalid("give `labels` or `dense_weight`, not both", "dense_weight")
        cal = await svc.call(manual, svc.store, info.name, body.dense_weight)
        return json_response({"collection": info.name, "state": "done",
                              "reason": "set by hand", "calibration": cal.to_dict()})
    labels = (labels_from([q.model_dump() for q in body.labels])
              if body.labels is not None else None)
    await svc.call(svc.tuner.check, info, labels)
    if svc.tuner.running(info.name):  # checked and started with no await between
        raise conflict(f"a tune of collection {info.name!r} is already running")
    job = svc.tuner.start(info, labels, body.seed)
    if body.wait:
        return json_response(await asyncio.wrap_future(job))
    return json_response(svc.tuner.state(info.name), 202)


@v1.get("/v1/collections/{name}/tune", response_model=ts.TuneState, tags=["collections"])
async def tune_state(name: CollectionName, request: Request) -> Response:
    """This server's last tune job of the collection (404 when there was none)."""
    svc = service(request)
    info = await svc.call(svc.store.describe, name)
    state = svc.tuner.state(info.name)
    if state is None:
        raise not_found(f"no tune of collection {info.name!r} has run on this server; its "
                        "stored calibration is in GET /v1/collections/{name}")
    return json_response(redacted(info, state))


# aliases
AliasName = Annotated[str, Path(min_length=1, max_length=255, description="Alias name (the "
                                "rules of a collection name).",
                                json_schema_extra={"pattern": s.COLLECTION_NAME_PATTERN}),
                      AfterValidator(collection_name)]


@v1.get("/v1/aliases", response_model=s.AliasList, tags=["collections"])
async def list_aliases(request: Request) -> Response:
    svc = service(request)
    aliases = await svc.call(svc.store.list_aliases)
    key = current.get()
    if key is not None and (key.tenants is not None or key.collections is not None):
        aliases = {a: c for a, c in aliases.items()
                   if may_use(key, await svc.call(svc.store.describe, c), a)}
    return json_response({"aliases": [{"alias": a, "collection": c}
                                      for a, c in aliases.items()]})


@v1.get("/v1/aliases/{alias}", response_model=s.AliasOut, tags=["collections"])
async def get_alias(alias: AliasName, request: Request) -> Response:
    svc = service(request)
    aliases = await svc.call(svc.store.list_aliases)
    key = current.get()
    bound = key is not None and (key.tenants is not None or key.collections is not None)
    if alias not in aliases or bound and not may_use(  # only its collections' aliases
            key, await svc.call(svc.store.describe, aliases[alias]), alias):
        raise not_found(f"no alias {alias!r}")
    return json_response({"alias": alias, "collection": aliases[alias]})


@v1.put("/v1/aliases/{alias}", response_model=s.AliasOut, tags=["collections"])
async def set_alias(alias: AliasName, body: s.AliasSet, request: Request) -> Response:
    """Point ``alias`` at a collection, creating the alias or moving it in one step: every
    route takes the alias as a collection name, so clients that use it switch collections
    without a failed request (a zero-downtime re-index: ``qkv index --alias``). Other
    servers on the same store see the move within a second."""
    svc = service(request)
    svc.disk.check()
    before = await svc.call(svc.store.set_alias, alias, body.collection)
    return json_response({"alias": alias, "collection": body.collection, "previous": before})


@v1.delete("/v1/aliases/{alias}", response_model=s.Deleted, tags=["collections"])
async def delete_alias(alias: AliasName, request: Request) -> Response:
    svc = service(request)
    await svc.call(svc.store.drop_alias, alias)
    return json_response({"deleted": alias})


# documents
@v1.post("/v1/collections/{name}/documents", response_model=s.UpsertResult, tags=["documents"])
async def upsert_documents(name: CollectionName, body: s.DocumentsUpsert, request: Request,
                           x_tenant: TenantHeader = None) -> Response:
    """Embed and upsert documents (the last of duplicate ids wins). At most
    ``QKV_MAX_DOCUMENTS`` per request (413); 507 while the store's disk is under the flood
    mark (``QKV_DISK_FLOOD_MB``)."""
    svc = service(request)
    svc.disk.check()
    docs = body.documents
    if len(docs) > svc.settings.max_documents:
        raise too_large(f"{len(docs)} documents in one request; at most "
                        f"{svc.settings.max_documents} (QKV_MAX_DOCUMENTS)")
    info = await svc.call(svc.store.describe, name)  # 404 before any encoding
    tenant = tenant_of(x_tenant, body.tenant)
    check_tenant(info, tenant)  # and 422 for the tenant
    for again in (False, True):
        model = svc.encoder_of(info)  # 409 when the encoder that made it is gone
        emb = await svc.embed([d.text for d in docs], body.truncate, dim=info.dim, model=model)
        items = [Item(d.id, emb.vectors[i], d.text, d.value, d.metadata, tenant)
                 for i, d in enumerate(docs)]
        try:
            n = await svc.call(svc.store.upsert, name, items, svc.info_for(info.dim, model))
            break
        except (CollectionNotFoundError, EncoderMismatchError):
            # an adapt job moved the name onto its new collection meanwhile: embed again
            # with that one's encoder and write there
            if again or not svc.adapter.swapped_lately():
                raise
            info = await svc.call(svc.store.describe, name)
    if svc.adapter.shadow(info) is not None:  # being re-indexed by an adapt job: its copy too
        await svc.call(svc.adapter.mirror_upsert, info, items)
    await svc.remember(name, info.name, docs, emb.vectors, tenant)
    svc.tuner.wrote(info, n)  # tuned in the background once it has grown enough
    cut = [d.id for d, t in zip(docs, emb.truncated, strict=True) if t]
    return json_response({"upserted": n, "truncated": cut})


@v1.delete("/v1/collections/{name}/documents", response_model=s.DeleteResult,
           tags=["documents"])
async def delete_documents(name: CollectionName, body: s.DocumentsDelete, request: Request,
                           x_tenant: TenantHeader = None) -> Response:
    svc = service(request)
    if len(body.ids) > svc.settings.max_documents:
        raise too_large(f"{len(body.ids)} ids in one request; at most "
                        f"{svc.settings.max_documents} (QKV_MAX_DOCUMENTS)")
    tenant = tenant_of(x_tenant, body.tenant)
    await svc.call(svc.store.delete, name, body.ids, tenant)
    if svc.adapter.shadows:  # a collection being re-indexed by an adapt job: its copy too
        info = await svc.call(svc.store.describe, name)
        await svc.call(svc.adapter.mirror_delete, info, list(body.ids))
    if svc.parts.token_memories:  # the deleted pairs' tokens stop voting (the tenant's)
        stored = (await svc.call(svc.store.describe, name)).name
        await svc.remember(name, stored, removed=list(body.ids), tenant=tenant)
    return json_response({"deleted": len(set(body.ids))})


@v1.get("/v1/collections/{name}/documents/{doc_id}", response_model=s.DocumentOut,
        tags=["documents"])
async def get_document(name: CollectionName, doc_id: str, request: Request,
                       include_vector: Annotated[bool, Query()] = False,
                       x_tenant: TenantHeader = None) -> Response:
    svc = service(request)
    items = await svc.call(svc.store.get, name, [doc_id], tenant_of(x_tenant, None))
    if not items:
        raise not_found(f"no document {doc_id!r} in collection {name!r}")
    it = items[0]
    return json_response({"id": it.id, "text": it.text, "value": it.value,
                          "metadata": it.metadata,
                          "vector": it.vector if include_vector else None})
