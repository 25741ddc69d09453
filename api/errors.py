"""Every failure in the shape its clients read: OpenAI's on ``/v1/*``
(``{"error": {"message", "type", "param", "code"}}``, so OpenAI SDKs show the reason) and
Text Embeddings Inference's elsewhere (``{"error": message, "error_type": type}``).

Domain errors (the index package's, the wiring's, the batcher's) map to their HTTP status
here, in one table; routes raise :class:`ApiError` for everything else. Validation errors are 422 in
the same shapes (the field paths in the message, the first one as OpenAI's ``param``),
never FastAPI's default body.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import typing
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from index import (
    AliasError,
    CollectionExistsError,
    CollectionNotFoundError,
    EncoderMismatchError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    UnsupportedError,
)
from wiring.errors import ConflictError, DomainError, InvalidError, NotFoundError, TooLargeError

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1  # what 429 and 503 tell the client to wait, in seconds
DISK_RETRY_S = 30  # and 507 (a full disk frees slowly)


class ApiError(Exception):
    """An error with its HTTP status and ``error_type``."""

    def __init__(self, status: int, error_type: str, message: str,
                 headers: dict[str, str] | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message
        self.headers, self.param = headers or {}, param


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


def invalid(message: str, param: str | None = None) -> ApiError:
    return ApiError(422, "invalid_request", message, param=param)


_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_ids: Iterator[str] = iter(())


def new_request_id() -> str:
    """A random request id of 16 hex digits, cut from one ``os.urandom`` call per 512 ids:
    a ``uuid4`` a request (a system call each) cost POST /v1/embeddings 230 against 214 us
    of event-loop CPU with a counter instead (in-process rounds alternating, 2 cores, not
    recorded). Random rather than counted, so an id does not tell a caller how many
    requests others made."""
    global _ids
    for rid in _ids:  # safe from several threads: a list iterator hands each id out once
        return rid
    raw = os.urandom(8 * 512).hex()
    _ids = iter([raw[i:i + 16] for i in range(16, len(raw), 16)])
    return raw[:16]


def request_id_of(given: bytes) -> str:
    """A request's id: the caller's ``X-Request-Id`` (``given``) when it is a plain token
    (letters, digits, ``._-``, at most 64), else a new one (:func:`new_request_id`).
    :class:`api.edge.EdgeMiddleware` puts it in the request's state and its answer."""
    text = given.decode("latin-1")
    return text if _REQUEST_ID.match(text) else new_request_id()


def public_text(e: BaseException) -> str:
    """What an answer may say of an exception: our own errors' messages (they name
    collections and fields), else only its kind (an OSError's text names files)."""
    if isinstance(e, StoreError | ValueError | ApiError | DomainError):
        return f"{type(e).__name__}: {e}"
    return f"{type(e).__name__} (the details are in the server's log)"


def request_id(request: Request) -> str:
    return str(getattr(request.state, "request_id", "") or "")


def from_exception(e: Exception) -> ApiError:
    """The API error for a domain exception (the order matters: subclasses first)."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, NotFoundError):
        return not_found(str(e))
    if isinstance(e, ConflictError):
        return conflict(str(e))
    if isinstance(e, TooLargeError):
        return too_large(str(e))
    if isinstance(e, InvalidError):
        return invalid(str(e), e.param)
    if isinstance(e, CollectionNotFoundError):
        return not_found(str(e))
    if isinstance(e, CollectionExistsError | EncoderMismatchError | UnsupportedError
                  | AliasError):
        return conflict(str(e))
    if isinstance(e, StoreUnavailableError):
        return ApiError(503, "store_unavailable", str(e), {"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(e, StoreFullError):
        return ApiError(507, "insufficient_storage", f"{e}: writes are refused until space is "
                        "freed; searches and reads go on", {"Retry-After": str(DISK_RETRY_S)})
    if isinstance(e, StoreError):
        return ApiError(502, "store_error", str(e))
    if isinstance(e, ValueError):
        return invalid(str(e))
    log.exception("unhandled error", exc_info=e)
    return ApiError(500, "internal_error", f"internal error: {type(e).__name__}")


def openai_type(status: int) -> str:
    """OpenAI's error ``type`` for a status (its SDKs pick the exception by the status)."""
    if status == 401:
        return "authentication_error"
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def error_response(err: ApiError, path: str = "") -> Response:
    """The error in OpenAI's shape under ``/v1/``, else in TEI's; ``code`` is qkv's
    ``error_type`` (``not_found``, ``conflict``, ...)."""
    body: dict[str, object]
    if path.startswith("/v1/"):
        body = {"error": {"message": err.message, "type": openai_type(err.status),
                          "param": err.param, "code": err.error_type}}
    else:
        body = {"error": err.message, "error_type": err.error_type}
    return Response(orjson.dumps(body), status_code=err.status, headers=err.headers,
                    media_type="application/json")


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
_HTTP_TYPES = {400: "bad_request", 401: "unauthorized", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type"}


def _loc(e: Any) -> str:
    return ".".join(str(x) for x in e.get("loc", ()) if x != "body")


def _model_at(model: Any, path: Sequence[Any]) -> Any:
    """The request model found at ``path`` (field names and list indexes) inside ``model``,
    or None."""
    for part in path:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = _inner_model(field.annotation)
    return model


def _inner_model(t: Any) -> Any:
    """The pydantic model inside an annotation (``X | None``, ``list[X]``, ``Annotated``)."""
    if isinstance(t, type) and hasattr(t, "model_fields"):
        return t
    for arg in typing.get_args(t):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _message(e: dict[str, Any], body_model: Any) -> str:
    """One validation error in words; a field the request model does not have is named as
    unknown, with the nearest field it has when one is close."""
    where = _loc(e) or "body"
    if e.get("type") != "extra_forbidden":
        return f"{where}: {e.get('msg', 'invalid')}"
    path = [x for x in e.get("loc", ()) if x != "body"]
    known = list(getattr(_model_at(body_model, path[:-1]), "model_fields", {}))
    close = difflib.get_close_matches(str(path[-1]) if path else "", known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else (
        f"; the fields are {', '.join(known)}" if known else "")
    return f"{where}: unknown field{hint}"


def _unreadable(errors: list[Any], body: Any, content_type: str) -> ApiError | None:
    """The one error of a body that is not JSON, in words: where the JSON breaks, or the
    header that makes it read as JSON."""
    if len(errors) != 1:
        return None
    e = errors[0]
    if e.get("type") == "json_invalid":
        loc = [x for x in e.get("loc", ()) if x != "body"]
        pos = loc[0] if loc and isinstance(loc[0], int) else None
        why = (e.get("ctx") or {}).get("error", "not JSON")
        if pos is None or not isinstance(body, bytes | str):
            return invalid(f"invalid JSON: {why}")
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        return invalid(f"invalid JSON at line {line} column {column}: {why}")
    if (tuple(e.get("loc", ())) == ("body",) and "json" not in content_type.lower()
            and e.get("type") in ("model_attributes_type", "dict_type", "missing")):
        sent = content_type or "no Content-Type"
        return invalid(f"the body is read as JSON only with Content-Type: application/json "
                       f"(this request sent {sent}); send that header")
    return None


def _validation_error(errors: list[Any], body_model: Any = None, body: Any = None,
                      content_type: str = "application/json") -> ApiError:
    unreadable = _unreadable(errors, body, content_type)
    if unreadable is not None:
        return unreadable
    parts = [_message(e, body_model) for e in errors[:10]]
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    first = [str(x) for x in errors[0].get("loc", ()) if x != "body"] if errors else []
    return invalid("; ".join(parts) + more, first[0] if first else None)  # the field


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
    async def _api(request: Request, e: ApiError) -> Response:
        return error_response(e, request.url.path)

    @app.exception_handler(StoreError)
    async def _store(request: Request, e: StoreError) -> Response:
        return error_response(_logged(request, e, from_exception(e)), request.url.path)

    @app.exception_handler(ValueError)
    async def _value(request: Request, e: ValueError) -> Response:
        return error_response(from_exception(e), request.url.path)

    @app.exception_handler(DomainError)
    async def _domain(request: Request, e: DomainError) -> Response:
        return error_response(from_exception(e), request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, e: RequestValidationError) -> Response:
        body_field = getattr(request.scope.get("route"), "body_field", None)
        model = _inner_model(getattr(getattr(body_field, "field_info", None), "annotation",
                                     None))
        return error_response(_validation_error(
            list(e.errors()), model, e.body, request.headers.get("content-type", "")),
            request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> Response:
        headers = dict(e.headers or {})
        if e.status_code == 400:  # a body FastAPI could not read (not UTF-8): bad input, 422
            return error_response(invalid(f"unreadable request body: {e.detail}"),
                                  request.url.path)
        if e.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return error_response(ApiError(e.status_code, _HTTP_TYPES.get(e.status_code, "error"),
                                       str(e.detail), headers), request.url.path)

    @app.exception_handler(Exception)
    async def _other(request: Request, e: Exception) -> Response:
        return error_response(_logged(request, e, from_exception(e)), request.url.path)


def _logged(request: Request, e: Exception, err: ApiError) -> ApiError:
    """Log what the answer leaves out (the store's own text) under the request's id; a
    5xx names the id, so the log line can be found."""
    rid, detail = request_id(request), getattr(e, "detail", "")
    if err.status >= 500:
        log.error("request %s %s %s: %d %s: %s%s", rid, request.method, request.url.path,
                  err.status, type(e).__name__, e, f" ({detail})" if detail else "")
        err.message = f"{err.message} (request id {rid}: the details are in the server's log)"
    elif detail:
        log.info("request %s: %s (%s)", rid, e, detail)
    return err
