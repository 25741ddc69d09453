"""A real uvicorn process (``qkv serve``) on a free localhost port, driven by the official
``openai`` package: a client we did not write. The server has ``QKV_API_KEY`` set, so the
same process shows that the right key works and a wrong one is refused."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from api_errors import error_of
from uvicorn_server import UvicornServer

KEY = "test-key-5b1e"
TEXTS = ["a brown dog runs in the park", "a cat sleeps on the beach", "two ducks"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server_url(tiny_encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("uvicorn-openai")
    server = UvicornServer(tmp / "serve.log",
                           args=["--store", str(tmp / "lite.db"), "--model", str(tiny_encoder_dir)],
                           env={"QKV_API_KEY": KEY})
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def client(server_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server_url}/v1", api_key=KEY, max_retries=0,
                       timeout=30) as c:
        yield c


def test_models_list(client: openai.OpenAI) -> None:
    models = client.models.list().data
    assert len(models) == 1
    m = models[0]
    assert m.id == "tiny" and m.object == "model" and m.owned_by == "qkv"
    extra = m.model_extra or {}
    assert extra["dim"] == 32 and extra["max_tokens"] == 24
    assert isinstance(extra["fingerprint"], str) and extra["fingerprint"]
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_embeddings_base64_float_and_raw_http_agree(client: openai.OpenAI, server_url: str
                                                    ) -> None:
    # The openai client asks for base64 when no encoding_format is given and decodes it.
    default = client.embeddings.create(input=TEXTS, model="tiny")
    floats = client.embeddings.create(input=TEXTS, model="tiny", encoding_format="float")
    assert default.model == floats.model == "tiny"
    assert [d.index for d in default.data] == [0, 1, 2]
    x_default = np.array([d.embedding for d in default.data], np.float32)
    x_float = np.array([d.embedding for d in floats.data], np.float32)
    assert x_default.shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(x_float, axis=1), 1.0, atol=1e-5)
    # base64 carries the exact float32 bits; JSON floats round-trip through float64 text.
    np.testing.assert_allclose(x_default, x_float, atol=1e-6)
    assert not np.allclose(x_float[0], x_float[1])  # distinct texts, distinct vectors
    assert default.usage.prompt_tokens > 0
    assert default.usage.prompt_tokens == default.usage.total_tokens == floats.usage.prompt_tokens

    r = httpx.post(f"{server_url}/v1/embeddings", json={"input": TEXTS, "model": "tiny",
                                                         "encoding_format": "base64"},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 200, r.text
    raw = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4")
                    for d in r.json()["data"]])
    np.testing.assert_array_equal(raw, x_default)


def test_single_string_input_and_missing_model(client: openai.OpenAI, server_url: str) -> None:
    one = client.embeddings.create(input=TEXTS[0], model="tiny", encoding_format="float")
    assert len(one.data) == 1 and len(one.data[0].embedding) == 32
    # No `model` (the openai client always sends one): the served encoder answers.
    r = httpx.post(f"{server_url}/v1/embeddings", json={"input": TEXTS[0]},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 200 and r.json()["model"] == "tiny"
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], one.data[0].embedding,
                               atol=1e-6)


def test_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client.embeddings.create(input=["hello"], model="text-embedding-3-small")
    assert e.value.status_code == 404
    # OpenAI's error shape: the SDK hands over body["error"], with our message and code
    assert isinstance(e.value.body, dict) and "not found" in e.value.body["message"]
    assert error_of(e.value.response)["error_type"] == "not_found"
    assert e.value.code == "not_found" and e.value.type == "invalid_request_error"


def test_wrong_key_is_refused_right_key_works(server_url: str) -> None:
    with openai.OpenAI(base_url=f"{server_url}/v1", api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError) as e:
            bad.embeddings.create(input=["hello"], model="tiny")
        assert e.value.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    r = httpx.post(f"{server_url}/v1/embeddings", json={"input": "hello"}, timeout=30)
    assert r.status_code == 401 and error_of(r)["error_type"] == "unauthorized"
    assert httpx.get(f"{server_url}/health", timeout=10).status_code == 200  # stays open
    with openai.OpenAI(base_url=f"{server_url}/v1", api_key=KEY, max_retries=0) as good:
        assert len(good.embeddings.create(input=["hello"], model="tiny").data) == 1
