"""Every route of the API (HTTP, OpenAI, TEI, what the web page calls), called with keys of
every scope, unbound and bound to one tenant, over a collection whose two tenants share ids
(issue 39's target), on Milvus Lite and the Milvus 2.3.5 server:

- a key below the route's scope is always 403 naming the scope, never served;
- a key bound to ``acme`` never sees a ``globex`` document or count (``globex`` holds 6-7
  documents, ``acme`` 4-5, the whole collection 10-12: any of those but acme's is a leak),
  whatever tenant it sends;
- nothing answers 5xx.

The table below must cover every route of the OpenAPI document: a new route fails the test
until it is added here.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeClient

from api.access import required_scope
from api.keys import SCOPES, new_key, write_keys

QUERY = {"query": "secret", "top_k": 20}


def _calls(mt: str, model: str) -> dict[tuple[str, str], tuple[str, Any]]:
    """(method, route) -> (path to call, JSON body or None)."""
    c = f"/v1/collections/{mt}"
    return {
        ("POST", "/v1/embeddings"): ("/v1/embeddings", {"input": "secret"}),
        ("GET", "/v1/models"): ("/v1/models", None),
        ("GET", "/v1/models/{model_id}"): (f"/v1/models/{model}", None),
        ("POST", "/v1/pooling"): ("/v1/pooling", {"input": "secret"}),
        ("POST", "/v1/collections/{name}/search"): (f"{c}/search", QUERY),
        ("POST", "/v1/collections/{name}/search/batch"): (f"{c}/search/batch",
                                                          {"searches": [QUERY, QUERY]}),
        ("POST", "/v1/collections/{name}/attend"): (f"{c}/attend", QUERY),
        ("POST", "/v1/collections/{name}/generate"): (f"{c}/generate", {"query": "secret"}),
        ("GET", "/v1/collections"): ("/v1/collections", None),
        ("GET", "/v1/collections/{name}"): (c, None),
        ("POST", "/v1/collections/{name}/tune"): (f"{c}/tune", {"wait": True}),
        ("GET", "/v1/collections/{name}/tune"): (f"{c}/tune", None),
        # multi-tenant: refused (422) before any job starts
        ("POST", "/v1/collections/{name}/adapt"): (f"{c}/adapt", {"budget_s": 30}),
        ("GET", "/v1/jobs/{job_id}"): ("/v1/jobs/adapt-000000000000", None),
        ("GET", "/v1/aliases"): ("/v1/aliases", None),
        ("GET", "/v1/aliases/{alias}"): ("/v1/aliases/al_fuzz", None),
        ("PUT", "/v1/aliases/{alias}"): ("/v1/aliases/al_fuzz", {"collection": mt}),
        ("DELETE", "/v1/aliases/{alias}"): ("/v1/aliases/al_fuzz_none", None),
        ("POST", "/v1/collections"): ("/v1/collections", {"name": "fuzz_" + mt}),
        ("DELETE", "/v1/collections/{name}"): ("/v1/collections/none_" + mt, None),
        ("POST", "/v1/collections/{name}/documents"): (
            f"{c}/documents", {"documents": [{"id": "new", "text": "fuzz"}]}),
        ("POST", "/v1/collections/{name}/files"): (f"{c}/files?file=fuzz.txt&id=new",
                                                   "a fuzz file"),
        ("DELETE", "/v1/collections/{name}/documents"): (f"{c}/documents", {"ids": ["none"]}),
        ("GET", "/v1/collections/{name}/documents/{doc_id}"): (f"{c}/documents/d1", None),
        ("GET", "/v1/collections/{name}/documents"): (f"{c}/documents?limit=1000", None),
        ("GET", "/v1/keys/me"): ("/v1/keys/me", None),
        ("GET", "/v1/keys"): ("/v1/keys", None),
        ("POST", "/v1/keys"): ("/v1/keys", {"scope": "read", "tenants": ["globex"]}),
        ("POST", "/v1/keys/{key_id}/revoke"): ("/v1/keys/k00000000/revoke", None),
        ("POST", "/v1/backups"): ("/v1/backups", {"name": "fuzz", "collections": [mt]}),
        ("GET", "/v1/backups"): ("/v1/backups", None),
        ("GET", "/v1/backups/jobs/{job_id}"): ("/v1/backups/jobs/backup-000000000000", None),
        ("POST", "/v1/backups/{name}/restore"): ("/v1/backups/fuzz/restore",
                                                 {"as": "restored_" + mt}),
        ("POST", "/embed"): ("/embed", {"inputs": "secret"}),
        ("POST", "/"): ("/", {"inputs": "secret"}),
        ("POST", "/embed_all"): ("/embed_all", {"inputs": "secret"}),
        ("POST", "/rerank"): ("/rerank", {"query": "secret", "texts": ["a", "b"],
                                          "return_text": True}),
        ("POST", "/similarity"): ("/similarity", {"inputs": {"source_sentence": "secret",
                                                             "sentences": ["a"]}}),
        ("POST", "/tokenize"): ("/tokenize", {"inputs": "secret"}),
        ("POST", "/decode"): ("/decode", {"ids": [1, 2]}),
        ("GET", "/info"): ("/info", None),
        # the web page's own pages (its data comes from the routes above)
        **{("GET", p): (p, None) for p in ("/", "/ui", "/ui/collections", "/ui/search",
                                            "/ui/attend", "/ui/generate")},
    }


def _counts(obj: Any) -> list[int]:
    """Every ``count`` and ``docs`` (a calibration's) in a JSON answer."""
    if isinstance(obj, dict):
        own = [obj[k] for k in ("count", "docs") if isinstance(obj.get(k), int)]
        return own + [c for v in obj.values() for c in _counts(v)]
    if isinstance(obj, list):
        return [c for v in obj for c in _counts(v)]
    return []


# the server's run is most of a minute: make test-long (make test stays under 40 minutes)
@pytest.mark.parametrize("store_uri", ["lite-file", pytest.param(
    "milvus-2.3.5", marks=pytest.mark.long)], indirect=True)
def test_no_key_reaches_past_its_scope_or_tenant(make_client: MakeClient, store_uri: str,
                                                 tmp_path: Path) -> None:
    mt = f"fz_{uuid.uuid4().hex[:8]}"
    keys, secrets = {}, {}
    for scope in SCOPES:
        for tenant in (None, "acme"):
            if scope == "admin" and tenant:
                continue  # admin keys are never bound
            key, secret = new_key(scope, tenants=[tenant] if tenant else None)
            keys[key.id], secrets[(scope, tenant)] = key, secret
    write_keys(tmp_path / "keys.jsonl", keys)
    c = make_client(store=store_uri, keys_file=tmp_path / "keys.jsonl",
                    backup_dir=tmp_path / "backups")
    admin = {"Authorization": f"Bearer {secrets[('admin', None)]}"}
    assert c.post("/v1/collections", json={"name": mt, "multi_tenant": True},
                  headers=admin).status_code == 201
    for tenant, n in (("acme", 4), ("globex", 6)):
        docs = [{"id": f"d{i}", "text": f"{tenant} secret {i}"} for i in range(n)]
        assert c.post(f"/v1/collections/{mt}/documents", json={"documents": docs},
                      headers={**admin, "X-Tenant": tenant}).status_code == 200
    model = c.get("/v1/models", headers=admin).json()["data"][0]["id"]
    calls = _calls(mt, model)
    routes = {(m, p) for p, ops in c.get("/openapi.json").json()["paths"].items()
              for m in (x.upper() for x in ops)}
    routes = {r for r in routes if r[1] not in ("/health", "/ready", "/metrics")}
    assert routes <= set(calls), f"add to the table: {sorted(routes - set(calls))}"

    seen = 0
    for (scope, tenant), secret in secrets.items():
        for sent in (None, "acme", "globex"):
            headers = {"Authorization": f"Bearer {secret}"}
            if sent:
                headers["X-Tenant"] = sent
            for (method, route), (path, body) in calls.items():
                r = c.request(method, path, json=body, headers=headers)
                where = f"{scope}/{tenant} sending {sent}: {method} {path} -> {r.status_code}"
                assert r.status_code < 500, f"{where}: {r.text[:300]}"
                need = required_scope(method, route)
                if SCOPES.index(scope) < SCOPES.index(need):
                    assert r.status_code == 403 and f"needs scope '{need}'" in r.text, where
                    continue
                if tenant == "acme":
                    assert "globex secret" not in r.text, f"{where}: {r.text[:300]}"
                    if r.headers.get("content-type", "").startswith("application/json"):
                        leaked = {6, 7, 10, 11, 12} & set(_counts(r.json()))
                        assert not leaked, f"{where}: {r.text[:300]}"
                seen += r.status_code < 300
    assert seen > 100  # most calls were served, so the checks above saw answers
