"""The clients people already use, unchanged and with their default settings, against a real
``qkv serve`` (the shipped encoder, a temporary Milvus Lite file, ``QKV_API_KEY`` set):
LangChain's ``OpenAIEmbeddings`` (1,000 texts a request, token-id arrays), huggingface_hub's
``InferenceClient.feature_extraction`` (TEI's ``POST /``) and pymilvus' TEI embedding and
rerank functions. The official ``openai`` package has its own module
(``test_uvicorn_openai.py``). Each client's answer is checked against the server's own
``/v1/embeddings`` for the same texts."""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from numerics import encoder_atol, served_backend
from uvicorn_server import UvicornServer

ROOT = Path(__file__).resolve().parents[2]
KEY = "client-key-7c2"
TEXTS = ["A man is riding a bike down the street.", "How do I read a JSON file in Python?",
         "The stock market fell sharply on Monday.", "Two dogs play in the snow."]
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# tiktoken's cache file name for cl100k_base: sha1 of its download URL (tiktoken/load.py)
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("clients")
    srv = UvicornServer(tmp / "serve.log", ["--store", str(tmp / "lite.db"),
                                            "--model", str(ROOT / "models/encoder-default")],
                        {"QKV_API_KEY": KEY})
    try:
        yield srv.start()
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def model(server: str) -> str:
    r = httpx.get(f"{server}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    return str(r.json()["data"][0]["id"])


def reference(server: str, texts: list[str]) -> np.ndarray:
    r = httpx.post(f"{server}/v1/embeddings", json={"input": texts, "encoding_format": "float"},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    assert r.status_code == 200, r.text
    return np.array([d["embedding"] for d in r.json()["data"]], np.float32)


@pytest.fixture
def tiktoken_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tiktoken's cl100k_base file, which it would download (no network here), put in its
    cache from bpe-openai's copy after checking tiktoken's own SHA-256."""
    bpe_openai = pytest.importorskip("bpe_openai")
    data = gzip.decompress((Path(bpe_openai.__file__).parent / "data" /
                            "cl100k_base.tiktoken.gz").read_bytes())
    assert hashlib.sha256(data).hexdigest() == CL100K_SHA256
    (tmp_path / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(data)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))


def test_langchain_openai_embeddings(server: str, model: str, tiktoken_cache: None) -> None:
    """Defaults: chunk_size 1,000 texts a request, check_embedding_ctx_length on (so the
    texts go as cl100k_base token ids)."""
    lc = pytest.importorskip("langchain_openai")
    emb = lc.OpenAIEmbeddings(model=model, base_url=f"{server}/v1", api_key=KEY)
    texts = [f"{TEXTS[i % len(TEXTS)]} ({i})" for i in range(1200)]  # two requests
    got = np.array(emb.embed_documents(texts), np.float32)
    assert got.shape == (1200, 256)
    want = reference(server, texts[:8] + texts[-8:])
    with httpx.Client(base_url=server) as api:
        backend = served_backend(api, {"Authorization": f"Bearer {KEY}"})
    np.testing.assert_allclose(np.vstack([got[:8], got[-8:]]), want,
                               atol=encoder_atol(1e-4, backend))
    q = np.array(emb.embed_query(TEXTS[0]), np.float32)
    np.testing.assert_allclose(q, reference(server, TEXTS[:1])[0], atol=1e-4)


def test_langchain_openai_without_token_ids(server: str, model: str) -> None:
    lc = pytest.importorskip("langchain_openai")
    emb = lc.OpenAIEmbeddings(model=model, base_url=f"{server}/v1", api_key=KEY,
                              check_embedding_ctx_length=False)
    got = np.array(emb.embed_documents(TEXTS), np.float32)
    np.testing.assert_allclose(got, reference(server, TEXTS), atol=1e-5)


def test_langchain_long_texts_say_why_or_are_cut(server: str, model: str,
                                                tiktoken_cache: None) -> None:
    """Over our token limit: the reason reaches the LangChain user (OpenAI's error shape),
    and ``model_kwargs={"extra_body": {"truncate": True}}`` cuts them instead."""
    lc = pytest.importorskip("langchain_openai")
    openai = pytest.importorskip("openai")
    long = " ".join(["dog"] * 2000)
    emb = lc.OpenAIEmbeddings(model=model, base_url=f"{server}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.UnprocessableEntityError) as e:
        emb.embed_documents([long])
    assert "truncate" in str(e.value)
    cut = lc.OpenAIEmbeddings(model=model, base_url=f"{server}/v1", api_key=KEY,
                              model_kwargs={"extra_body": {"truncate": True}})
    got = np.array(cut.embed_documents([long, TEXTS[0]]), np.float32)
    assert got.shape == (2, 256)
    np.testing.assert_allclose(got[1], reference(server, TEXTS[:1])[0], atol=1e-4)


def test_huggingface_hub_feature_extraction(server: str) -> None:
    hub = pytest.importorskip("huggingface_hub")
    client = hub.InferenceClient(base_url=server, api_key=KEY)
    got = np.asarray(client.feature_extraction(TEXTS[1]), np.float32).reshape(-1)
    np.testing.assert_allclose(got, reference(server, TEXTS[1:2])[0], atol=1e-5)
    with pytest.raises(hub.errors.HfHubHTTPError) as e:  # the reason reaches the user
        hub.InferenceClient(base_url=server, api_key="wrong").feature_extraction("x")
    assert "API key" in str(e.value)


def test_pymilvus_tei_functions(tmp_path: Path) -> None:
    """pymilvus-model's TEI functions send no key: a server without one."""
    model = pytest.importorskip("pymilvus.model")
    srv = UvicornServer(tmp_path / "serve.log", ["--store", str(tmp_path / "lite.db"),
                                                 "--model", str(ROOT / "models/encoder-default")])
    url = srv.start()
    try:
        check_pymilvus_tei(model, url)
    finally:
        srv.stop()


def check_pymilvus_tei(model: object, server: str) -> None:
    ef = model.dense.TEIEmbeddingFunction(api_url=server)  # type: ignore[attr-defined]
    got = np.array(ef.encode_documents(TEXTS), np.float32)
    np.testing.assert_allclose(got, reference(server, TEXTS), atol=1e-5)
    assert ef.dim == 256
    rf = model.reranker.TEIRerankFunction(api_url=server)  # type: ignore[attr-defined]
    ranked = rf("a cyclist in town", TEXTS)  # the client keeps the first 5 (its top_k unused)
    assert [r.text for r in ranked] == [TEXTS[r.index] for r in ranked]
    assert ranked[0].text == TEXTS[0] and len(ranked) == len(TEXTS)
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
