"""Issue 68, finding 5: filters and metadata too large or too deeply nested were taken in
and then kept a store busy for seconds (2,000 'in' clauses: 10 s, then 503 for everyone) or
broke every later read of the collection (metadata 250-600 deep: each search, attend and
get answered 500). Now each is a 422 naming the limit, before a store sees it, and nothing
is written."""

from __future__ import annotations

import time
from typing import Any

from api_errors import error_of
from fastapi.testclient import TestClient

from index.filters import MAX_FILTER_DEPTH, MAX_FILTER_TERMS
from index.store import MAX_METADATA_DEPTH


def nested(depth: int, leaf: Any) -> Any:
    out = leaf
    for _ in range(depth):
        out = {"a": out}
    return out


def test_giant_and_deep_filters_are_422_at_once(client: TestClient, collection: str) -> None:
    url = f"/v1/collections/{collection}/search"
    eq = {"key": "k", "op": "eq", "value": 1}
    many = {"or": [{"key": "k", "op": "in", "value": [i, i + 1]} for i in range(2000)]}
    deep: dict[str, Any] = eq
    for _ in range(300):
        deep = {"and": [deep]}
    for filt, limit in ((many, f"at most {MAX_FILTER_TERMS} comparisons"),
                        (deep, f"at most {MAX_FILTER_DEPTH} deep")):
        t0 = time.perf_counter()
        r = client.post(url, json={"query": "x", "filter": filt})
        assert r.status_code == 422, r.text[:300]
        assert limit in error_of(r)["error"]
        assert time.perf_counter() - t0 < 5  # refused before any store work
    ok = {"and": [{"or": [eq, eq]}, {"key": "k", "op": "in", "value": list(range(100))}]}
    assert client.post(url, json={"query": "x", "filter": ok}).status_code == 200
    for r in (client.post(f"/v1/collections/{collection}/search/batch", json={"searches": [
                  {"query": "x"}, {"query": "x", "filter": many}]}),
              client.post(f"/v1/collections/{collection}/attend",
                          json={"query": "x", "filter": deep})):
        assert r.status_code == 422, r.text[:300]


def test_metadata_nested_too_deep_is_refused_and_reads_go_on(client: TestClient,
                                                              collection: str) -> None:
    url = f"/v1/collections/{collection}/documents"
    for depth in (MAX_METADATA_DEPTH + 1, 300, 600):
        r = client.post(url, json={"documents": [{"id": "deep", "text": "deep text",
                                                  "metadata": nested(depth, 1)}]})
        assert r.status_code == 422, (depth, r.text[:300])
        assert f"nest at most {MAX_METADATA_DEPTH} deep" in error_of(r)["error"]
    deepest_ok = nested(MAX_METADATA_DEPTH - 1, [1])
    r = client.post(url, json={"documents": [{"id": "ok", "text": "fine text",
                                              "metadata": deepest_ok}]})
    assert r.status_code == 200, r.text[:300]
    assert client.get(f"{url}/deep").status_code == 404  # nothing of the refused one
    got = client.get(f"{url}/ok")
    assert got.status_code == 200 and got.json()["metadata"] == deepest_ok
    r = client.post(f"/v1/collections/{collection}/search",
                    json={"query": "fine", "consistency": "Strong"})
    assert r.status_code == 200 and r.json()["hits"][0]["metadata"] == deepest_ok


def test_a_body_nested_past_any_parser_is_a_4xx(client: TestClient, collection: str) -> None:
    body = "[" * 100_000 + "]" * 100_000
    r = client.post(f"/v1/collections/{collection}/search", content=body,
                    headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
