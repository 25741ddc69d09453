"""Hot routes answered past FastAPI's routing, dependency and body machinery.

:class:`LeanRoutes` is a pure ASGI layer, innermost of the app's middleware (inside
:class:`api.edge.EdgeMiddleware`: the request id, metrics, body limit and audit). A
``POST`` to one of its paths whose body is JSON (by its content type, as FastAPI reads
one) and validates against the route's model (and whose path parameters pass the route's
checks) is answered here: the key checked by the same :func:`api.access.authorize`, with
the route's own object in the scope (the key's scope, the audit line and the metrics' route
template are the route's), the answer made by the same function the route calls, and a
failure answered by the app's own exception handlers. A body that does not parse, or is not
sent as JSON, or a path parameter that does not pass, goes to the route with the bytes
already read, so its 422 is the route's, word for word; every other request goes to the
app unchanged.

Under wrk's 32 connections, one sentence a request, FastAPI's machinery was half of the
event loop's CPU a request on ``POST /v1/embeddings`` (0.25 against 0.12 ms: 0.40 and 0.25 of
a core at 1,614 and 2,014 requests/s, the route alone and this; ``bench/api_load.py`` at
``b6aa032``, Intel Xeon, 2 cores), and an event loop slow to answer kept the encoder's
workers waiting for texts.
``QKV_LEAN_EMBEDDINGS=false`` serves every request through the routes alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ValidationError

from api.access import authorize, bearer


@dataclass(frozen=True)
class Hot:
    """A route answered lean: where it is declared, its path (a template such as
    ``/v1/collections/{name}/search`` matched as the route matches it), its body's model,
    the function that answers a parsed body (what the route calls) and, for a template,
    ``params``: its path parameters as the route's validation makes them, or None where
    they would not pass (the route answers those, with its own 422)."""

    router: APIRouter
    path: str
    body: type[BaseModel]
    # (the service, the body, the request: its path_params those ``params`` made)
    answer: Callable[[Any, Any, Request], Awaitable[Response]]
    params: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None

    def route(self) -> Any:
        """The route's own object, as FastAPI puts it in the scope."""
        route = next((r for r in self.router.routes if getattr(r, "path", None) == self.path
                      and "POST" in getattr(r, "methods", ())), None)
        if route is None:
            raise ValueError(f"no POST {self.path} route on its router")
        return route


def body_only(answer: Callable[[Any, Any], Awaitable[Response]]
              ) -> Callable[[Any, Any, Request], Awaitable[Response]]:
    """An answer of (the service, the body) as :class:`Hot` calls one."""
    async def call(svc: Any, body: Any, request: Request) -> Response:
        return await answer(svc, body)
    return call


class LeanRoutes:
    """See the module docstring."""

    def __init__(self, app: Any, routes: Sequence[Hot], enabled: bool = True) -> None:
        self.app, self.enabled = app, enabled
        self.hot = {h.path: (h, h.route()) for h in routes if "{" not in h.path}
        self.templates = [(h, h.route()) for h in routes if "{" in h.path]

    def _match(self, path: str) -> tuple[Hot, Any, dict[str, Any]] | None:
        """The hot route of ``path`` with its path parameters (validated), if any."""
        if path in self.hot:
            return (*self.hot[path], {})
        for spec, route in self.templates:
            if (m := route.path_regex.match(path)) is not None:
                raw = {k: route.param_convertors[k].convert(v) for k, v in m.groupdict().items()}
                params = spec.params(raw) if spec.params is not None else raw
                return None if params is None else (spec, route, params)
        return None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        hot = (self._match(scope["path"]) if self.enabled and scope["type"] == "http"
               and scope["method"] == "POST" else None)
        if hot is None:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        last: dict[str, Any] | None = None
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: the app's to see
                last = message
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return last or {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        spec, route, params = hot
        body = None if last is not None else _parsed(scope, raw, spec.body)
        if body is None:
            await self.app(scope, replay, send)
            return
        scope["route"], scope["endpoint"] = route, route.endpoint
        scope["path_params"] = {**scope.get("path_params", {}), **params}
        request = Request(scope, replay)
        try:
            await authorize(request, await bearer(request))
            response = await spec.answer(request.app.state.service, body, request)
        except Exception as e:
            handler = _handler(scope["app"], e)
            if handler is None:  # the server error layer's, as from the route
                raise
            response = handler(request, e)
            if inspect.isawaitable(response):  # Starlette takes plain functions too
                response = await response
        await response(scope, replay, send)


def _parsed(scope: Any, raw: bytes, model: type[BaseModel]) -> BaseModel | None:
    """The request body, when it is JSON (by its content type, as FastAPI reads one) and
    valid; None sends it to the route."""
    ctype = next((v for k, v in scope["headers"] if k == b"content-type"), None)
    if ctype is not None:
        kind = ctype.split(b";", 1)[0].strip().lower()
        if not (kind == b"application/json" or (kind.startswith(b"application/")
                                                and kind.endswith(b"+json"))):
            return None
    try:
        return model.model_validate_json(raw)
    except ValidationError:
        return None


def _handler(app: Any, e: Exception) -> Any:
    """The app's handler for ``e`` as Starlette's exception layer finds it (by the class's
    MRO), leaving bare ``Exception`` to the server error layer outside."""
    handlers = app.exception_handlers
    return next((handlers[c] for c in type(e).__mro__
                 if c in handlers and c is not Exception), None)
