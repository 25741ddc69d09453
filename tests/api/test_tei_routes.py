"""Text Embeddings Inference's routes in TEI's shapes: ``POST /``, ``/embed_all``,
``/rerank``, ``/similarity``, ``/tokenize``, ``/decode`` and ``/info``, checked against the
encoder itself and against each other; errors in TEI's ``{error, error_type}``."""

from __future__ import annotations

import numpy as np
import pytest
from api_errors import error_of
from conftest import MakeClient
from fastapi.testclient import TestClient
from numerics import encoder_atol

DOCS = ["a dog runs in the park", "the stock market fell sharply", "a puppy plays on grass",
        "quarterly zorblax revenue"]


def embed(client: TestClient, texts: list[str]) -> np.ndarray:
    r = client.post("/embed", json={"inputs": texts})
    assert r.status_code == 200, r.text
    return np.array(r.json(), np.float32)


def test_root_is_embed(client: TestClient) -> None:
    r = client.post("/", json={"inputs": DOCS[:2], "truncate": True, "normalize": True})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(np.array(r.json()), embed(client, DOCS[:2]), atol=1e-6)
    assert client.get("/", follow_redirects=False).status_code == 307  # GET: the web page


def test_embed_all_gives_each_tokens_vectors(client: TestClient) -> None:
    svc = client.app.state.service  # type: ignore[attr-defined]
    r = client.post("/embed_all", json={"inputs": DOCS[:2]})
    assert r.status_code == 200, r.text
    ids, _ = svc.encoder.tokenize(DOCS[:2])
    out = r.json()
    assert [len(x) for x in out] == [len(i) for i in ids]
    assert all(len(row) == svc.info.dim for x in out for row in x)
    want = svc.encoder.token_vectors(DOCS[:1])[0]
    np.testing.assert_allclose(np.array(out[0]), want, atol=encoder_atol(1e-5, "torch"))


def test_similarity_is_the_cosine(client: TestClient) -> None:
    r = client.post("/similarity", json={"inputs": {"source_sentence": DOCS[0],
                                                    "sentences": DOCS[1:]}})
    assert r.status_code == 200, r.text
    x = embed(client, DOCS)
    np.testing.assert_allclose(r.json(), x[1:] @ x[0], atol=1e-5)
    bad = client.post("/similarity", json={"inputs": {"source_sentence": "a", "sentences": ["b"]},
                                           "parameters": {"truncate": "yes"}})
    assert bad.status_code == 422 and "truncate" in error_of(bad)["error"]


def test_rerank_orders_by_the_cosine(client: TestClient) -> None:
    query = "a dog playing outside"
    r = client.post("/rerank", json={"query": query, "texts": DOCS, "return_text": True,
                                     "raw_scores": True})
    assert r.status_code == 200, r.text
    ranks = r.json()
    x = embed(client, [query, *DOCS])
    cos = x[1:] @ x[0]
    assert [k["index"] for k in ranks] == list(np.argsort(-cos))
    assert [k["score"] for k in ranks] == pytest.approx(sorted(cos, reverse=True), abs=1e-5)
    assert [k["text"] for k in ranks] == [DOCS[k["index"]] for k in ranks]
    plain = client.post("/rerank", json={"query": query, "texts": DOCS}).json()
    assert "text" not in plain[0]
    assert [k["score"] for k in plain] == pytest.approx([(1 + s) / 2 for s in sorted(
        cos, reverse=True)], abs=1e-5)


def test_rerank_hybrid_adds_the_words(client: TestClient) -> None:
    """A rare word only BM25 sees: with all the weight on BM25 its text comes first, and the
    fused scores lie in [0, 1]."""
    body = {"query": "zorblax", "texts": DOCS, "hybrid": True}
    ranks = client.post("/rerank", json={**body, "dense_weight": 0.0}).json()
    assert ranks[0]["index"] == 3 and ranks[0]["score"] == pytest.approx(1.0)
    fused = client.post("/rerank", json=body).json()
    assert sorted(k["index"] for k in fused) == [0, 1, 2, 3]
    assert all(0.0 <= k["score"] <= 1.0 + 1e-9 for k in fused)
    assert [k["score"] for k in fused] == sorted((k["score"] for k in fused), reverse=True)


def test_tokenize_and_decode(client: TestClient) -> None:
    svc = client.app.state.service  # type: ignore[attr-defined]
    text = "Le café est très bon"
    r = client.post("/tokenize", json={"inputs": [text, "a dog"]})
    assert r.status_code == 200, r.text
    tokens = r.json()[0]
    ids, _ = svc.encoder.tokenize([text])
    assert [t["id"] for t in tokens] == ids[0]
    assert tokens[0]["special"] and tokens[0]["start"] is None
    raw = text.encode()
    for t in tokens[1:]:
        assert raw[t["start"]:t["stop"]].decode() == t["text"], t  # TEI's byte offsets
    plain = client.post("/tokenize", json={"inputs": text, "add_special_tokens": False}).json()
    assert [t["id"] for t in plain[0]] == ids[0][1:]
    back = client.post("/decode", json={"ids": ids[0]})
    assert back.status_code == 200 and back.json()[0].strip() == text.lower()
    two = client.post("/decode", json={"ids": [ids[0], ids[0][:2]]}).json()
    assert len(two) == 2 and two[0] == back.json()[0]
    bad = client.post("/decode", json={"ids": [10**7]})
    assert bad.status_code == 422 and "vocabulary" in error_of(bad)["error"]
    assert client.post("/decode", json={"ids": []}).status_code == 422


def test_info(make_client: MakeClient) -> None:
    client = make_client(max_inputs=7)
    svc = client.app.state.service  # type: ignore[attr-defined]
    info = client.get("/info").json()
    assert info["model_id"] == svc.info.name and info["model_sha"] == svc.info.fingerprint
    assert info["max_client_batch_size"] == 7
    assert info["max_input_length"] == svc.encoder.max_tokens
    assert info["model_type"] == {"embedding": {"pooling": "attention"}}
    r = client.post("/rerank", json={"query": "q", "texts": ["t"] * 8})
    assert r.status_code == 413 and error_of(r)["error_type"] == "payload_too_large"


def test_tei_routes_need_the_key(make_client: MakeClient) -> None:
    client = make_client(api_key="k")
    for method, path, body in (("POST", "/", {"inputs": "a"}), ("GET", "/info", None),
                               ("POST", "/rerank", {"query": "a", "texts": ["b"]})):
        r = client.request(method, path, json=body)
        assert r.status_code == 401 and error_of(r)["error_type"] == "unauthorized", path
        ok = client.request(method, path, json=body, headers={"Authorization": "Bearer k"})
        assert ok.status_code == 200, ok.text
