"""``create_app(settings)``: the FastAPI application.

The lifespan builds the :class:`api.service.Service` (the encoder, the store and the
configured decoders, loaded by :mod:`wiring.components`; the dynamic batcher) and, on first
start, seeds the demo corpus and the demo translation memory (``QKV_DEMO_CORPUS``,
``QKV_DEMO_TM``; :mod:`wiring.demo`): the collections are created before the first
request and filled in the background while ``/ready`` shows how far. A store that is down
at start does not stop the service: ``/ready`` says so and requests answer 503 until it is
back.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from api import (
    adapt_routes,
    backup_routes,
    embedding_routes,
    errors,
    key_routes,
    retrieval_routes,
    routes,
    tei_routes,
    web,
)
from api.edge import EdgeMiddleware
from api.errors import public_text
from api.keys import KeyRing, default_keys_file
from api.lean import LeanRoutes
from api.metrics import Metrics
from api.settings import Settings
from index import collection_name
from wiring import memory

log = logging.getLogger(__name__)


def _telemetry() -> dict[str, Any]:
    """FastAPI's OpenTelemetry spans and metrics (FastAPI 0.16x), on only where OpenTelemetry
    is configured from the environment (``OTEL_*``, or FastAPI's ``FASTAPI_OTEL_*``): else
    FastAPI asks the global providers on every request whether one was set, which cost POST
    /v1/embeddings 228 against 215 us of event-loop CPU (in-process rounds alternating,
    2 cores, not recorded). Nothing for a FastAPI without it."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    on = any(k.startswith(("OTEL_", "FASTAPI_OTEL_")) for k in os.environ)
    return {"telemetry": {"tracing": on, "metrics": on, "logs": on}}


# (request schema, field, setting): arrays get it as maxItems, integers as maximum
_LIMITS = (("EmbeddingsRequest", "input", "max_inputs"),
           ("TeiEmbedRequest", "inputs", "max_inputs"),
           ("DocumentsUpsert", "documents", "max_documents"),
           ("DocumentsDelete", "ids", "max_documents"),
           ("SearchRequest", "top_k", "max_top_k"),
           ("SearchRequest", "offset", "max_offset"),
           ("SearchBatchRequest", "searches", "max_searches"),
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
    """Drop the bearer security and the 401/403 responses from an OpenAPI document, for a
    server without keys (``QKV_API_KEY``, a keys file): none is needed or refused, and a document
    that says otherwise makes generated clients demand one."""
    for operations in schema.get("paths", {}).values():
        for op in operations.values():
            op.pop("security", None)
            for status in ("401", "403"):
                op.get("responses", {}).pop(status, None)
    schema.get("components", {}).pop("securitySchemes", None)


async def fill_demos(svc: Any, plans: list[Any], stop: threading.Event,
                     token_memory: Any = None) -> None:
    """Fill the prepared demo collections one after the other, off the event loop (the
    encoder shares the cores with requests meanwhile), then give the translation memory
    its token memory (``token_memory``: its :class:`wiring.demo.Seeding`); a failure is
    logged and shown by ``/ready``, and the next start tries again."""
    from wiring.demo import demo_token_memory, fill_demo

    for plan in plans:
        try:
            await fill_demo(svc.collections, plan, stop=stop)
        except Exception as e:  # a background task: say it, never lose it
            plan.progress.state, plan.progress.error = "failed", public_text(e)
            log.exception("demo collection %r not filled; the next start tries again",
                          plan.collection)
        if plan.progress.state == "complete" and not stop.is_set():
            svc.calibrator.filled(plan.collection)  # its hybrid calibrated, if not yet
    settings = svc.settings
    if token_memory is None:
        return
    tm = next((p for p in plans if p.collection == token_memory.collection), None)
    if stop.is_set() or tm is None or tm.progress.state != "complete":
        token_memory.state = "stopped" if stop.is_set() else "failed"
        token_memory.error = None if stop.is_set() else "the collection was not filled"
        return
    try:
        await svc.run(demo_token_memory, svc.parts, settings.demo_tm_collection,
                      settings.demo_token_memory, token_memory, stop, settings.store)
    except Exception as e:
        token_memory.state, token_memory.error = "failed", public_text(e)
        log.exception("the demo token memory was not built; the next start tries again")


def demo_tokens(svc: Any, settings: Settings) -> Any:
    """The progress of the demo translation memory's token memory, or None when there is
    none to give it (no setting, no decoder, or one configured in ``token_memories``)."""
    from wiring.demo import Seeding

    stored = collection_name(settings.demo_tm_collection)
    if (settings.demo_tm is None or settings.demo_token_memory is None
            or stored not in svc.parts.decoders or stored in svc.parts.token_memories):
        return None
    return Seeding(stored, kind="token memory")


def create_app(settings: Settings | None = None, banner: str | None = None) -> FastAPI:
    """The app; ``banner`` is printed once the service is ready (after the demo loads)."""
    from wiring import runtime

    runtime.configure()
    settings = settings or Settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from api.service import Service
        from index import StoreError
        from wiring.demo import prepare_demo

        svc = Service(settings, metrics)
        app.state.service = svc
        plans = []
        for corpus, collection in ((settings.demo_corpus, settings.demo_collection),
                                   (settings.demo_tm, settings.demo_tm_collection)):
            if corpus is None:
                continue
            try:  # quick: the collections exist (perhaps empty) before the first request
                plans.append(await svc.run(prepare_demo, svc.parts, corpus, collection))
            except StoreError as e:
                log.warning("demo collection %r not created (store: %s); it will be on a "
                            "later start", collection, e)
        svc.seeding = {p.collection: p.progress for p in plans}
        tokens = demo_tokens(svc, settings)
        if tokens is not None:
            svc.seeding[f"{tokens.collection} token memory"] = tokens
        stop = threading.Event()
        filler = asyncio.create_task(fill_demos(svc, plans, stop, tokens))
        if banner:
            filling = ("\nqkv: the demo collections are being filled in the background "
                       "(GET /ready shows how far; their searches say so meanwhile)"
                       if any(not p.progress.done for p in plans) else "")
            print(banner + filling, flush=True)  # noqa: T201 (the command line's own output)
        memory.freeze_heap()  # what startup made lives as long as the app (wiring.memory)
        try:
            yield
        finally:
            memory.thaw_heap()
            stop.set()  # the filler stops between batches; the next start completes it
            await filler
            svc.close()

    app = FastAPI(
        title="qkv",
        version="0.1.0",
        summary="Retrieval-augmented embedding service: embeddings, collections, search, "
                "soft retrieval (attend) and generation.",
        lifespan=lifespan,
        **_telemetry(),
    )
    app.state.settings = settings
    # a malformed keys file stops the start here
    app.state.keys = KeyRing(settings.keys_file or default_keys_file(settings.store),
                             settings.api_key, settings.keys_empty_opens)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            with_limits(schema, settings)
            if app.state.keys.open:
                without_auth(schema)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
    errors.install(app)
    app.include_router(routes.open_routes)
    app.include_router(embedding_routes.embedding_v1)
    app.include_router(routes.v1)
    app.include_router(retrieval_routes.retrieval_v1)
    app.include_router(key_routes.keys_v1)
    app.include_router(adapt_routes.adapt_v1)
    app.include_router(backup_routes.backups_v1)
    app.include_router(tei_routes.tei)
    app.include_router(web.web)
    app.add_middleware(LeanRoutes, routes=[*embedding_routes.HOT, *tei_routes.HOT,
                                           *retrieval_routes.HOT],
                       enabled=settings.lean_embeddings)  # innermost
    # request id, metrics, body limit and audit in one layer (api.edge)
    app.add_middleware(EdgeMiddleware, metrics=metrics, limit=settings.max_body_bytes)
    return app
