"""``POST /v1/embeddings`` answered past FastAPI's routing (``LeanEmbeddings``) answers as
the route does: the same vectors, the same errors, the same key checks and metrics."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import MakeClient
from fastapi.testclient import TestClient

import api.embedding_routes as er
from api.keys import new_key, write_keys


def _answers(c: TestClient, requests: list[tuple[Any, dict[str, str]]]
             ) -> list[tuple[int, Any]]:
    out = []
    for body, headers in requests:
        if isinstance(body, bytes):
            r = c.post("/v1/embeddings", content=body, headers=headers)
        else:
            r = c.post("/v1/embeddings", json=body, headers=headers)
        try:
            out.append((r.status_code, r.json()))
        except json.JSONDecodeError:
            out.append((r.status_code, r.text))
    return out


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
def who_answered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The function that called :func:`embeddings_answer`, each time: ``__call__`` (the
    lean path) or ``embeddings`` (the route)."""
    callers: list[str] = []
    real = er.embeddings_answer

    async def spy(*args: Any) -> Any:
        callers.append(inspect.stack()[1].function)
        return await real(*args)

    monkeypatch.setattr(er, "embeddings_answer", spy)
    return callers


def test_the_lean_path_answers_as_the_route(make_client: MakeClient,
                                            who_answered: list[str]) -> None:
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
    who_answered.clear()
    got = _answers(lean, requests)
    by_lean = who_answered.count("__call__")
    assert by_lean == 6 and who_answered.count("embeddings") == 0, who_answered
    who_answered.clear()
    want = _answers(route, requests)
    assert who_answered == ["embeddings"] * 6  # the same six reach the answer, by the route
    assert [s for s, _ in got] == [200, 200, 200, 422, 404, 422, 422, 422, 422, 422, 422]
    for (s1, b1), (s2, b2) in zip(got, want, strict=True):
        assert s1 == s2
        _same(b1, b2)
    metrics = lean.get("/metrics").text
    assert 'method="POST",route="/v1/embeddings",status="200"' in metrics
    assert 'method="POST",route="/v1/embeddings",status="404"' in metrics


def test_the_lean_path_checks_keys_as_the_route(make_client: MakeClient, tmp_path: Path,
                                                who_answered: list[str]) -> None:
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
    assert [s for s, _ in got] == [401, 401, 401, 200, 401, 422]
    for (s1, b1), (s2, b2) in zip(got, want, strict=True):
        assert s1 == s2
        _same(b1, b2)
    assert who_answered == ["__call__", "embeddings"]
    # the key's rate: a burst of 1 a second, then 429 with Retry-After
    statuses = [lean.post("/v1/embeddings", json={"input": "x"}, headers=auth(secrets["slow"]))
                for _ in range(3)]
    assert statuses[0].status_code == 200
    limited = [r for r in statuses if r.status_code == 429]
    assert limited and int(limited[0].headers["Retry-After"]) >= 1
