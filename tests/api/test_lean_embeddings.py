"""``POST /v1/embeddings`` and TEI's ``/embed`` answered past FastAPI's routing
(``api.lean.LeanRoutes``) answer as the routes do: the same vectors, the same errors, the same
key checks and metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import MakeClient
from fastapi.testclient import TestClient

import api.embedding_routes as er
import api.tei_routes as tr
from api.keys import new_key, write_keys


def _answer(c: TestClient, path: str, body: Any, headers: dict[str, str]
            ) -> tuple[int, Any, Any]:
    """A POST's status, body (JSON, else text) and X-Truncated header; ``body`` bytes are
    sent as they are."""
    if isinstance(body, bytes):
        r = c.post(path, content=body, headers=headers)
    else:
        r = c.post(path, json=body, headers=headers)
    try:
        return r.status_code, r.json(), r.headers.get("x-truncated")
    except json.JSONDecodeError:
        return r.status_code, r.text, r.headers.get("x-truncated")


def _answers(c: TestClient, requests: list[tuple[Any, dict[str, str]]],
             path: str = "/v1/embeddings") -> list[tuple[int, Any, Any]]:
    return [_answer(c, path, body, headers) for body, headers in requests]


def _all_same(got: list[tuple[int, Any, Any]], want: list[tuple[int, Any, Any]]) -> None:
    for (s1, b1, t1), (s2, b2, t2) in zip(got, want, strict=True):
        assert (s1, t1) == (s2, t2)
        _same(b1, b2)


def _same(a: Any, b: Any) -> None:
    """Equal JSON, floats to float32 rounding."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (a, b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list) and a and isinstance(a[0], float):
        assert np.allclose(a, b, atol=1e-6), (a[:4], b[:4])
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (a, b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert a == b, (a, b)


@pytest.fixture
def by_route(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A name each time a route's own function reached its answer: the lean path calls the
    answer it was given at startup, not through the route, so it never adds one."""
    calls: list[str] = []
    for module, name in ((er, "embeddings_answer"), (tr, "embed_answer")):
        spy(monkeypatch, module, name, calls)
    return calls


def spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, calls: list[str]) -> None:
    """``module.name`` replaced by a function that adds ``name`` to ``calls``, then calls it."""
    real = getattr(module, name)

    def call(*args: Any) -> Any:
        calls.append(name)
        return real(*args)

    monkeypatch.setattr(module, name, call)


def test_the_lean_path_answers_as_the_route(make_client: MakeClient,
                                            by_route: list[str]) -> None:
    lean, route = make_client(), make_client(lean_embeddings=False)
    dims = lean.get("/v1/models").json()["data"][0]["dims"]
    json_ct = {"Content-Type": "application/json"}
    requests: list[tuple[Any, dict[str, str]]] = [
        ({"input": "a quiet harbour at dawn"}, {}),
        ({"input": ["two texts", "in one request"], "encoding_format": "base64"}, {}),
        ({"input": "cut short", "dimensions": dims[-1]}, {}),
        ({"input": "x", "dimensions": 7}, {}),  # 422 from the answer
        ({"input": "x", "model": "no-such-model"}, {}),  # 404
        ({"input": []}, {}),  # 422 from the answer
        ({"input": "word " * 3000, "truncate": False}, {}),  # over the token limit: 422
        ({"input": "x", "surprise": 1}, {}),  # an unknown field: the route's 422
        (b'{"input": ', json_ct),  # not JSON: the route's 422
        (b'{"input": "x"}', {"Content-Type": "text/plain"}),  # not sent as JSON
        ({"input": 3}, {}),
    ]
    by_route.clear()
    got = _answers(lean, requests)
    assert by_route == []  # answered, and never by the route
    want = _answers(route, requests)
    assert by_route == ["embeddings_answer"] * 6  # the same six reach the answer there
    assert [s for s, _, _ in got] == [200, 200, 200, 422, 404, 422, 422, 422, 422, 422, 422]
    _all_same(got, want)
    metrics = lean.get("/metrics").text
    assert 'method="POST",route="/v1/embeddings",status="200"' in metrics
    assert 'method="POST",route="/v1/embeddings",status="404"' in metrics


def test_the_lean_path_checks_keys_as_the_route(make_client: MakeClient, tmp_path: Path,
                                                by_route: list[str]) -> None:
    path = tmp_path / "keys.jsonl"
    keys, secrets = {}, {}
    for label, scope, rps in (("read", "read", None), ("slow", "read", 1)):
        key, secrets[label] = new_key(scope=scope, rps=rps)
        keys[key.id] = key
    write_keys(path, keys)
    lean = make_client(keys_file=path)
    route = make_client(keys_file=path, lean_embeddings=False)

    def auth(secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    requests: list[tuple[Any, dict[str, str]]] = [
        ({"input": "x"}, {}),  # no key: 401
        ({"input": "x"}, auth("not-a-key")),  # 401
        ({"input": "x"}, {"Authorization": "Basic abc"}),  # not a bearer key: 401
        ({"input": "x"}, auth(secrets["read"])),  # 200
        ({"input": 3}, {}),  # a bad body without a key: 401 first, as the route
        ({"input": 3}, auth(secrets["read"])),  # 422
    ]
    got, want = _answers(lean, requests), _answers(route, requests)
    assert [s for s, _, _ in got] == [401, 401, 401, 200, 401, 422]
    _all_same(got, want)
    assert by_route == ["embeddings_answer"]  # the route-only app's one 200
    tei = [({"inputs": "x"}, {}), ({"inputs": "x"}, auth(secrets["read"]))]
    got, want = _answers(lean, tei, "/embed"), _answers(route, tei, "/embed")
    assert [s for s, _, _ in got] == [401, 200]
    _all_same(got, want)
    # the key's rate: a burst of 1 a second, then 429 with Retry-After
    statuses = [lean.post("/v1/embeddings", json={"input": "x"}, headers=auth(secrets["slow"]))
                for _ in range(3)]
    assert statuses[0].status_code == 200
    limited = [r for r in statuses if r.status_code == 429]
    assert limited and int(limited[0].headers["Retry-After"]) >= 1


def test_teis_embed_answers_as_its_route(make_client: MakeClient, by_route: list[str]) -> None:
    lean, route = make_client(), make_client(lean_embeddings=False)
    requests: list[tuple[Any, dict[str, str]]] = [
        ({"inputs": "a quiet harbour at dawn"}, {}),
        ({"inputs": ["two texts", "in one request"], "normalize": False}, {}),
        ({"inputs": "word " * 3000, "truncate": True}, {}),  # cut: X-Truncated true
        ({"inputs": "word " * 3000}, {}),  # over the limit, TEI's default: an error
        ({"inputs": []}, {}),  # the route's 422 (the model wants one input at least)
        ({"inputs": 3}, {}),  # the route's 422, in TEI's shape
        (b"{", {"Content-Type": "application/json"}),
    ]
    for path in ("/embed", "/"):
        by_route.clear()
        got = _answers(lean, requests, path)
        assert by_route == []
        want = _answers(route, requests, path)
        assert by_route == ["embed_answer"] * 4
        assert [s for s, _, _ in got][:3] == [200, 200, 200] and got[2][2] == "true"
        assert all(s >= 400 for s, _, _ in got[3:])
        _all_same(got, want)
