"""OpenAI's embeddings as its clients send them: token-id arrays (LangChain's default),
thousands of inputs in one request (LangChain's chunk of 1,000; OpenAI's limit 2,048), and
errors in OpenAI's shape so that the SDKs show the reason."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest
from api_errors import error_of
from conftest import MakeClient
from fastapi.testclient import TestClient

bpe_openai = pytest.importorskip("bpe_openai")
# tiktoken's own check of the file (tiktoken_ext/openai_public.py, cl100k_base)
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"


def test_the_vocabulary_is_openais() -> None:
    data = Path(bpe_openai.__file__).with_name("data") / "cl100k_base.tiktoken.gz"
    with gzip.open(data) as f:
        assert hashlib.sha256(f.read()).hexdigest() == CL100K_SHA256
    enc = bpe_openai.get_encoding("cl100k_base")
    assert enc.encode("Hello world") == [9906, 1917]  # as tiktoken's README shows


def test_token_arrays_embed_as_their_text(client: TestClient) -> None:
    enc = bpe_openai.get_encoding("cl100k_base")
    texts = ["a dog runs in the park", "Le café est très bon ☕"]
    ids = [enc.encode(t) for t in texts]
    want = client.post("/v1/embeddings", json={"input": texts}).json()
    for inputs in (ids, ids[0]):
        r = client.post("/v1/embeddings", json={"input": inputs})
        assert r.status_code == 200, r.text
        got = r.json()
        n = len(inputs) if isinstance(inputs[0], list) else 1
        assert len(got["data"]) == n
        for a, b in zip(got["data"], want["data"][:n], strict=True):
            np.testing.assert_allclose(a["embedding"], b["embedding"], atol=1e-5)
        # usage counts the served encoder's tokens, not OpenAI's
        assert got["usage"]["prompt_tokens"] == sum(
            want_n for want_n in [len(client.app.state.service.encoder  # type: ignore[attr-defined]
                                      .tokenize(texts[:n])[0][i]) for i in range(n)])


@pytest.mark.parametrize("inputs, why", [
    ([-1, 5], "input"), ([[1, 2], []], "input"), ([[1, 2], [3, "x"]], "input"),
    ([100277], "cl100k_base"), ([[5], [10**9]], "cl100k_base"), ([[]], "input")])
def test_malformed_token_ids_are_422_in_openais_shape(client: TestClient, inputs: object,
                                                     why: str) -> None:
    r = client.post("/v1/embeddings", json={"input": inputs})
    assert r.status_code == 422, r.text
    err = error_of(r)
    assert why in err["error"] or why == err["param"] or err["param"].startswith(why), err


def test_many_inputs_in_one_request(make_client: MakeClient) -> None:
    client = make_client()  # the default limit: OpenAI's 2,048
    texts = [f"dog {i}" for i in range(2048)]
    r = client.post("/v1/embeddings", json={"input": texts})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert [d["index"] for d in data] == list(range(2048))
    one = client.post("/v1/embeddings", json={"input": texts[1500]}).json()["data"][0]
    np.testing.assert_allclose(data[1500]["embedding"], one["embedding"], atol=1e-5)
    over = client.post("/v1/embeddings", json={"input": texts + ["one more"]})
    assert over.status_code == 413 and error_of(over)["error_type"] == "payload_too_large"
    over_ids = client.post("/v1/embeddings", json={"input": [[1]] * 2049})
    assert over_ids.status_code == 413


def test_errors_under_v1_are_openais_and_elsewhere_teis(make_client: MakeClient) -> None:
    client = make_client(api_key="k")
    r = client.post("/v1/embeddings", json={"input": "x"})
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"
    assert r.json()["error"]["code"] == "unauthorized"
    ok = {"Authorization": "Bearer k"}
    r = client.post("/v1/embeddings", json={"input": 3}, headers=ok)
    assert r.status_code == 422 and r.json()["error"]["param"] == "input"
    r = client.get("/v1/collections/nope", headers=ok)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.post("/embed", json={"inputs": 3}, headers=ok)  # TEI's route, TEI's shape
    assert r.status_code == 422 and set(r.json()) == {"error", "error_type"}
