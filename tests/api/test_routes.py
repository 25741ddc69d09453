"""Every route through TestClient, on a Milvus Lite file, with each error status."""

from __future__ import annotations

import base64
import uuid

import numpy as np
import pytest
from api_errors import error_of
from conftest import MakeClient
from fastapi.testclient import TestClient

from index import EncoderInfo, MilvusStore

DOCS = [
    {"id": "d1", "text": "a brown dog runs in the park", "metadata": {"lang": "en", "n": 1}},
    {"id": "d2", "text": "a cat sleeps on the beach", "value": "un chat dort",
     "metadata": {"lang": "fr", "n": 2}},
    {"id": "d3", "text": "a horse stands near the river", "metadata": {"lang": "en", "n": 3}},
    {"id": "d4", "text": "two ducks swim in the snow", "metadata": {"lang": "de", "n": 4}},
]


def assert_error(r, status: int, error_type: str | None = None) -> dict:  # type: ignore[no-untyped-def]
    assert r.status_code == status, r.text
    body = error_of(r)
    if error_type:
        assert body["error_type"] == error_type
    return body


def add_docs(client: TestClient, name: str, docs: list[dict] = DOCS) -> None:  # type: ignore[type-arg]
    r = client.post(f"/v1/collections/{name}/documents", json={"documents": docs})
    assert r.status_code == 200, r.text
    assert r.json()["upserted"] == len({d["id"] for d in docs})


# operations
def test_health_ready_metrics(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    r = client.get("/ready")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    client.post("/v1/embeddings", json={"input": ["a", "b"]})
    text = client.get("/metrics").text
    line = 'qkv_request_seconds_count{method="POST",route="/v1/embeddings",status="200"} 1.0'
    assert line in text
    assert "qkv_encoder_batch_texts_sum 2.0" in text
    assert "qkv_encoder_queue_depth 0.0" in text
    assert "qkv_store_errors_total" in text


def test_openapi_and_unknown_route(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path in ("/v1/embeddings", "/embed", "/v1/models", "/v1/collections/{name}/search",
                 "/v1/collections/{name}/attend", "/v1/collections/{name}/generate"):
        assert path in spec["paths"]
    assert_error(client.get("/nope"), 404, "not_found")
    assert_error(client.put("/v1/embeddings", json={}), 405, "method_not_allowed")


# embeddings
def test_openai_embeddings_float_and_base64(client: TestClient) -> None:
    card = client.get("/v1/models").json()["data"][0]
    r = client.post("/v1/embeddings", json={"input": ["a dog", "a cat"], "model": card["id"]})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "list" and body["model"] == card["id"]
    x = np.array([d["embedding"] for d in body["data"]], np.float32)
    assert x.shape == (2, card["dim"]) and [d["index"] for d in body["data"]] == [0, 1]
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 2
    assert body["truncated"] is False
    r = client.post("/v1/embeddings", json={"input": ["a dog", "a cat"],
                                             "encoding_format": "base64"})
    b64 = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in r.json()["data"]]
    np.testing.assert_allclose(np.stack(b64), x, atol=1e-6)
    single = client.post("/v1/embeddings", json={"input": "a dog"}).json()  # no model: default
    np.testing.assert_allclose(single["data"][0]["embedding"], x[0], atol=2e-3)  # bf16 noise


def test_one_text_answers_as_in_a_list(client: TestClient) -> None:
    """A request of one text is tokenized in the encoder's thread (``embed_text``), a list
    on the event loop: the same vector, token count, cut and refusal either way."""
    long = " ".join(["w"] * 400)

    def tokens(inputs: str | list[str]) -> int:
        r = client.post("/v1/embeddings", json={"input": inputs, "truncate": True})
        assert r.status_code == 200
        return r.json()["usage"]["prompt_tokens"]

    for text in ("a dog", long):
        one = client.post("/v1/embeddings", json={"input": text, "truncate": True}).json()
        pair = client.post("/v1/embeddings", json={"input": [text, "x"], "truncate": True})
        np.testing.assert_allclose(one["data"][0]["embedding"],
                                   pair.json()["data"][0]["embedding"], atol=2e-3)
        assert tokens(text) + tokens("x") == tokens([text, "x"])
        assert one["truncated"] is (text == long)
    for inputs in (long, [long, "x"]):
        r = client.post("/v1/embeddings", json={"input": inputs})  # truncate: false
        assert_error(r, 422)
        assert "input 0 is longer than the encoder's" in r.text


def test_embeddings_of_mixed_lengths_come_back_in_the_callers_order(client: TestClient
                                                                   ) -> None:
    # the service encodes longest first; each vector must still be its own text's
    texts = ["a dog", "a cat that sleeps on a warm beach", "rain",
             "two ducks swim in the snow"]
    r = client.post("/v1/embeddings", json={"input": texts})
    assert r.status_code == 200, r.text
    batch = r.json()["data"]
    x = np.array([d["embedding"] for d in batch], np.float32)
    alone = np.array([client.post("/v1/embeddings", json={"input": t}).json()["data"][0]
                      ["embedding"] for t in texts], np.float32)
    np.testing.assert_allclose(x, alone, atol=2e-3)  # bf16 noise between paddings


def test_openai_embeddings_errors(make_client: MakeClient) -> None:
    client = make_client(max_inputs=3)
    assert_error(client.post("/v1/embeddings", json={"input": "x", "model": "gpt-9"}), 404)
    assert_error(client.post("/v1/embeddings", json={"input": "x", "dimensions": 7}), 422)
    assert_error(client.post("/v1/embeddings", json={"input": []}), 422, "invalid_request")
    assert_error(client.post("/v1/embeddings", json={"input": ["a", 2]}), 422)
    assert_error(client.post("/v1/embeddings", json={}), 422, "invalid_request")
    assert_error(client.post("/v1/embeddings", content=b"{not json",
                             headers={"Content-Type": "application/json"}), 422)
    assert_error(client.post("/v1/embeddings", json={"input": ["a"] * 4}), 413,
                 "payload_too_large")
    long = " ".join(["word"] * 200)  # the tiny encoder reads 24 tokens
    body = assert_error(client.post("/v1/embeddings", json={"input": ["ok", long]}), 422)
    assert "input 1" in body["error"]
    r = client.post("/v1/embeddings", json={"input": ["ok", long], "truncate": True})
    assert r.status_code == 200 and r.json()["truncated"] is True


def test_tei_embed(client: TestClient) -> None:
    r = client.post("/embed", json={"inputs": ["a dog", "a cat"]})
    x = np.array(r.json(), np.float32)
    assert r.status_code == 200 and x.shape[0] == 2 and r.headers["x-truncated"] == "false"
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    raw = np.array(client.post("/embed", json={"inputs": "a dog", "normalize": False}).json())
    assert abs(np.linalg.norm(raw[0]) - 1.0) > 1e-3  # the pooled vector as the model makes it
    np.testing.assert_allclose(raw[0] / np.linalg.norm(raw[0]), x[0], atol=2e-3)
    long = " ".join(["word"] * 200)
    assert_error(client.post("/embed", json={"inputs": long}), 422)
    r = client.post("/embed", json={"inputs": long, "truncate": True})
    assert r.status_code == 200 and r.headers["x-truncated"] == "true"


def test_models(client: TestClient) -> None:
    body = client.get("/v1/models").json()
    assert body["object"] == "list" and len(body["data"]) == 1
    card = body["data"][0]
    assert card["object"] == "model" and card["id"] == "tiny" and card["max_tokens"] == 24
    assert len(card["fingerprint"]) == 16 and card["dim"] == 32
    assert client.get(f"/v1/models/{card['id']}").json() == card
    assert_error(client.get("/v1/models/other"), 404)


# collections and documents
def test_collection_lifecycle(client: TestClient) -> None:
    name = "c_" + uuid.uuid4().hex[:8]
    r = client.post("/v1/collections", json={"name": name})
    assert r.status_code == 201 and r.json()["dim"] == 32 and r.json()["encoder"]["name"] == "tiny"
    assert_error(client.post("/v1/collections", json={"name": name}), 409, "conflict")
    assert_error(client.post("/v1/collections", json={"name": "bad name!"}), 422)
    names = [c["name"] for c in client.get("/v1/collections").json()["collections"]]
    assert name in names
    add_docs(client, name)
    got = client.get(f"/v1/collections/{name}").json()
    assert got["count"] == 4 and got["decoder"] is None
    assert client.delete(f"/v1/collections/{name}").json() == {"deleted": name}
    assert_error(client.get(f"/v1/collections/{name}"), 404, "not_found")
    assert_error(client.delete(f"/v1/collections/{name}"), 404)


def test_dashed_collection_name_is_the_underscored_one(client: TestClient) -> None:
    """'-' is stored as '_': a collection created as my-docs-* is found under both spellings
    by every route, and responses name it by its stored name."""
    dashed = f"my-docs-{uuid.uuid4().hex[:8]}"
    stored = dashed.replace("-", "_")
    r = client.post("/v1/collections", json={"name": dashed})
    assert r.status_code == 201, r.text
    assert r.json()["name"] == stored
    assert_error(client.post("/v1/collections", json={"name": stored}), 409, "conflict")
    add_docs(client, dashed)
    for name in (dashed, stored):
        got = client.get(f"/v1/collections/{name}")
        assert got.status_code == 200, got.text
        assert got.json()["name"] == stored and got.json()["count"] == 4
        hits = client.post(f"/v1/collections/{name}/search",
                           json={"query": "a cat sleeps on the beach", "top_k": 2}).json()["hits"]
        assert hits[0]["id"] == "d2"
        assert client.get(f"/v1/collections/{name}/documents/d2").json()["value"] == \
            "un chat dort"
    names = [c["name"] for c in client.get("/v1/collections").json()["collections"]]
    assert stored in names and dashed not in names
    assert client.request("DELETE", f"/v1/collections/{dashed}/documents",
                          json={"ids": ["d4"]}).status_code == 200
    assert client.get(f"/v1/collections/{stored}").json()["count"] == 3
    assert client.delete(f"/v1/collections/{dashed}").json() == {"deleted": stored}
    assert_error(client.get(f"/v1/collections/{stored}"), 404, "not_found")


@pytest.mark.parametrize("bad", ["-x", "a b", "a.b", "9lives", "é"])
def test_invalid_collection_names_are_422(client: TestClient, bad: str) -> None:
    body = assert_error(client.post("/v1/collections", json={"name": bad}), 422,
                        "invalid_request")
    assert "name" in body["error"]
    query = {"query": "a cat"}
    for method, suffix, payload in (
            ("GET", "", None), ("DELETE", "", None), ("GET", "/documents/d1", None),
            ("POST", "/documents", {"documents": [{"id": "d1", "text": "a cat"}]}),
            ("DELETE", "/documents", {"ids": ["d1"]}), ("POST", "/search", query),
            ("POST", "/attend", query), ("POST", "/generate", query)):
        r = client.request(method, f"/v1/collections/{bad}{suffix}", json=payload)
        body = assert_error(r, 422, "invalid_request")
        assert "name" in body["error"], (method, suffix, body)


def test_documents(client: TestClient, collection: str) -> None:
    add_docs(client, collection, [*DOCS, {"id": "d1", "text": "the last d1 wins"}])
    base = f"/v1/collections/{collection}/documents"
    d1 = client.get(f"{base}/d1").json()
    assert d1["text"] == "the last d1 wins" and d1["vector"] is None
    d2 = client.get(f"{base}/d2", params={"include_vector": True}).json()
    assert d2["value"] == "un chat dort" and d2["metadata"] == {"lang": "fr", "n": 2}
    emb = client.post("/v1/embeddings", json={"input": DOCS[1]["text"]}).json()
    # another batch, other padding: equal up to bf16 noise
    np.testing.assert_allclose(d2["vector"], emb["data"][0]["embedding"], atol=2e-3)
    assert client.get(f"/v1/collections/{collection}").json()["count"] == 4
    r = client.request("DELETE", base, json={"ids": ["d1", "d3", "absent"]})
    assert r.status_code == 200 and r.json() == {"deleted": 3}
    assert_error(client.get(f"{base}/d1"), 404, "not_found")
    assert client.get(f"/v1/collections/{collection}").json()["count"] == 2


def test_document_errors(make_client: MakeClient, collection: str) -> None:
    client = make_client(max_documents=2)
    base = f"/v1/collections/{collection}/documents"
    assert_error(client.post(base, json={"documents": DOCS[:3]}), 413, "payload_too_large")
    assert_error(client.post("/v1/collections/absent/documents", json={"documents": DOCS[:1]}),
                 404)
    assert_error(client.post(base, json={"documents": [{"id": "x"}]}), 422)
    assert_error(client.post(base, json={"documents": [{"id": "", "text": "t"}]}), 422)
    assert_error(client.post(base, json={"documents": [{"id": "x", "text": "t",
                                                        "metadata": [1]}]}), 422)
    long = {"id": "long", "text": " ".join(["word"] * 200)}
    # a collection with passages (the default) takes it whole, cut into passages
    r = client.post(base, json={"documents": [long], "truncate": False})
    assert r.status_code == 200 and r.json() == {"upserted": 1, "truncated": []}
    assert client.get(f"{base}/long").json()["text"] == long["text"]
    # one without cuts it at the encoder's limit, or refuses it with truncate false
    one_row = "c_" + uuid.uuid4().hex[:10]
    assert client.post("/v1/collections", json={"name": one_row, "hybrid": False,
                                                "chunking": False}).status_code == 201
    base = f"/v1/collections/{one_row}/documents"
    assert_error(client.post(base, json={"documents": [long], "truncate": False}), 422)
    r = client.post(base, json={"documents": [long]})
    assert r.status_code == 200 and r.json() == {"upserted": 1, "truncated": ["long"]}
    client.delete(f"/v1/collections/{one_row}")


def test_encoder_mismatch_is_409(client: TestClient, lite_path: str) -> None:
    name = "other_" + uuid.uuid4().hex[:8]
    store = MilvusStore(lite_path)
    store.create(name, 32, EncoderInfo("another-encoder", "0123456789abcdef", 32))
    store.close()
    body = assert_error(client.post(f"/v1/collections/{name}/documents",
                                    json={"documents": DOCS[:1]}), 409, "conflict")
    assert "another-encoder" in body["error"]
    assert_error(client.post(f"/v1/collections/{name}/search", json={"query": "dog"}), 409)
    client.delete(f"/v1/collections/{name}")


# search, attend, generate
def test_search(client: TestClient, collection: str) -> None:
    add_docs(client, collection)
    url = f"/v1/collections/{collection}/search"
    r = client.post(url, json={"query": DOCS[2]["text"], "top_k": 3, "consistency": "Strong"})
    body = r.json()
    assert r.status_code == 200 and body["truncated"] is False and len(body["hits"]) == 3
    top = body["hits"][0]
    assert top["id"] == "d3" and top["score"] == pytest.approx(1.0, abs=5e-3)
    assert set(top) == {"id", "score", "weight", "sources", "text", "value", "metadata",
                        "passages"}
    # a short document is one passage: all of its text
    (p,) = top["passages"]
    assert (p["index"], p["start"], p["end"], p["text"]) == (0, 0, len(DOCS[2]["text"]),
                                                              DOCS[2]["text"])
    assert body["mode"] == "dense" and top["sources"] == {"dense": top["score"]}
    assert sum(h["weight"] for h in body["hits"]) == pytest.approx(1.0, abs=1e-5)
    scores = [h["score"] for h in body["hits"]]
    assert scores == sorted(scores, reverse=True)
    w = np.exp((np.array(scores) - max(scores)) / body["temperature"])
    np.testing.assert_allclose([h["weight"] for h in body["hits"]], w / w.sum(), atol=1e-5)
    only_ids = client.post(url, json={"query": "dog", "fields": [], "top_k": 2}).json()
    assert set(only_ids["hits"][0]) == {"id", "score", "weight", "sources"}
    fr = client.post(url, json={"query": "dog", "top_k": 4,
                                "filter": {"key": "lang", "op": "eq", "value": "fr"}}).json()
    assert [h["id"] for h in fr["hits"]] == ["d2"]
    ranged = client.post(url, json={"query": "dog", "top_k": 4, "filter": {"and": [
        {"key": "n", "op": "gte", "value": 2},
        {"key": "lang", "op": "in", "value": ["en", "de"]}]}})
    assert sorted(h["id"] for h in ranged.json()["hits"]) == ["d3", "d4"]
    hostile = client.post(url, json={"query": "dog", "filter": {
        "key": "lang", "op": "eq", "value": "en\" or 1==1 or \"\\"}}).json()
    assert hostile["hits"] == []
    d3 = client.get(f"/v1/collections/{collection}/documents/d3",
                    params={"include_vector": True}).json()
    by_vec = client.post(url, json={"vector": d3["vector"], "top_k": 1, "fields": ["vector"]})
    assert by_vec.json()["hits"][0]["id"] == "d3"
    np.testing.assert_allclose(by_vec.json()["hits"][0]["vector"], d3["vector"], atol=1e-6)


def test_search_errors(make_client: MakeClient, collection: str) -> None:
    client = make_client(max_top_k=5)
    url = f"/v1/collections/{collection}/search"
    assert_error(client.post(url, json={}), 422)
    assert_error(client.post(url, json={"query": "a", "vector": [0.0] * 32}), 422)
    assert_error(client.post(url, json={"vector": [0.1] * 7, "top_k": 3}), 409, "conflict")
    assert_error(client.post(url, json={"query": "a", "top_k": 6}), 422)
    assert_error(client.post(url, json={"query": "a", "top_k": 0}), 422)
    assert_error(client.post(url, json={"query": "a", "filter": {"key": "k", "op": "like",
                                                                  "value": 1}}), 422)
    assert_error(client.post(url, json={"query": "a", "temperature": 0}), 422)
    assert_error(client.post("/v1/collections/absent/search", json={"query": "a"}), 404)
    assert_error(client.post(url, json={"query": " ".join(["w"] * 200), "truncate": False,
                                        "top_k": 5}), 422)
    r = client.post(url, json={"query": " ".join(["w"] * 200), "top_k": 5})
    assert r.status_code == 200 and r.json()["truncated"] is True


def test_attend_output_is_weighted_sum(client: TestClient, collection: str) -> None:
    add_docs(client, collection)
    r = client.post(f"/v1/collections/{collection}/attend",
                    json={"query": "a dog in the park", "top_k": 3, "temperature": 0.5,
                          "consistency": "Strong"})
    body = r.json()
    assert r.status_code == 200 and len(body["neighbours"]) == 3
    w = np.array(body["weights"])
    assert w.sum() == pytest.approx(1.0, abs=1e-5) and (w > 0).all()
    vectors = np.stack([
        client.get(f"/v1/collections/{collection}/documents/{h['id']}",
                   params={"include_vector": True}).json()["vector"]
        for h in body["neighbours"]])
    np.testing.assert_allclose(body["output"], w @ vectors, atol=1e-5)
    assert [h["weight"] for h in body["neighbours"]] == pytest.approx(body["weights"])
    empty = client.post("/v1/collections/" + collection + "/attend",
                        json={"query": "x", "filter": {"key": "lang", "op": "eq",
                                                       "value": "none"}}).json()
    assert empty["weights"] == [] and empty["output"] == [0.0] * 32


def test_generate_without_decoder_is_409(client: TestClient, collection: str) -> None:
    body = assert_error(client.post(f"/v1/collections/{collection}/generate",
                                    json={"query": "a dog"}), 409, "conflict")
    assert "no decoder" in body["error"]
    assert_error(client.post("/v1/collections/absent/generate", json={"query": "a"}), 404)


# the edges: auth, body size, queue, store down
def test_api_key(make_client: MakeClient) -> None:
    client = make_client(api_key="s3cret")
    for method, path, body in (("POST", "/v1/embeddings", {"input": "a"}),
                               ("POST", "/embed", {"inputs": "a"}),
                               ("GET", "/v1/models", None), ("GET", "/v1/collections", None),
                               ("POST", "/v1/collections", {"name": "never"})):
        r = client.request(method, path, json=body)
        assert_error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
        wrong = client.request(method, path, json=body, headers={"Authorization": "Bearer no"})
        assert_error(wrong, 401)
    ok = client.post("/v1/embeddings", json={"input": "a"},
                     headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    for path in ("/health", "/ready"):
        assert client.get(path).status_code == 200
    # /metrics counts requests by key id: an admin's (QKV_API_KEY is one), not open
    assert set(client.get("/metrics").json()) == {"error", "error_type"}  # TEI's shape, 401
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_body_over_limit_is_413(make_client: MakeClient) -> None:
    client = make_client(max_body_bytes=2048)
    assert_error(client.post("/v1/embeddings", json={"input": "x" * 4000}), 413,
                 "payload_too_large")

    def chunks():  # type: ignore[no-untyped-def]
        yield b'{"input": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}'

    r = client.post("/v1/embeddings", content=chunks(),
                    headers={"Content-Type": "application/json"})
    assert_error(r, 413)
    assert client.post("/v1/embeddings", json={"input": "small"}).status_code == 200


def test_full_queue_is_429(make_client: MakeClient) -> None:
    client = make_client(queue_max=2)
    r = client.post("/v1/embeddings", json={"input": ["a", "b", "c"]})
    assert_error(r, 429, "rate_limited")
    assert r.headers["retry-after"] == "1"
    assert client.post("/v1/embeddings", json={"input": ["a", "b"]}).status_code == 200
    assert "qkv_encoder_rejected_total 3.0" in client.get("/metrics").text


def test_store_unreachable_is_503(make_client: MakeClient) -> None:
    from store_backends import free_port

    client = make_client(store=f"http://127.0.0.1:{free_port()}", store_timeout_s=1.0)
    r = client.get("/ready")
    assert_error(r, 503, "not_ready")
    r = client.get("/v1/collections")
    assert_error(r, 503, "store_unavailable")
    assert r.headers["retry-after"] == "1"
    assert_error(client.post("/v1/collections/x/search", json={"query": "a"}), 503)
    assert client.get("/health").status_code == 200
    assert client.post("/v1/embeddings", json={"input": "a"}).status_code == 200
    assert 'qkv_store_errors_total{kind="unavailable"}' in client.get("/metrics").text


def test_collection_says_its_backend_and_when_it_is_past_its_fast_size(
        client: TestClient, collection: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from index import scale

    add_docs(client, collection, DOCS)
    got = client.get(f"/v1/collections/{collection}").json()
    assert got["backend"] == "milvus-lite" and got["size_warning"] is None
    monkeypatch.setitem(scale.FAST_UP_TO, "milvus-lite", 2)  # as if 4 documents were many
    got = client.get(f"/v1/collections/{collection}").json()
    assert "4 documents is past the 2 that milvus-lite serves" in got["size_warning"]
    assert "Milvus server" in got["size_warning"]
    listed = {c["name"]: c for c in client.get("/v1/collections").json()["collections"]}
    assert listed[collection]["backend"] == "milvus-lite"
