"""The one ASGI layer of ours that every HTTP request passes, in and out: its request id, its
latency in the metrics, the body limit and the audit line.

Outside it, Starlette's and FastAPI's own layers (the server-error one answers 500 for an
exception nothing handled); inside it, :class:`api.lean.LeanRoutes` and the routes. In
order:

1. **Request id**: the caller's ``X-Request-Id`` when it is a plain token, else a new one
   (:func:`api.errors.request_id_of`), in ``request.state.request_id`` and answered in
   ``X-Request-Id`` on every answer, a 413 of this layer's included; a 5xx names it.
2. **Metrics**: the request's latency under its route template
   (:meth:`api.metrics.Metrics.observe_request`), whatever it answered, a 413 included (as
   ``unmatched``: no route saw it).
3. **Body limit**: 413 for a body over ``limit`` bytes, by Content-Length or, for a chunked
   body, by counting it (read whole, then given to the app), before any route reads it.
4. **Audit**: after a call that :func:`api.access.authorize` marked, one line to
   ``qkv.audit`` (:func:`api.access.write_audit`), with the count of documents or ids its
   body named; ``OPTIONS`` is never audited.

These were four layers of their own, each a coroutine the request went through and, for
three, a wrapper its answer went back through. ``POST /v1/embeddings`` under wrk's 32
connections (AVX2-only AMD EPYC, 2 cores, throwaway scripts, in turns): with none of the
four 984-993 requests/s against 942-956 with them (three rounds: what they cost at most);
this layer against the four, eight rounds: 986 against 959 requests/s on the mean (+3 %),
inside the machine's spread from run to run (887-1,065); the event loop's CPU a request in
process (``bench/api_overhead.py``) 126-143 against 132-146 us. One layer is kept for being
one: less code on every request's path, not for a speed that was measured.
"""

from __future__ import annotations

import time
from typing import Any

from api.access import write_audit
from api.errors import ApiError, error_response, request_id_of
from api.metrics import Metrics

# A write's body is copied for its audit line up to this size (the count of its documents)
AUDIT_COPY_MAX = 2**24


class EdgeMiddleware:
    """See the module docstring."""

    def __init__(self, app: Any, metrics: Metrics, limit: int) -> None:
        self.app, self.metrics, self.limit = app, metrics, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        headers = dict(scope.get("headers") or [])
        rid = request_id_of(headers.get(b"x-request-id", b""))
        scope.setdefault("state", {})["request_id"] = rid
        status = [500]

        async def send_out(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", rid.encode())]
            await send(message)

        try:
            limited = await self._limited(headers.get(b"content-length"), receive)
            if limited is None:
                await self._reject(scope, receive, send_out)
                return
            await self._audited(scope, limited, send_out, status)
        finally:
            self.metrics.observe_request(scope, status[0], time.perf_counter() - t0)

    async def _limited(self, length: bytes | None, receive: Any) -> Any:
        """``receive`` for the app, or None where the body is over the limit: with a
        Content-Length, ``receive`` itself; a chunked body is read whole first (up to the
        limit) and given to the app as one message."""
        if length is not None:
            return None if length.isdigit() and int(length) > self.limit else receive
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.limit:
                return None
        body, sent = b"".join(chunks), False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay

    async def _reject(self, scope: Any, receive: Any, send: Any) -> None:
        err = ApiError(413, "payload_too_large",
                       f"request body over {self.limit} bytes (QKV_MAX_BODY_BYTES)")
        await error_response(err, scope.get("path", ""))(scope, receive, send)

    async def _audited(self, scope: Any, receive: Any, send: Any, status: list[int]) -> None:
        """The app, and the audit line after it where :func:`api.access.authorize` asked
        for one (a copy of the body kept for it: the documents it names are counted)."""
        method = scope["method"]
        if method == "OPTIONS":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        copy = method not in ("GET", "HEAD")

        async def receive_copy() -> Any:
            message = await receive()
            if copy and message["type"] == "http.request" and len(body) < AUDIT_COPY_MAX:
                body.extend(message.get("body", b""))
            return message

        try:
            await self.app(scope, receive_copy, send)
        finally:
            write_audit(scope, status[0], bytes(body))
