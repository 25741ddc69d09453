"""API keys (issue 39), on Milvus Lite and the Milvus 2.3.5 server: scopes, tenants bound to a
key over a collection whose tenants share ids, revocation on a running app, per-key limits
in each route family's error shape, the audit line, and a malformed keys file."""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from api_errors import error_of
from conftest import MakeClient
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.keys import KeyFileError, KeyRing, new_key, read_keys, write_keys
from cli.app import app as cli


def _keys(path: Path, **specs: dict) -> dict[str, str]:  # type: ignore[type-arg]
    """Write one key per spec; their secrets by spec name."""
    keys, secrets = {}, {}
    for label, spec in specs.items():
        key, secret = new_key(**spec)
        keys[key.id], secrets[label] = key, secret
    write_keys(path, keys)
    return secrets


def _auth(secret: str, tenant: str | None = None) -> dict[str, str]:
    h = {"Authorization": f"Bearer {secret}"}
    return {**h, "X-Tenant": tenant} if tenant else h


def test_scopes_tenants_and_grants(make_client: MakeClient, store_uri: str,
                                   tmp_path: Path) -> None:
    mt, plain, other = (f"{p}_{uuid.uuid4().hex[:8]}" for p in ("mt", "pl", "ot"))
    s = _keys(tmp_path / "keys.jsonl", admin={"scope": "admin"}, read={"scope": "read"},
              write={"scope": "write"}, acme={"scope": "write", "tenants": ["acme"]},
              two={"scope": "read", "tenants": ["acme", "globex"]},
              granted={"scope": "read", "tenants": ["acme"], "collections": [mt, plain]})
    c = make_client(store=store_uri, keys_file=tmp_path / "keys.jsonl")
    admin = _auth(s["admin"])
    for name, multi in ((mt, True), (plain, False), (other, False)):
        assert c.post("/v1/collections", json={"name": name, "multi_tenant": multi},
                      headers=admin).status_code == 201
    for tenant in ("acme", "globex"):  # the same ids in both tenants
        r = c.post(f"/v1/collections/{mt}/documents", headers=_auth(s["write"], tenant),
                   json={"documents": [{"id": f"d{i}", "text": f"{tenant} secret {i}"}
                                       for i in range(4)]})
        assert r.status_code == 200, r.text
    c.post(f"/v1/collections/{plain}/documents", headers=admin,
           json={"documents": [{"id": "p", "text": "plain text"}]})

    # 401: none, unknown, malformed; 403 names the scope needed
    for h in ({}, _auth("qkv-k00000000-" + "x" * 32), _auth("nonsense")):
        r = c.post(f"/v1/collections/{plain}/search", json={"query": "x"}, headers=h)
        assert r.status_code == 401 and "API key" in error_of(r)["error"]
    r = c.post(f"/v1/collections/{plain}/documents", headers=_auth(s["read"]),
               json={"documents": [{"id": "x", "text": "t"}]})
    assert r.status_code == 403 and "needs scope 'write'" in error_of(r)["error"]
    r = c.delete(f"/v1/collections/{plain}", headers=_auth(s["write"]))
    assert r.status_code == 403 and "needs scope 'admin'" in error_of(r)["error"]
    assert c.post(f"/v1/collections/{plain}/search", json={"query": "plain"},
                  headers=_auth(s["read"])).status_code == 200
    assert c.post("/embed", json={"inputs": "x"}, headers=_auth(s["read"])).status_code == 200
    r = c.post("/embed", json={"inputs": "x"})
    assert r.status_code == 401 and set(r.json()) == {"error", "error_type"}  # TEI's shape

    # a key bound to acme: acme's documents and count only, whatever it sends
    acme = _auth(s["acme"])
    hits = c.post(f"/v1/collections/{mt}/search", json={"query": "secret", "top_k": 20},
                  headers=acme).json()["hits"]
    assert len(hits) == 4 and all(h["text"].startswith("acme") for h in hits)
    assert c.get(f"/v1/collections/{mt}/documents/d1", headers=acme).json()["text"] \
        == "acme secret 1"
    assert c.get(f"/v1/collections/{mt}", headers=acme).json()["count"] == 4
    for r in (c.get(f"/v1/collections/{mt}/documents/d1", headers={**acme, "X-Tenant":
                                                                   "globex"}),
              c.post(f"/v1/collections/{mt}/search", headers=acme,
                     json={"query": "secret", "tenant": "globex"}),
              c.post(f"/v1/collections/{mt}/search/batch", headers=acme, json={"searches": [
                  {"query": "x"}, {"query": "x", "tenant": "globex"}]})):
        assert r.status_code == 403, r.text
        assert "globex" not in r.text.replace("tenant 'globex'", "")
    # a collection it is not granted reads as one that does not exist (issue 68, finding 6)
    hidden = c.post(f"/v1/collections/{plain}/search", json={"query": "x"}, headers=acme)
    missing = c.post("/v1/collections/no_such_one/search", json={"query": "x"}, headers=acme)
    assert hidden.status_code == missing.status_code == 404, hidden.text
    assert hidden.json() == {**missing.json(), "error": {
        **missing.json()["error"], "message": f"no collection {plain!r}"}}
    assert missing.json()["error"]["message"] == "no collection 'no_such_one'"
    assert c.get(f"/v1/collections/{plain}", headers=acme).status_code == 404
    r = c.post(f"/v1/collections/{mt}/documents", headers=acme,
               json={"documents": [{"id": "d1", "text": "acme rewritten"}]})
    assert r.status_code == 200  # written in acme, not in globex
    assert c.get(f"/v1/collections/{mt}/documents/d1",
                 headers=_auth(s["admin"], "globex")).json()["text"] == "globex secret 1"
    listed = {x["name"] for x in c.get("/v1/collections", headers=acme).json()["collections"]}
    assert mt in listed and plain not in listed and other not in listed
    # two tenants: it must say which; granted collections: a plain one too, no tenant
    r = c.post(f"/v1/collections/{mt}/search", json={"query": "x"}, headers=_auth(s["two"]))
    assert r.status_code == 403 and "several tenants" in error_of(r)["error"]
    assert c.post(f"/v1/collections/{plain}/search", json={"query": "plain"},
                  headers=_auth(s["granted"])).json()["hits"][0]["id"] == "p"
    assert c.post(f"/v1/collections/{other}/search", json={"query": "x"},
                  headers=_auth(s["granted"])).status_code == 404
    me = c.get("/v1/keys/me", headers=acme).json()
    assert me["scope"] == "write" and me["tenants"] == ["acme"] and "hash" not in me


def test_revoked_within_a_second_and_limits(make_client: MakeClient, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "keys.jsonl"
    s = _keys(path, a={"scope": "write"}, slow={"scope": "read", "rps": 2})
    c: TestClient = make_client(keys_file=path, api_key="env-admin-key")
    name = "k_" + uuid.uuid4().hex[:8]
    assert c.post("/v1/collections", json={"name": name},
                  headers=_auth("env-admin-key")).status_code == 201  # QKV_API_KEY: admin
    with caplog.at_level(logging.INFO, logger="qkv.audit"):
        r = c.post(f"/v1/collections/{name}/documents", headers=_auth(s["a"]),
                   json={"documents": [{"id": str(i), "text": "t"} for i in range(3)]})
    assert r.status_code == 200
    line = json.loads([r.message for r in caplog.records if r.name == "qkv.audit"][-1])
    key_a = next(k for k in read_keys(path).values() if k.scope == "write")
    assert line["key"] == key_a.id and line["count"] == 3 and line["status"] == 200
    assert line["collection"] == name and line["route"].endswith("/documents")

    keys = read_keys(path)
    from dataclasses import replace
    keys[key_a.id] = replace(key_a, revoked="now")
    write_keys(path, keys)
    time.sleep(1.0)
    assert c.get("/v1/models", headers=_auth(s["a"])).status_code == 401

    statuses = [c.get("/v1/models", headers=_auth(s["slow"])).status_code for _ in range(4)]
    assert statuses[:2] == [200, 200] and 429 in statuses  # 2 a second, a burst of 2

    def limited(method: str, path: str, body: dict) -> object:  # type: ignore[type-arg]
        for _ in range(4):  # the bucket holds 2: one of 4 at once is over
            t0 = time.monotonic()
            r = c.request(method, path, json=body, headers=_auth(s["slow"]))
            if r.status_code == 429:
                assert int(r.headers["Retry-After"]) >= 1
                assert time.monotonic() - t0 >= 0.4  # held before the answer
                return r
        raise AssertionError(f"{path}: never limited")

    r = limited("POST", "/v1/embeddings", {"input": "x"})
    assert error_of(r)["error_type"] == "rate_limited"
    r = limited("POST", "/embed", {"inputs": "x"})
    assert set(r.json()) == {"error", "error_type"}  # TEI's shape
    slow_id = next(k.id for k in read_keys(path).values() if k.rps == 2)
    # the key ids are an admin's to read (issue 68, finding 6): /metrics is not open
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", headers=_auth(s["slow"])).status_code == 403
    metrics = c.get("/metrics", headers=_auth("env-admin-key")).text
    assert f'qkv_key_requests_total{{key="{slow_id}",outcome="limited"}}' in metrics


def test_a_malformed_keys_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    _keys(path, a={"scope": "read"})
    path.write_text(path.read_text() + '{"id": "k0000000g", "hash": "x"}\n')
    with pytest.raises(KeyFileError, match="line 2"):
        KeyRing(path)
    with pytest.raises(ValueError, match="admin key"):
        new_key("admin", tenants=["acme"])


def test_a_keys_file_gone_or_emptied_keeps_the_service_closed(
        make_client: MakeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 68, finding 1: moving the keys file away or truncating it while the service
    runs kept nothing: the ring became open and any caller was admin of every tenant."""
    monkeypatch.setattr("api.keys.RELOAD_EVERY_S", 0.0)
    path = tmp_path / "keys.jsonl"
    s = _keys(path, admin={"scope": "admin"}, reader={"scope": "read", "tenants": ["b"]})
    c = make_client(keys_file=path)
    assert c.get("/v1/keys/me").status_code == 401
    for gone in ("moved", "emptied"):
        with caplog.at_level(logging.CRITICAL, logger="api.keys"):
            if gone == "moved":
                path.rename(tmp_path / "keys.jsonl.bak")
            else:
                path.write_text("")
            for _ in range(2):  # re-read, and again: the same answer, logged once
                r = c.get("/v1/keys/me")
                assert r.status_code == 401, (gone, r.text)
                assert c.get("/v1/collections").status_code == 401
        said = [r.message for r in caplog.records if "keys last read stay" in r.message]
        assert len(said) == 1 and ("missing" if gone == "moved" else "empty") in said[0]
        caplog.clear()
        me = c.get("/v1/keys/me", headers=_auth(s["admin"])).json()  # the old keys hold
        assert me["scope"] == "admin" and me["open"] is False
        if gone == "moved":
            (tmp_path / "keys.jsonl.bak").rename(path)
    # keys written again are read again; revocation still works through the same file
    _keys(path, fresh={"scope": "read"})
    assert c.get("/v1/keys/me", headers=_auth(s["admin"])).status_code == 401  # replaced
    # the documented switch: an emptied file opens a running service deliberately
    s = _keys(path, admin={"scope": "admin"})
    c = make_client(keys_file=path, keys_empty_opens=True)
    assert c.get("/v1/keys/me").status_code == 401
    path.write_text("")
    assert c.get("/v1/keys/me").json()["open"] is True


def test_key_creation_refuses_what_it_would_ignore(make_client: MakeClient,
                                                   tmp_path: Path) -> None:
    """Issue 68, finding 3: ``"tenant": "a"`` (singular) or ``"tenants": []`` made an
    unbound key with 201; the keys file's parser refuses ``[]``: both paths now agree."""
    path = tmp_path / "keys.jsonl"
    s = _keys(path, admin={"scope": "admin"})
    c = make_client(keys_file=path)
    before = set(read_keys(path))
    for body, field in (({"scope": "read", "tenant": "a"}, "tenant"),
                        ({"scope": "read", "tenants": []}, "tenants"),
                        ({"scope": "read", "collections": []}, "collections"),
                        ({"scope": "read", "rps": 5, "tenants": ["a"], "note": "x"}, "note")):
        r = c.post("/v1/keys", json=body, headers=_auth(s["admin"]))
        assert r.status_code == 422, (body, r.text)
        assert field in error_of(r)["error"], r.text
    assert set(read_keys(path)) == before  # no key was made
    r = c.post("/v1/keys", json={"scope": "read", "tenants": ["a"]}, headers=_auth(s["admin"]))
    assert r.status_code == 201 and r.json()["tenants"] == ["a"]


def test_every_route_that_encodes_charges_its_texts(make_client: MakeClient,
                                                    tmp_path: Path) -> None:
    """Issue 68, finding 4: /embed_all, /v1/pooling and /tokenize ran the encoder (or its
    tokenizer) outside the batcher and never charged the key's texts/s: 8,192 texts in 3 s
    on a key limited to 5 texts/s. Now each charges them: the first request of 20 texts
    takes the burst (and goes into debt), the next is refused."""
    path = tmp_path / "keys.jsonl"
    texts = [f"text number {i} about limits" for i in range(20)]
    routes = (("/embed_all", {"inputs": texts}), ("/v1/pooling", {"input": texts}),
              ("/tokenize", {"inputs": texts}))
    for route, body in routes:
        s = _keys(path, slow={"scope": "read", "tps": 5})  # a fresh key: a full bucket
        c = make_client(keys_file=path)
        first = c.post(route, json=body, headers=_auth(s["slow"]))
        assert first.status_code == 200, (route, first.text)
        second = c.post(route, json=body, headers=_auth(s["slow"]))
        assert second.status_code == 429, (route, second.status_code)
        assert "texts/s" in error_of(second)["error"] and "Retry-After" in second.headers


def test_the_audit_names_refusals_reads_of_keys_and_targets(
        make_client: MakeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 68, finding 6: refusals (401, 403) and admin reads were not audited, and key
    and alias lines did not say which key or alias."""
    path = tmp_path / "keys.jsonl"
    s = _keys(path, admin={"scope": "admin"}, read={"scope": "read"})
    c = make_client(keys_file=path)
    name = "au_" + uuid.uuid4().hex[:8]
    admin = _auth(s["admin"])
    assert c.post("/v1/collections", json={"name": name}, headers=admin).status_code == 201

    def lines(call: Any) -> list[dict[str, Any]]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="qkv.audit"):
            call()
        return [json.loads(r.message) for r in caplog.records if r.name == "qkv.audit"]

    (line,) = lines(lambda: c.get("/v1/collections"))  # no key: refused, and said
    assert line["refused"] == "unauthorized" and line["status"] == 401 and line["key"] is None
    read_id = next(k.id for k in read_keys(path).values() if k.scope == "read")
    (line,) = lines(lambda: c.delete(f"/v1/collections/{name}", headers=_auth(s["read"])))
    assert line["refused"] == "forbidden" and line["status"] == 403
    assert line["key"] == read_id and line["scope"] == "read" and line["collection"] == name
    (line,) = lines(lambda: c.get("/v1/keys", headers=admin))  # an admin read
    assert line["status"] == 200 and line["scope"] == "admin" and line["method"] == "GET"
    made: list[Any] = []
    (line,) = lines(lambda: made.append(c.post("/v1/keys", json={"scope": "read"},
                                                headers=admin)))
    assert line["target"] == made[0].json()["id"] and line["status"] == 201
    (line,) = lines(lambda: c.post(f"/v1/keys/{made[0].json()['id']}/revoke", headers=admin))
    assert line["target"] == made[0].json()["id"]
    (line,) = lines(lambda: c.put("/v1/aliases/au_alias", json={"collection": name},
                                  headers=admin))
    assert line["target"] == "au_alias" and line["status"] == 200
    assert lines(lambda: c.post(f"/v1/collections/{name}/search", json={"query": "x"},
                                headers=_auth(s["read"]))) == []  # reads that pass: not
    c.delete("/v1/aliases/au_alias", headers=admin)
    c.delete(f"/v1/collections/{name}", headers=admin)


def test_a_bound_key_sees_only_its_collections_jobs(make_client: MakeClient,
                                                    tmp_path: Path) -> None:
    """Issue 68, finding 6: ``GET /v1/jobs/{id}`` had no collection or tenant check."""
    from wiring.adapting import Journal

    path = tmp_path / "keys.jsonl"
    mine, other = ("jb_" + uuid.uuid4().hex[:8] for _ in range(2))
    s = _keys(path, admin={"scope": "admin"},
              bound={"scope": "read", "tenants": ["t"], "collections": [mine]})
    c = make_client(keys_file=path)
    for n in (mine, other):
        assert c.post("/v1/collections", json={"name": n},
                      headers=_auth(s["admin"])).status_code == 201
    root = c.app.state.service.adapter.root  # type: ignore[attr-defined]
    jobs = {n: Journal.new(root, n, {}).state["id"] for n in (mine, other)}
    assert c.get(f"/v1/jobs/{jobs[mine]}", headers=_auth(s["bound"])).status_code == 200
    r = c.get(f"/v1/jobs/{jobs[other]}", headers=_auth(s["bound"]))
    assert r.status_code == 404 and other not in r.text
    assert c.get(f"/v1/jobs/{jobs[other]}", headers=_auth(s["admin"])).status_code == 200
    for n in (mine, other):
        c.delete(f"/v1/collections/{n}", headers=_auth(s["admin"]))


def test_keys_cli_prints_the_secret_once(tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    r = CliRunner().invoke(cli, ["keys", "create", "--scope", "write", "--tenant", "acme",
                                 "--rps", "5", "--keys-file", str(path)])
    assert r.exit_code == 0, r.output
    secret = r.stdout.strip().splitlines()[0]
    ring = KeyRing(path)
    key = ring.find(secret)
    assert key is not None and key.scope == "write" and key.tenants == ("acme",)
    listed = CliRunner().invoke(cli, ["keys", "list", "--keys-file", str(path)]).stdout
    assert key.id in listed and secret not in listed and key.hash not in listed
    assert CliRunner().invoke(cli, ["keys", "revoke", key.id, "--keys-file",
                                    str(path)]).exit_code == 0
    assert KeyRing(path).find(secret) is None


def test_keys_over_http(make_client: MakeClient, tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    r = make_client(keys_file=path).post("/v1/keys", json={"scope": "admin"})
    assert r.status_code == 409 and not path.exists()  # an open service stays open
    s = _keys(path, admin={"scope": "admin"}, write={"scope": "write"})
    c = make_client(keys_file=path)
    r = c.post("/v1/keys", json={"scope": "read", "tenants": ["acme"], "rps": 5},
               headers=_auth(s["admin"]))
    assert r.status_code == 201 and r.json()["secret"].startswith("qkv-")
    new = r.json()
    assert c.get("/v1/keys/me", headers=_auth(new["secret"])).json()["tenants"] == ["acme"]
    listed = c.get("/v1/keys", headers=_auth(s["admin"])).text
    assert new["id"] in listed and new["secret"] not in listed and '"hash"' not in listed
    r = c.post("/v1/keys", json={"scope": "read"}, headers=_auth(s["write"]))
    assert r.status_code == 403 and "needs scope 'admin'" in error_of(r)["error"]
    r = c.post("/v1/keys", json={"scope": "admin", "tenants": ["a"]}, headers=_auth(s["admin"]))
    assert r.status_code == 422 and "admin key" in error_of(r)["error"]
    assert c.post("/v1/keys/k00000000/revoke", headers=_auth(s["admin"])).status_code == 404
    r = c.post(f"/v1/keys/{new['id']}/revoke", headers=_auth(s["admin"]))
    assert r.status_code == 200 and r.json()["revoked"]
    time.sleep(1.0)
    assert c.get("/v1/keys/me", headers=_auth(new["secret"])).status_code == 401

