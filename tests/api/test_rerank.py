"""The reranker served (issue 74): a search's ``rerank`` reorders the first stage's best hits
by the reranker's own scores, TEI's ``/rerank`` uses it where one is loaded, and what a
search may not ask of it is refused in words."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from api_errors import error_of
from conftest import MakeClient
from fastapi.testclient import TestClient

import encoder
from encoder import reranker

WORDS = ["dog", "cat", "river", "park", "snow", "horse", "duck", "tree"]


@pytest.fixture(scope="module")
def tiny_reranker_dir(tiny_encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory
                      ) -> Path:
    """The tiny encoder's network with a random head: untrained, but its scores differ from
    the first stage's order, so a reordering shows."""
    base = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    scorer = reranker.from_encoder(base.model)
    torch.manual_seed(3)
    with torch.no_grad():
        scorer.head.weight.normal_()
    path = tmp_path_factory.mktemp("tiny-reranker")
    reranker.save(scorer, base.tokenizer, path, {})
    return path


@pytest.fixture
def filled(make_client: MakeClient, tiny_reranker_dir: Path
           ) -> Iterator[tuple[TestClient, str]]:
    client = make_client(reranker=tiny_reranker_dir)
    name = "r_" + uuid.uuid4().hex[:10]
    assert client.post("/v1/collections", json={"name": name}).status_code == 201
    docs = [{"id": f"d{i}", "text": f"a {WORDS[i % 8]} and a {WORDS[(i * 3) % 8]} {i}"}
            for i in range(30)]
    r = client.post(f"/v1/collections/{name}/documents", json={"documents": docs})
    assert r.status_code == 200, r.text
    yield client, name
    client.delete(f"/v1/collections/{name}")


def post(client: TestClient, name: str, **body: object) -> dict:  # type: ignore[type-arg]
    r = client.post(f"/v1/collections/{name}/search", json={"consistency": "Strong", **body})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_rerank_orders_the_first_stage_best_by_the_reranker(
        filled: tuple[TestClient, str], mode: str) -> None:
    client, name = filled
    rr = client.app.state.service.reranker  # type: ignore[attr-defined]
    query = "a dog by the river"
    first = post(client, name, query=query, mode=mode, top_k=12)["hits"]
    got = post(client, name, query=query, mode=mode, top_k=5, rerank={"top": 12})["hits"]
    want = rr.score(query, [h["text"] for h in first])
    order = np.argsort(-want, kind="stable")[:5]
    assert [h["id"] for h in got] == [first[int(j)]["id"] for j in order]
    np.testing.assert_allclose([h["score"] for h in got], want[order], atol=1e-5)
    assert all(h["sources"]["rerank"] == h["score"] for h in got)
    side = "dense" if mode == "dense" else None
    if side:  # the first stage's score stays beside the reranker's
        by_id = {h["id"]: h["score"] for h in first}
        assert all(abs(h["sources"]["dense"] - by_id[h["id"]]) < 1e-5 for h in got)
    assert [h["id"] for h in got] != [h["id"] for h in first[:5]]  # it did reorder
    paged = post(client, name, query=query, mode=mode, top_k=5, offset=5, rerank={"top": 12})
    assert [h["id"] for h in paged["hits"]] == [first[int(j)]["id"] for j in
                                                np.argsort(-want, kind="stable")[5:10]]


def test_tei_rerank_uses_the_reranker(filled: tuple[TestClient, str]) -> None:
    client, _ = filled
    rr = client.app.state.service.reranker  # type: ignore[attr-defined]
    texts = ["a dog runs", "the market fell", "a puppy plays", "snow on a tree"]
    r = client.post("/rerank", json={"query": "a dog", "texts": texts, "raw_scores": True})
    assert r.status_code == 200, r.text
    want = rr.score("a dog", texts)
    assert [x["index"] for x in r.json()] == list(np.argsort(-want, kind="stable"))
    np.testing.assert_allclose(sorted((x["score"] for x in r.json()), reverse=True),
                               np.sort(want)[::-1], atol=1e-5)
    long = " ".join(["word"] * 60)  # past the tiny encoder's 24 tokens
    r = client.post("/rerank", json={"query": "a dog", "texts": ["a dog", long]})
    assert r.status_code == 422 and "input 2" in error_of(r)["error"]
    r = client.post("/rerank", json={"query": "a dog", "texts": ["a dog", long],
                                     "truncate": True})
    assert r.status_code == 200, r.text
    info = client.get("/info").json()["model_type"]
    assert info["reranker"]["fingerprint"] == rr.fingerprint and "embedding" in info
    prob = client.post("/rerank", json={"query": "a dog", "texts": texts}).json()
    np.testing.assert_allclose(sorted(x["score"] for x in prob),
                               np.sort(1 / (1 + np.exp(-want))), atol=1e-5)


def test_what_rerank_may_not_ask(filled: tuple[TestClient, str], make_client: MakeClient
                                 ) -> None:
    client, name = filled
    url = f"/v1/collections/{name}/search"
    r = client.post(url, json={"query": "dog", "top_k": 10, "rerank": {"top": 5}})
    assert r.status_code == 422 and "offset + top_k" in error_of(r)["error"]
    r = client.post(url, json={"vector": [0.1] * 32, "rerank": {"top": 20}})
    assert r.status_code == 422 and "query" in error_of(r)["error"]
    r = client.post(url, json={"query": "dog", "rerank": {"top": 20, "depth": 3}})
    assert r.status_code == 422 and "depth" in error_of(r)["error"]
    r = client.post(url, json={"query": "dog", "rerank": {"top": 5000}})
    assert r.status_code == 422 and "QKV_MAX_TOP_K" in error_of(r)["error"]
    plain = make_client()  # no reranker
    r = plain.post(url, json={"query": "dog", "rerank": {"top": 20}})
    assert r.status_code == 409 and "QKV_RERANKER" in error_of(r)["error"]
