"""One error shape for every failure: ``{"error": message, "error_type": type}``.

Domain errors (the index package's, the batcher's) map to their HTTP status here, in one
table; routes raise :class:`ApiError` for everything else. Validation errors are 422 with
the same shape (and the field paths in the message), never FastAPI's default body.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from index import (
    CollectionExistsError,
    CollectionNotFoundError,
    EncoderMismatchError,
    StoreError,
    StoreUnavailableError,
    UnsupportedError,
)

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1  # what 429 and 503 tell the client to wait, in seconds


class ApiError(Exception):
    """An error with its HTTP status and ``error_type``."""

    def __init__(self, status: int, error_type: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message
        self.headers = headers or {}


class QueueFullError(ApiError):
    """The encoder's queue is full: 429 with Retry-After."""

    def __init__(self, message: str) -> None:
        super().__init__(429, "rate_limited", message, {"Retry-After": str(RETRY_AFTER_S)})


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found", message)


def conflict(message: str) -> ApiError:
    return ApiError(409, "conflict", message)


def too_large(message: str) -> ApiError:
    return ApiError(413, "payload_too_large", message)


def invalid(message: str) -> ApiError:
    return ApiError(422, "invalid_request", message)


def from_exception(e: Exception) -> ApiError:
    """The API error for a domain exception (the order matters: subclasses first)."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, CollectionNotFoundError):
        return not_found(str(e))
    if isinstance(e, CollectionExistsError | EncoderMismatchError | UnsupportedError):
        return conflict(str(e))
    if isinstance(e, StoreUnavailableError):
        return ApiError(503, "store_unavailable", str(e), {"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(e, StoreError):
        return ApiError(502, "store_error", str(e))
    if isinstance(e, ValueError):
        return invalid(str(e))
    log.exception("unhandled error", exc_info=e)
    return ApiError(500, "internal_error", f"internal error: {type(e).__name__}")


def error_response(err: ApiError) -> Response:
    return Response(orjson.dumps({"error": err.message, "error_type": err.error_type}),
                    status_code=err.status, headers=err.headers, media_type="application/json")


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
_HTTP_TYPES = {400: "bad_request", 401: "unauthorized", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type"}


def _validation_message(errors: list[Any]) -> str:
    parts = []
    for e in errors[:10]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{loc or 'body'}: {e.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    return "; ".join(parts) + more


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves on this path: Starlette's own 405 names only those of
    the first route that matched the path (``GET`` of ``/v1/collections/{name}``, say, not
    its ``DELETE``). Asks each route whether it would take the request with that method."""
    routes = request.app.router.routes
    return [method for method in _METHODS
            if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
                   for route in routes)]


def install(app: FastAPI) -> None:
    """Register the handlers that turn every failure into the one shape."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError) -> Response:
        return error_response(e)

    @app.exception_handler(StoreError)
    async def _store(_: Request, e: StoreError) -> Response:
        return error_response(from_exception(e))

    @app.exception_handler(ValueError)
    async def _value(_: Request, e: ValueError) -> Response:
        return error_response(from_exception(e))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> Response:
        return error_response(invalid(_validation_message(list(e.errors()))))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> Response:
        headers = dict(e.headers or {})
        if e.status_code == 400:  # a body FastAPI could not read (not UTF-8): bad input, 422
            return error_response(invalid(f"unreadable request body: {e.detail}"))
        if e.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return error_response(ApiError(e.status_code, _HTTP_TYPES.get(e.status_code, "error"),
                                       str(e.detail), headers))

    @app.exception_handler(Exception)
    async def _other(_: Request, e: Exception) -> Response:
        return error_response(from_exception(e))
