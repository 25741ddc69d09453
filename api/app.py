"""``create_app(settings)``: the FastAPI application.

The lifespan loads the encoder (and the configured decoders), opens the store, starts the
dynamic batcher and, on first start, loads the demo corpus and the demo translation memory
(``QKV_DEMO_CORPUS``, ``QKV_DEMO_TM``). A store that is down at start
does not stop the service: ``/ready`` says so and requests answer 503 until it is back.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI
from tqdm import tqdm

from api import errors, routes
from api.errors import ApiError, error_response
from api.metrics import Metrics, MetricsMiddleware
from api.settings import Settings

log = logging.getLogger(__name__)


class BodyLimitMiddleware:
    """413 for a body over ``limit`` bytes, by Content-Length or, for chunked bodies, by
    counting, before any route reads it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > self.limit:
                await self._reject(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True  # chunked: read it all (up to the limit) first
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.limit:
                await self._reject(scope, receive, send)
                return
        body, sent = b"".join(chunks), False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _reject(self, scope: Any, receive: Any, send: Any) -> None:
        err = ApiError(413, "payload_too_large",
                       f"request body over {self.limit} bytes (QKV_MAX_BODY_BYTES)")
        await error_response(err)(scope, receive, send)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file, gzipped when its name ends in ``.gz``."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def seed_demo(svc: Any, corpus: Path, collection: str, batch: int = 2048) -> int:
    """Create ``collection`` from the JSONL ``corpus`` (id, text, optional value, metadata)
    if it does not exist yet: a document corpus, or a translation memory whose ``text`` is
    the source sentence and ``value`` the target the decoder reads. Returns the documents
    written (0 when it already existed).

    Everything is encoded before the collection is created, so a start stopped while
    encoding leaves no collection behind: the next start begins again. A start stopped
    while writing leaves fewer documents than the corpus has: the next start writes them
    all again (upserts by id, so nothing is doubled).
    """
    from index import CollectionNotFoundError, Item, collection_name

    collection = collection_name(collection)
    rows = read_jsonl(corpus)
    try:
        svc.store.describe(collection)
        have = svc.store.count(collection)
        if have >= len(rows):
            return 0
        log.info("the demo collection %r has %d of the %d documents of %s (a first start "
                 "stopped while writing): writing them again", collection, have, len(rows),
                 corpus)
        exists = True
    except CollectionNotFoundError:
        exists = False
        log.info("creating the demo collection %r from %s (%d documents)...", collection,
                 corpus, len(rows))
    with tqdm(total=len(rows), unit="doc", desc=f"encoding {collection}") as bar:
        parts = []
        for start in range(0, len(rows), batch):
            parts.append(svc.encoder.encode([r["text"] for r in rows[start : start + batch]]))
            bar.update(len(parts[-1]))
    x = np.concatenate(parts) if parts else np.zeros((0, svc.info.dim), np.float32)
    items = [Item(str(r["id"]), x[i], r["text"], r.get("value"), r.get("metadata") or {})
             for i, r in enumerate(rows)]
    if not exists:
        svc.store.create(collection, svc.info.dim, svc.info)
    n = 0
    for start in range(0, len(items), 1000):
        n += svc.store.upsert(collection, items[start : start + 1000], svc.info)
    log.info("demo collection %r: %d documents", collection, n)
    return int(n)


# (request schema, field, setting): arrays get it as maxItems, integers as maximum
_LIMITS = (("EmbeddingsRequest", "input", "max_inputs"),
           ("TeiEmbedRequest", "inputs", "max_inputs"),
           ("DocumentsUpsert", "documents", "max_documents"),
           ("DocumentsDelete", "ids", "max_documents"),
           ("SearchRequest", "top_k", "max_top_k"),
           ("GenerateRequest", "top_k", "max_top_k"),
           ("GenerateRequest", "max_tokens", "max_generate_tokens"))


def with_limits(schema: dict[str, Any], settings: Settings) -> None:
    """Write this deployment's limits (``QKV_MAX_*``) into the OpenAPI document, so that
    clients see them; the routes enforce them (413 for batches, 422 for the rest)."""
    models = schema["components"]["schemas"]
    for model, field, name in _LIMITS:
        prop = models[model]["properties"][field]
        for branch in prop.get("anyOf", [prop]):
            if branch.get("type") == "array":
                branch["maxItems"] = getattr(settings, name)
            elif branch.get("type") == "integer":
                branch["maximum"] = getattr(settings, name)


def without_auth(schema: dict[str, Any]) -> None:
    """Drop the bearer security and the 401 responses from an OpenAPI document, for a server
    without ``QKV_API_KEY``: there the key is not needed and never refused, and a document
    that says otherwise makes generated clients demand one."""
    for operations in schema.get("paths", {}).values():
        for op in operations.values():
            op.pop("security", None)
            op.get("responses", {}).pop("401", None)
    schema.get("components", {}).pop("securitySchemes", None)


def create_app(settings: Settings | None = None, banner: str | None = None) -> FastAPI:
    """The app; ``banner`` is printed once the service is ready (after the demo loads)."""
    from api import runtime

    runtime.configure()
    settings = settings or Settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from api.service import Service
        from index import StoreError

        svc = Service(settings, metrics)
        app.state.service = svc
        for corpus, collection in ((settings.demo_corpus, settings.demo_collection),
                                   (settings.demo_tm, settings.demo_tm_collection)):
            if corpus is None:
                continue
            try:
                await svc.run(seed_demo, svc, corpus, collection)
            except StoreError as e:
                log.warning("demo collection %r not created (store: %s); it will be on a "
                            "later start", collection, e)
        if banner:
            print(banner, flush=True)  # noqa: T201 (the command line's own output)
        try:
            yield
        finally:
            svc.close()

    app = FastAPI(
        title="qkv",
        version="0.1.0",
        summary="Retrieval-augmented embedding service: embeddings, collections, search, "
                "soft retrieval (attend) and generation.",
        lifespan=lifespan,
    )
    app.state.settings = settings

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            with_limits(schema, settings)
            if not settings.api_key:
                without_auth(schema)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
    errors.install(app)
    app.include_router(routes.open_routes)
    app.include_router(routes.v1)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
