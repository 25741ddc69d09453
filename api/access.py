"""Who may call what: the key of each request (:mod:`api.keys`), checked against the route's
scope, its collection and its tenant; per-key limits; one audit line per write.

- :func:`authorize` is the dependency of every ``/v1``, ``/embed``-family and web route
  (``/health`` and ``/ready`` stay open; ``/metrics``, which counts requests by key id,
  needs an admin key when the service has keys). 401: no key, an unknown one, a
  revoked one; 403: a key whose scope is below the route's (the message names the scope it
  needs), or a tenant it is not bound to; a collection the key is not granted answers 404
  as a name that does not exist does (a bound key does not learn which names exist). The
  key goes in ``request.state.key``
  and in :data:`current` (routes ask :func:`bound_tenant` for the tenant to use).
- :class:`Limiter`: token buckets per key id, requests/s checked here and texts/s where
  texts are encoded (:func:`charge_texts`, from ``Service.embed``): 429 with Retry-After.
- :func:`write_audit`: one JSON log line (logger ``qkv.audit``) per write and admin
  call: key id, tenant, method, route, collection, count, status, request id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import threading
import time
from contextvars import ContextVar
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError, not_found
from api.keys import Key, KeyRing
from index.store import CollectionInfo, CollectionNotFoundError, collection_name

audit_log = logging.getLogger("qkv.audit")
HOLD_MAX_S = 1.0
current: ContextVar[Key | None] = ContextVar("qkv_key", default=None)
# whether the request's collection is multi-tenant (set for keys bound to tenants): a
# granted collection that is not takes no tenant, so none is forced on it
current_multi_tenant: ContextVar[bool] = ContextVar("qkv_multi_tenant", default=True)
_bearer = HTTPBearer(auto_error=False, description="An API key (qkv keys create), or "
                     "QKV_API_KEY, when the server has any.")


async def bearer(request: Request) -> HTTPAuthorizationCredentials | None:
    """The request's bearer credentials, as :func:`authorize` gets them from FastAPI."""
    return await _bearer(request)


def required_scope(method: str, route: str) -> str:
    """The scope a call needs, by its method and route template."""
    if route.startswith("/v1/keys"):
        return "read" if route == "/v1/keys/me" else "admin"
    if route == "/metrics" or route.startswith("/v1/backups"):  # key ids; every tenant's
        return "admin"
    if route in ("/v1/collections", "/v1/collections/{name}") and method in ("POST", "DELETE"):
        return "admin"
    if route == "/v1/collections/{name}/adapt":  # makes and drops collections
        return "admin"
    if route.startswith("/v1/aliases") and method in ("PUT", "DELETE"):
        return "admin"
    if method in ("POST", "DELETE") and route in ("/v1/collections/{name}/documents",
                                                  "/v1/collections/{name}/files",
                                                  "/v1/collections/{name}/tune"):
        return "write"
    return "read"


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", "missing, unknown or revoked API key: send "
                    "'Authorization: Bearer <key>'", {"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


def may_use(key: Key | None, info: CollectionInfo, asked: str | None = None) -> bool:
    """Whether ``key`` reaches collection ``info`` (``asked``: the name or alias used)."""
    if key is None or (key.tenants is None and key.collections is None):
        return True
    granted = key.collections is not None and bool(
        {info.name, asked} & set(key.collections))
    if key.collections is not None and not granted:
        return False
    return granted or (key.tenants is not None and info.multi_tenant)


def bound_tenant(given: str | None) -> str | None:
    """The tenant a request acts in: ``given`` (header or body) for an unbound key; for a
    key bound to tenants, ``given`` if it is one of them, the key's own when it has one and
    none was given, else 403."""
    key = current.get()
    if key is None or key.tenants is None or not current_multi_tenant.get():
        return given
    if given is None:
        if len(key.tenants) == 1:
            return key.tenants[0]
        raise forbidden(f"key {key.id} is bound to several tenants: name one in X-Tenant")
    if given not in key.tenants:
        raise forbidden(f"key {key.id} may not act in tenant {given!r}")
    return given


def redacted(info: CollectionInfo, obj: Any) -> Any:
    """``obj`` without the whole collection's document counts (``docs`` of a calibration or
    a tune) when a key bound to tenants reads a multi-tenant collection."""
    key = current.get()
    if key is None or key.tenants is None or not info.multi_tenant:
        return obj
    if isinstance(obj, dict):
        return {k: redacted(info, v) for k, v in obj.items() if k != "docs"}
    if isinstance(obj, list):
        return [redacted(info, v) for v in obj]
    return obj


class Bucket:
    def __init__(self, rate: float) -> None:
        self.rate, self.capacity = rate, max(rate, 1.0)
        self.tokens, self.at = self.capacity, time.monotonic()

    def take(self, n: float) -> float:
        """Take ``n`` (the bucket may go into debt when it was full enough for a large
        request); 0 when taken, else the seconds to wait."""
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= min(n, self.capacity):
            self.tokens -= n
            return 0.0
        return (min(n, self.capacity) - self.tokens) / self.rate


class Limiter:
    """Token buckets per key id and kind (requests, texts)."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str, float], Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key: Key, kind: str, n: float = 1.0) -> ApiError | None:
        """None when ``n`` is taken; else the 429 to answer (after :func:`held`)."""
        rate = key.rps if kind == "requests" else key.tps
        if rate is None:
            return None
        with self._lock:
            bucket = self._buckets.setdefault((key.id, kind, rate), Bucket(rate))
            wait = bucket.take(n)
        if wait <= 0:
            return None
        err = ApiError(429, "rate_limited", f"key {key.id} is over its limit of {rate:g} "
                       f"{kind}/s; retry in {wait:.1f} s",
                       {"Retry-After": str(max(1, math.ceil(wait)))})
        return err


async def held(err: ApiError, metrics: Any, key: Key) -> ApiError:
    """The 429, answered after its Retry-After (at most ``HOLD_MAX_S``): a client that
    ignores Retry-After and sends again at once would otherwise keep the event loop busy
    refusing it (2,211 refusals/s from 32 connections raised another key's p99 from 17 to
    117 ms, bench/keys_load.py); held, its connections carry a few refusals a second."""
    metrics.key_requests.labels(key.id, "limited").inc()
    # jittered, so that held connections do not come back together as one burst
    await asyncio.sleep(min(float(err.headers["Retry-After"]), HOLD_MAX_S)
                        * random.uniform(0.5, 1.0))
    return err


async def charge_texts(limiter: Limiter, n: int, metrics: Any) -> None:
    """Count ``n`` texts against the calling key's texts/s (429 when over)."""
    key = current.get()
    if key is not None:
        err = limiter.take(key, "texts", n)
        if err is not None:
            raise await held(err, metrics, key)


async def authorize(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Key | None:
    """The request's key, checked (see the module docstring); None on an open service."""
    ring: KeyRing = request.app.state.keys
    metrics = request.app.state.service.metrics
    current.set(None)
    current_multi_tenant.set(True)
    matched = request.scope.get("route")  # its template, without convertors
    route = str(getattr(matched, "path_format", None) or getattr(matched, "path", None)
                or request.url.path)
    need = required_scope(request.method, route)
    name = request.path_params.get("name")
    # what the audit line names: the collection, and the alias or key a call acts on
    entry = {"key": None, "scope": None, "route": route, "collection": name,
             "target": request.path_params.get("alias") or request.path_params.get("key_id"),
             "tenant": None}
    if ring.open:  # no keys: writes are audited all the same, with no key
        if need != "read":
            request.state.audit = entry
        return None
    key = ring.find(credentials.credentials) if credentials else None
    if key is None:
        metrics.key_requests.labels("unknown", "unauthorized").inc()
        request.state.audit = {**entry, "refused": "unauthorized"}
        raise unauthorized()
    entry.update(key=key.id, scope=key.scope,
                 tenant=key.tenants[0] if key.tenants else None)
    if not key.allows(need):
        metrics.key_requests.labels(key.id, "forbidden").inc()
        request.state.audit = {**entry, "refused": "forbidden"}
        raise forbidden(f"key {key.id} has scope '{key.scope}'; {request.method} {route} "
                        f"needs scope '{need}'")
    if name is not None and (key.tenants is not None or key.collections is not None):
        try:
            await _check_collection(request, key, name, route)
        except ApiError:
            request.state.audit = {**entry, "refused": "forbidden"}
            raise
    err = request.app.state.service.limiter.take(key, "requests")
    if err is not None:
        raise await held(err, metrics, key)
    metrics.key_requests.labels(key.id, "ok").inc()
    request.state.key = key
    current.set(key)
    if need != "read":  # writes and admin calls, reads of keys included
        request.state.audit = entry
    return key


async def _check_collection(request: Request, key: Key, name: str, route: str) -> None:
    svc = request.app.state.service
    try:
        info = await svc.collections.describe(collection_name(name))
    except (CollectionNotFoundError, ValueError):
        return  # the route answers 404 (or 422 for the name) as for anyone
    if not may_use(key, info, name):
        # as for a name that does not exist: a bound key must not learn which names do
        svc.metrics.key_requests.labels(key.id, "forbidden").inc()
        raise not_found(f"no collection {name!r}")
    if (key.tenants is not None and info.multi_tenant and request.method == "POST"
            and route == "/v1/collections/{name}/tune"):
        svc.metrics.key_requests.labels(key.id, "forbidden").inc()
        raise forbidden(f"key {key.id} may not tune collection {name!r}: its weight is every "
                        "tenant's")
    current_multi_tenant.set(info.multi_tenant)


def audit_facts(body: bytes) -> tuple[int | None, str | None]:
    """How many documents or ids a write's body names, and its ``tenant`` (None, None when
    it is not such a body)."""
    try:
        d = json.loads(body) if body else None
    except ValueError:
        return None, None
    if not isinstance(d, dict):
        return None, None
    count = next((len(d[f]) for f in ("documents", "ids") if isinstance(d.get(f), list)), None)
    tenant = d.get("tenant")
    return count, tenant if isinstance(tenant, str) else None


def write_audit(scope: Any, status: int, body: bytes) -> None:
    """After a call that :func:`authorize` marked (writes, admin calls, reads of keys among
    them, and every refusal: 401 and 403), one line to ``qkv.audit`` with the key, its
    scope, the route, the collection, the alias or key acted on, the count of documents or
    ids ``body`` named, and the outcome (``status``); nothing for a call it did not mark.
    Called by :class:`api.edge.EdgeMiddleware` once the call has answered."""
    state = scope.get("state") or {}
    entry = state.get("audit")
    if entry is None:
        return
    headers = dict(scope.get("headers") or [])
    count, tenant = audit_facts(body)
    tenant = tenant or headers.get(b"x-tenant", b"").decode("latin-1") or None
    audit_log.info(json.dumps({
        **entry, "method": scope["method"], "tenant": tenant or entry["tenant"],
        "count": count, "status": status, "request_id": state.get("request_id")}))
