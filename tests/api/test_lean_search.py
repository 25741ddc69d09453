"""``POST /v1/collections/{name}/search`` answered past FastAPI's routing
(``api.lean.LeanRoutes`` with a path template) answers as its route does: the same hits, the
same errors for a bad name, body or tenant, the same key checks and metrics; a name the
route would refuse, or a body that does not parse, is left to the route."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeClient
from fastapi.testclient import TestClient
from test_lean_embeddings import _all_same, _answer, spy

import api.retrieval_routes as rr
from api.keys import new_key, write_keys

WORDS = ["dog", "cat", "river", "park", "snow", "horse", "duck", "tree"]


@pytest.fixture
def by_route(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A name each time the route reached its answer (the lean path calls the answer it was
    given at startup, not through the route, so it never adds one)."""
    calls: list[str] = []
    spy(monkeypatch, rr, "search_answer", calls)
    return calls


def _filled(client: TestClient, multi: bool = False) -> str:
    name = "lean_" + uuid.uuid4().hex[:8]
    assert client.post("/v1/collections", json={"name": name, "hybrid": True,
                                                "multi_tenant": multi}).status_code == 201
    docs = [{"id": f"d{i}", "text": f"a {WORDS[i % 8]} by the {WORDS[(i * 3) % 8]} {i}",
             "metadata": {"n": i}} for i in range(30)]
    for tenant in ("acme", "zeta") if multi else (None,):
        r = client.post(f"/v1/collections/{name}/documents", json={"documents": docs},
                        headers={"X-Tenant": tenant} if tenant else {})
        assert r.status_code == 200, r.text
    return name


def _answers(c: TestClient, requests: list[tuple[str, Any, dict[str, str]]]
             ) -> list[tuple[int, Any, Any]]:
    return [_answer(c, path, body, headers) for path, body, headers in requests]


def test_the_lean_search_answers_as_the_route(make_client: MakeClient,
                                              by_route: list[str]) -> None:
    lean, route = make_client(), make_client(lean_embeddings=False)
    name, multi = _filled(lean), _filled(lean, multi=True)
    url, murl = f"/v1/collections/{name}/search", f"/v1/collections/{multi}/search"
    dim = lean.get(f"/v1/collections/{name}").json()["dim"]
    strong = {"consistency": "Strong"}
    requests: list[tuple[str, Any, dict[str, str]]] = [
        (url, {"query": "a dog by the river", "mode": "dense", **strong}, {}),
        (url, {"query": "a dog by the river", "mode": "bm25", "top_k": 3, **strong}, {}),
        (url, {"query": "snow and a duck", "mode": "hybrid", "fields": ["text", "vector"],
               **strong}, {}),
        (url, {"vector": [0.1] * dim, "top_k": 4, "filter": {"key": "n", "op": "gte", "value": 10},
               **strong}, {}),
        (url.replace("lean_", "lean-"), {"query": "a cat", **strong}, {}),  # '-' is '_'
        (murl, {"query": "a horse", **strong}, {"X-Tenant": "acme"}),
        (murl, {"query": "a horse", "tenant": "zeta", **strong}, {"X-Tenant": "acme"}),  # 422
        (murl, {"query": "a horse", **strong}, {}),  # no tenant in a multi-tenant one
        (url, {"vector": [0.1] * (dim + 1)}, {}),  # 409 from the answer: another shape
        ("/v1/collections/no_such_one/search", {"query": "x"}, {}),  # 404
        ("/v1/collections/9bad/search", {"query": "x"}, {}),  # the route's 422 (the name)
        (url, {"query": "x", "surprise": 1}, {}),  # an unknown field: the route's 422
        (url, b'{"query": ', {"Content-Type": "application/json"}),  # not JSON
        (url, {"top_k": 0, "query": "x"}, {}),
    ]
    by_route.clear()
    got = _answers(lean, requests)
    assert by_route == []  # answered, and never by the route
    want = _answers(route, requests)
    assert by_route == ["search_answer"] * 10  # the ten with a valid name and body
    assert [s for s, _, _ in got] == [200, 200, 200, 200, 200, 200, 422, 422, 409, 404,
                                      422, 422, 422, 422]
    assert [h["id"] for h in got[3][1]["hits"]] and all(
        int(h["id"][1:]) >= 10 for h in got[3][1]["hits"])
    _all_same(got, want)
    metrics = lean.get("/metrics").text
    assert 'method="POST",route="/v1/collections/{name}/search",status="200"' in metrics
    assert 'method="POST",route="/v1/collections/{name}/search",status="404"' in metrics


def test_the_lean_search_checks_keys_as_the_route(make_client: MakeClient, tmp_path: Path,
                                                  by_route: list[str]) -> None:
    path = tmp_path / "keys.jsonl"
    keys, secrets = {}, {}
    for label, scope in (("admin", "admin"), ("read", "read")):
        key, secrets[label] = new_key(scope=scope)
        keys[key.id] = key
    write_keys(path, keys)
    lean = make_client(keys_file=path)
    route = make_client(keys_file=path, lean_embeddings=False)
    admin = {"Authorization": f"Bearer {secrets['admin']}"}
    name = "lean_" + uuid.uuid4().hex[:8]
    assert lean.post("/v1/collections", json={"name": name}, headers=admin).status_code == 201
    docs = [{"id": f"d{i}", "text": f"a {w}"} for i, w in enumerate(WORDS)]
    assert lean.post(f"/v1/collections/{name}/documents", json={"documents": docs},
                     headers=admin).status_code == 200
    url = f"/v1/collections/{name}/search"
    read = {"Authorization": f"Bearer {secrets['read']}"}
    requests: list[tuple[str, Any, dict[str, str]]] = [
        (url, {"query": "a dog", "consistency": "Strong"}, {}),  # no key: 401
        (url, {"query": "a dog"}, {"Authorization": "Bearer not-a-key"}),  # 401
        (url, {"query": "a dog", "consistency": "Strong"}, read),  # 200
        (url, {"query": 3}, {}),  # a bad body without a key: 401 first, as the route
        (url, {"query": 3}, read),  # 422
    ]
    got, want = _answers(lean, requests), _answers(route, requests)
    assert [s for s, _, _ in got] == [401, 401, 200, 401, 422]
    _all_same(got, want)
    assert by_route == ["search_answer"]  # the route-only app's one 200
    lean.delete(f"/v1/collections/{name}", headers=admin)
