"""Search extras on Milvus Lite and the Milvus 2.3.5 server: ``offset`` pages,
``score_threshold`` and several searches in one request."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from api_errors import error_of
from conftest import MakeClient
from fastapi.testclient import TestClient

WORDS = ["dog", "cat", "river", "park", "snow", "horse", "duck", "tree"]


@pytest.fixture
def filled(make_client: MakeClient, store_uri: str) -> Iterator[tuple[TestClient, str]]:
    client = make_client(store=store_uri, max_searches=4, max_offset=30)
    name = "x_" + uuid.uuid4().hex[:10]
    assert client.post("/v1/collections", json={"name": name}).status_code == 201
    docs = [{"id": f"d{i}", "text": f"a {WORDS[i % 8]} and a {WORDS[(i * 3) % 8]} {i}",
             "metadata": {"n": i, "kind": "odd" if i % 2 else "even"}} for i in range(40)]
    r = client.post(f"/v1/collections/{name}/documents", json={"documents": docs})
    assert r.status_code == 200, r.text
    yield client, name
    client.delete(f"/v1/collections/{name}")


def search(client: TestClient, name: str, **body: object) -> list[dict]:  # type: ignore[type-arg]
    r = client.post(f"/v1/collections/{name}/search",
                    json={"consistency": "Strong", "mode": "dense", **body})
    assert r.status_code == 200, r.text
    return r.json()["hits"]  # type: ignore[no-any-return]


def test_offset_pages_through_the_ranking(filled: tuple[TestClient, str]) -> None:
    client, name = filled
    whole = [h["id"] for h in search(client, name, query="a dog in the park", top_k=30)]
    assert len(whole) == 30
    pages = [h["id"] for off in range(0, 30, 7)
             for h in search(client, name, query="a dog in the park", top_k=7, offset=off)]
    assert pages[:30] == whole
    assert search(client, name, query="dog", top_k=5, offset=30, filter={
        "key": "n", "op": "lt", "value": 10}) == []  # past the 10 that match
    r = client.post(f"/v1/collections/{name}/search", json={"query": "dog", "offset": 31})
    assert r.status_code == 422 and "QKV_MAX_OFFSET" in error_of(r)["error"]


def test_score_threshold_keeps_the_hits_at_or_above_it(filled: tuple[TestClient, str]) -> None:
    client, name = filled
    hits = search(client, name, query="a snow horse", top_k=20)
    cut = hits[6]["score"]
    kept = search(client, name, query="a snow horse", top_k=20, score_threshold=cut)
    assert [h["id"] for h in kept] == [h["id"] for h in hits if h["score"] >= cut]
    assert 7 <= len(kept) < 20
    assert abs(sum(h["weight"] for h in kept) - 1) < 1e-5  # weights are over what is returned
    assert search(client, name, query="a snow horse", score_threshold=1.01) == []


def test_batch_answers_each_search_as_alone(filled: tuple[TestClient, str]) -> None:
    client, name = filled
    searches = [{"query": "a duck on the river", "top_k": 3, "mode": "dense"},
                {"query": "a cat", "top_k": 5, "mode": "dense",
                 "filter": {"key": "kind", "op": "eq", "value": "odd"}},
                {"query": "a cat", "top_k": 4, "offset": 2, "mode": "dense"},
                {"query": "the tree", "top_k": 3, "mode": "dense", "fields": ["vector"]}]
    for s in searches:
        s["consistency"] = "Strong"
    r = client.post(f"/v1/collections/{name}/search/batch", json={"searches": searches})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == 4
    for s, res in zip(searches, results, strict=True):
        alone = client.post(f"/v1/collections/{name}/search", json=s).json()
        assert [h["id"] for h in res["hits"]] == [h["id"] for h in alone["hits"]]
        for a, b in zip(res["hits"], alone["hits"], strict=True):
            assert a["score"] == pytest.approx(b["score"], abs=1e-5)
            assert a["weight"] == pytest.approx(b["weight"], abs=1e-4)
    assert all(h["metadata"]["kind"] == "odd" for h in results[1]["hits"])
    assert len(results[3]["hits"][0]["vector"]) > 0 and "vector" not in results[0]["hits"][0]


def test_batch_refusals_name_the_search(filled: tuple[TestClient, str]) -> None:
    client, name = filled
    url = f"/v1/collections/{name}/search/batch"
    r = client.post(url, json={"searches": [{"query": "a"}] * 5})
    assert r.status_code == 413 and "QKV_MAX_SEARCHES" in error_of(r)["error"]
    r = client.post(url, json={"searches": [{"query": "a"}, {"query": "b", "vector": [0.1]}]})
    assert r.status_code == 422 and "searches.1" in error_of(r)["error"]
    r = client.post(url, json={"searches": [{"query": "a"}, {"query": "b", "filter": {
        "key": "k", "op": "like", "value": "x_%"}}]})
    assert r.status_code == 422 and "searches.1: " in error_of(r)["error"]
    assert client.post(url, json={"searches": []}).status_code == 422
    assert client.post("/v1/collections/nope/search/batch",
                       json={"searches": [{"query": "a"}]}).status_code == 404
