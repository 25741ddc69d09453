"""``/v1/keys``: API keys over HTTP, for admin keys (list, create, revoke: the same file
``qkv keys`` writes), and ``/v1/keys/me`` for any key. Revoking is ``POST
/v1/keys/{id}/revoke``: a ``DELETE /v1/keys/{id}`` would match ``/v1/keys/me`` too. A
change is a read-modify-write of the keys file under an exclusive lock on a file beside
it, so two replicas (or a replica and the CLI) cannot lose each other's keys; every
replica re-reads the file within a second."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import ConfigDict, Field

from api.access import authorize, current
from api.errors import ApiError, conflict, not_found
from api.keys import SCOPES, locked, new_key, read_keys
from api.routes import ERRORS, json_response
from api.schemas import RequestBody

keys_v1 = APIRouter(dependencies=[Depends(authorize)], responses=ERRORS, tags=["keys"])


class KeyCreate(RequestBody):
    """A new key. Strict: a field it does not know (``tenant`` for ``tenants``) is a 422,
    never a key made without the binding the caller meant; so is an empty list."""

    model_config = ConfigDict(strict=True, extra="forbid")
    scope: str = Field("read", description=f"One of {', '.join(SCOPES)}.")
    tenants: list[str] | None = Field(None, min_length=1, description="Bind to these "
                                      "tenants (at least one; leave it out for none).")
    collections: list[str] | None = Field(None, min_length=1, description="Bind to these "
                                          "collections (at least one; leave it out for none).")
    rps: float | None = Field(None, gt=0, description="Requests per second.")
    tps: float | None = Field(None, gt=0, description="Texts encoded per second.")
    name: str = Field("", max_length=200, description="A note: whose key it is.")


def _file(request: Request) -> Path:
    path = request.app.state.keys.path
    if path is None:
        raise conflict("this server has no keys file (QKV_KEYS_FILE): keys cannot be managed "
                       "over HTTP")
    return path  # type: ignore[no-any-return]


@keys_v1.get("/v1/keys/me")
async def key_me(request: Request) -> Response:
    """The calling key: its id, scope, tenants, collections and limits (never its secret);
    on an open service (no keys), ``open: true`` and every scope. The web page asks this to
    show what the key may do."""
    key = current.get()
    if key is None:
        return json_response({"open": True, "id": None, "scope": "admin", "tenants": None,
                              "collections": None, "rps": None, "tps": None})
    return json_response({"open": False, **key.to_public()})


@keys_v1.get("/v1/keys")
async def list_keys(request: Request) -> Response:
    """Every key in the keys file (no secrets, no hashes)."""
    return json_response({"keys": [k.to_public() for k in read_keys(_file(request)).values()]})


@keys_v1.post("/v1/keys", status_code=201)
async def create_key(body: KeyCreate, request: Request) -> Response:
    """A new key; the answer's ``secret`` is its only copy."""
    if request.app.state.keys.open:  # anyone may call an open service: not to close it
        raise conflict("this service has no keys: create the first one where it runs (qkv "
                       "keys create --scope admin), then manage keys with it")
    try:
        key, secret = new_key(body.scope, body.tenants, body.collections, body.rps, body.tps,
                              body.name)
    except ValueError as e:
        raise ApiError(422, "invalid_request", str(e)) from e
    with locked(_file(request)) as keys:
        keys[key.id] = key
    audit = getattr(request.state, "audit", None)
    if audit is not None:  # the audit line names the key made
        audit["target"] = key.id
    request.app.state.keys.reload()  # this replica at once, the others within a second
    out: dict[str, Any] = {**key.to_public(), "secret": secret}
    return json_response(out, 201)


@keys_v1.post("/v1/keys/{key_id}/revoke")
async def revoke_key(key_id: str, request: Request) -> Response:
    """Revoke a key: every replica refuses it (401) within a second."""
    with locked(_file(request)) as keys:
        if key_id not in keys:
            raise not_found(f"no key {key_id!r}")
        if keys[key_id].revoked is None:
            keys[key_id] = replace(keys[key_id],
                                   revoked=datetime.now(UTC).isoformat(timespec="seconds"))
        out = keys[key_id].to_public()
    request.app.state.keys.reload()
    return json_response(out)
