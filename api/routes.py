"""The HTTP routes of operations, collections, aliases and documents: each parses its
request, makes one call into the wiring's :class:`wiring.collections.Collections` and shapes
the answer (vector-heavy ones serialised with orjson, straight from numpy)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from pydantic import AfterValidator
from starlette.convertors import Convertor, register_url_convertor

from api import schemas as s
from api.access import authorize, bound_tenant, current, may_use, redacted
from api.errors import ApiError, invalid, not_found
from api.service import Service
from index import CollectionInfo, collection_name
from index.scale import size_warning
from index.scroll import MAX_PAGE
from wiring.calibrating import labels_from
from wiring.collections import Document

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


def collection_params(params: dict[str, Any]) -> dict[str, Any] | None:
    """A collection route's path parameters as :data:`CollectionName` makes them (``name``
    checked and mapped by :func:`collection_name`), None where it would refuse them: for
    :class:`api.lean.LeanRoutes`, which leaves those to the route."""
    try:
        return {**params, "name": collection_name(str(params["name"]))}
    except (KeyError, ValueError):
        return None


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


@open_routes.get("/metrics", tags=["operations"], dependencies=[Depends(require_key)],
                 responses={200: {"content": {"text/plain": {}}, "description": "Prometheus"},
                            401: TEI_ERRORS[401], 403: TEI_ERRORS[403]})
async def metrics(request: Request) -> Response:
    """Prometheus metrics; with keys, for an admin key only (they count requests by key
    id)."""
    m = service(request).metrics
    return Response(m.render(), media_type=m.content_type)


# collections
def _collection_out(svc: Service, info: CollectionInfo, aliases: dict[str, str],
                    count: int | None = None) -> dict[str, Any]:
    col = svc.collections
    pointing = sorted(a for a, c in aliases.items() if c == info.name)
    dec = next((svc.decoder_paths[n] for n in (info.name, *pointing) if n in svc.decoder_paths),
               None)
    return {"name": info.name, "dim": info.dim,
            "encoder": info.encoder.to_dict() if info.encoder else None, "count": count,
            "decoder": str(dec) if dec else None, "hybrid": info.hybrid, "aliases": pointing,
            "multi_tenant": info.multi_tenant, "passages": info.passages,
            "calibration": redacted(info, info.calibration),
            "tuning": redacted(info, col.calibration_state(info)), "backend": col.backend,
            # the whole collection's size: a tenant's count says nothing of the backend's load
            "size_warning": size_warning(col.backend, None if info.multi_tenant else count)}


@v1.post("/v1/collections", status_code=201, response_model=s.CollectionOut,
         tags=["collections"])
async def create_collection(body: s.CollectionCreate, request: Request) -> Response:
    """Create a collection for an encoder (``model``: one of GET /v1/models, default the
    service's); an existing name is 409. It is hybrid (a BM25 index of the text beside the
    vectors) unless ``hybrid`` is false or the store has no BM25; ``hybrid: true`` on such a
    store is 409."""
    svc = service(request)
    chunks = ((body.passage_tokens, body.passage_overlap, body.passage_pack) if body.chunking
              else None)
    info = await svc.collections.create(body.name, body.model, body.dimensions, body.hybrid,
                                        body.multi_tenant, chunks)
    return json_response(_collection_out(svc, info, {}, 0), 201)


@v1.get("/v1/collections", response_model=s.CollectionList, tags=["collections"])
async def list_collections(request: Request) -> Response:
    svc = service(request)
    aliases = await svc.collections.aliases()
    key = current.get()  # a key bound to tenants or collections sees its own
    infos = [info for info in await svc.collections.all() if may_use(key, info)]
    # counts too: a multi-tenant collection's is the X-Tenant's, so null in a list
    return json_response({"collections": [
        _collection_out(svc, info, aliases, await svc.collections.count(info))
        for info in infos]})


@v1.get("/v1/collections/{name}", response_model=s.CollectionOut, tags=["collections"])
async def get_collection(name: CollectionName, request: Request,
                         x_tenant: TenantHeader = None) -> Response:
    """Dim, encoder, decoder, aliases and the exact document count (of the X-Tenant's
    documents in a multi-tenant collection; null without one). ``name`` may be an alias:
    the answer is the collection it points at."""
    svc = service(request)
    info = await svc.collections.describe(name)
    count = await svc.collections.count(info, tenant_of(x_tenant, None))
    return json_response(_collection_out(svc, info, await svc.collections.aliases(), count))


@v1.delete("/v1/collections/{name}", response_model=s.Deleted, tags=["collections"])
async def delete_collection(name: CollectionName, request: Request) -> Response:
    """Drop a collection and its documents; an alias, or a collection that aliases point
    at, is 409."""
    await service(request).collections.drop(name)
    return json_response({"deleted": name})


@v1.post("/v1/collections/{name}/tune", response_model=s.TuneState, tags=["collections"],
         responses={202: {"model": s.TuneState, "description": "Tune started."}})
async def tune_collection(name: CollectionName, body: s.TuneRequest, request: Request
                          ) -> Response:
    """Calibrate hybrid search for this collection and store the result with it: from its
    own documents (no labels: pseudo-queries, see ``index.hybrid.calibration``), from judged
    ``labels`` (chosen by nDCG@10), or by hand (``dense_weight``). Runs in the background
    (202; ``GET`` this path or the collection for its state) unless ``wait``. A collection
    without BM25 is 409; labels naming ids it lacks, or an empty collection, 422; a tune of
    it already running, 409."""
    col = service(request).collections
    if body.dense_weight is not None:
        if body.labels is not None:
            raise invalid("give `labels` or `dense_weight`, not both", "dense_weight")
        return json_response(await col.calibrate_by_hand(name, body.dense_weight))
    labels = (labels_from([q.model_dump() for q in body.labels])
              if body.labels is not None else None)
    info, job = await col.start_calibration(name, labels, body.seed)
    if body.wait:
        return json_response(await asyncio.wrap_future(job))
    return json_response(col.calibration_state(info), 202)


@v1.get("/v1/collections/{name}/tune", response_model=s.TuneState, tags=["collections"])
async def tune_state(name: CollectionName, request: Request) -> Response:
    """The collection's last tune job, run by this server or another replica on the same
    store (404 when there was none)."""
    col = service(request).collections
    info = await col.describe(name)
    state = col.calibration_state(info)
    if state is None:
        raise not_found(f"no tune of collection {info.name!r} has run; its stored "
                        "calibration is in GET /v1/collections/{name}")
    return json_response(redacted(info, state))


# aliases
AliasName = Annotated[str, Path(min_length=1, max_length=255, description="Alias name (the "
                                "rules of a collection name).",
                                json_schema_extra={"pattern": s.COLLECTION_NAME_PATTERN}),
                      AfterValidator(collection_name)]


@v1.get("/v1/aliases", response_model=s.AliasList, tags=["collections"])
async def list_aliases(request: Request) -> Response:
    col = service(request).collections
    aliases = await col.aliases()
    key = current.get()
    if key is not None and (key.tenants is not None or key.collections is not None):
        aliases = {a: c for a, c in aliases.items()
                   if may_use(key, await col.describe(c), a)}
    return json_response({"aliases": [{"alias": a, "collection": c}
                                      for a, c in aliases.items()]})


@v1.get("/v1/aliases/{alias}", response_model=s.AliasOut, tags=["collections"])
async def get_alias(alias: AliasName, request: Request) -> Response:
    col = service(request).collections
    aliases = await col.aliases()
    key = current.get()
    bound = key is not None and (key.tenants is not None or key.collections is not None)
    if alias not in aliases or bound and not may_use(  # only its collections' aliases
            key, await col.describe(aliases[alias]), alias):
        raise not_found(f"no alias {alias!r}")
    return json_response({"alias": alias, "collection": aliases[alias]})


@v1.put("/v1/aliases/{alias}", response_model=s.AliasOut, tags=["collections"])
async def set_alias(alias: AliasName, body: s.AliasSet, request: Request) -> Response:
    """Point ``alias`` at a collection, creating the alias or moving it in one step: every
    route takes the alias as a collection name, so clients that use it switch collections
    without a failed request (a zero-downtime re-index: ``qkv index --alias``). Other
    servers on the same store see the move within a second."""
    before = await service(request).collections.set_alias(alias, body.collection)
    return json_response({"alias": alias, "collection": body.collection, "previous": before})


@v1.delete("/v1/aliases/{alias}", response_model=s.Deleted, tags=["collections"])
async def delete_alias(alias: AliasName, request: Request) -> Response:
    await service(request).collections.drop_alias(alias)
    return json_response({"deleted": alias})


# documents
@v1.post("/v1/collections/{name}/documents", response_model=s.UpsertResult, tags=["documents"])
async def upsert_documents(name: CollectionName, body: s.DocumentsUpsert, request: Request,
                           x_tenant: TenantHeader = None) -> Response:
    """Embed and upsert documents (the last of duplicate ids wins). At most
    ``QKV_MAX_DOCUMENTS`` per request (413); 507 while the store's disk is under the flood
    mark (``QKV_DISK_FLOOD_MB``)."""
    svc = service(request)
    docs = [Document(d.id, d.text, d.value, d.metadata) for d in body.documents]
    n, cut = await svc.collections.upsert(name, docs, tenant_of(x_tenant, body.tenant),
                                          body.truncate)
    return json_response({"upserted": n, "truncated": cut})


@v1.post("/v1/collections/{name}/files", response_model=s.FileUpserted, tags=["documents"],
         openapi_extra={"requestBody": {"required": True, "content": {
             "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def upsert_file(name: CollectionName, request: Request,
                      file: Annotated[str, Query(min_length=1, max_length=480, description=(
                          "The file's name: its suffix says how to read it (.txt, .md, "
                          ".html, .htm, .pdf)."))],
                      id: Annotated[str | None, Query(min_length=1, max_length=488,
                                                      description="The document's id "
                                                      "(default: the file's name).")] = None,
                      x_tenant: TenantHeader = None) -> Response:
    """Upsert one document file, sent as the raw body: its text read as ``qkv index`` reads
    a file (HTML's paragraphs and headings kept, a PDF's pages with pypdf), its metadata
    ``source`` (the name) and ``format``. 422 for a file without text."""
    doc = await service(request).collections.upsert_file(
        name, file, await request.body(), tenant_of(x_tenant, None), id)
    return json_response({"id": doc.id, "format": doc.metadata["format"],
                          "characters": len(doc.text)})


@v1.delete("/v1/collections/{name}/documents", response_model=s.DeleteResult,
           tags=["documents"])
async def delete_documents(name: CollectionName, body: s.DocumentsDelete, request: Request,
                           x_tenant: TenantHeader = None) -> Response:
    """Delete documents by ``ids`` (at most ``QKV_MAX_DOCUMENTS``), or every document that
    matches ``filter`` (the tenant's), with all their passages."""
    if (body.ids is None) == (body.filter is None):
        raise invalid("give exactly one of `ids` (the documents) or `filter` (every "
                      "document that matches)", "ids")
    tenant = tenant_of(x_tenant, body.tenant)
    collections = service(request).collections
    if body.ids is not None:
        n = await collections.delete(name, body.ids, tenant)
    else:
        n = await collections.delete_where(name, body.filter or {}, tenant)
    return json_response({"deleted": n})


def _filter_param(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        got = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise invalid(f"filter: invalid JSON ({e}); send it URL-encoded, as a search's "
                      "`filter`", "filter") from None
    if not isinstance(got, dict):
        raise invalid("filter: a JSON object, as a search's `filter`", "filter")
    return got


@v1.get("/v1/collections/{name}/documents", response_model=s.DocumentsPage,
        tags=["documents"])
async def list_documents(
        name: CollectionName, request: Request,
        cursor: Annotated[str | None, Query(max_length=2048, description="`next_cursor` of "
                                            "the page before; none for the first.")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Documents a page.")] = 100,
        filter: Annotated[str | None, Query(max_length=65536, description="A search's "
                                            "filter, as JSON: only the documents that "
                                            "match.")] = None,
        include_vector: Annotated[bool, Query()] = False,
        x_tenant: TenantHeader = None) -> Response:
    """The collection's documents (the tenant's), whole, page by page in id order: pass
    each page's ``next_cursor`` as ``cursor`` until it is null. Each page is read as the
    collection is then (a document written meanwhile ahead of the cursor is seen)."""
    items, next_cursor = await service(request).collections.scroll(
        name, cursor, limit, _filter_param(filter), tenant_of(x_tenant, None))
    return json_response({"documents": [
        {"id": it.id, "text": it.text, "value": it.value, "metadata": it.metadata,
         "vector": it.vector if include_vector else None} for it in items],
        "next_cursor": next_cursor})


class _DocumentId(Convertor[str]):
    """A document id in a path: any characters, ``/`` (a file's path) and control characters
    (a newline, which Starlette's ``path`` leaves out) included."""

    regex = "[\\s\\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("document_id", _DocumentId())


@v1.get("/v1/collections/{name}/documents/{doc_id:document_id}", response_model=s.DocumentOut,
        tags=["documents"])
async def get_document(name: CollectionName, doc_id: str, request: Request,
                       include_vector: Annotated[bool, Query()] = False,
                       x_tenant: TenantHeader = None) -> Response:
    it = await service(request).collections.get(name, doc_id, tenant_of(x_tenant, None))
    if it is None:
        raise not_found(f"no document {doc_id!r} in collection {name!r}")
    return json_response({"id": it.id, "text": it.text, "value": it.value,
                          "metadata": it.metadata,
                          "vector": it.vector if include_vector else None})
