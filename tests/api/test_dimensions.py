"""Matryoshka sizes through the API: `dimensions` on /v1/embeddings and on a collection,
for an encoder that records the sizes it was trained to be cut to."""

import dataclasses
import uuid
from pathlib import Path

import numpy as np
import pytest
from conftest import MakeClient  # type: ignore[attr-defined]

import encoder


@pytest.fixture(scope="module")
def cut_encoder_dir(tiny_encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny encoder (dim 32) recording Matryoshka sizes 8 and 16."""
    enc = encoder.load(tiny_encoder_dir, device="cpu")
    enc.model.config = dataclasses.replace(enc.model.config, matryoshka=(8, 16))
    enc.config = enc.model.config
    path = tmp_path_factory.mktemp("cut-encoder")
    enc.save(path, {})
    return path


def test_embeddings_cut_to_a_trained_size(make_client: MakeClient, cut_encoder_dir: Path
                                          ) -> None:
    client = make_client(model=cut_encoder_dir)
    card = client.get("/v1/models").json()["data"][0]
    assert card["dims"] == [8, 16, 32] and card["dim"] == 32
    texts = ["a dog runs in the park", "a cat sleeps"]
    full = np.array([d["embedding"] for d in client.post(
        "/v1/embeddings", json={"input": texts}).json()["data"]])
    r = client.post("/v1/embeddings", json={"input": texts, "dimensions": 16})
    assert r.status_code == 200, r.text
    small = np.array([d["embedding"] for d in r.json()["data"]])
    assert small.shape == (2, 16)
    want = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(small, want, atol=1e-5)
    r = client.post("/v1/embeddings", json={"input": texts, "dimensions": 12})
    assert r.status_code == 422 and "8, 16, 32" in r.text


def test_collection_of_a_cut_size(make_client: MakeClient, cut_encoder_dir: Path) -> None:
    client = make_client(model=cut_encoder_dir)
    name = "dims_" + uuid.uuid4().hex[:8]
    r = client.post("/v1/collections", json={"name": name, "dimensions": 8, "hybrid": False})
    assert r.status_code == 201, r.text
    assert r.json()["dim"] == 8 and r.json()["encoder"]["dim"] == 8
    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(
        ["a dog runs in the park", "a cat sleeps on the sofa", "stock prices fell"])]
    r = client.post(f"/v1/collections/{name}/documents", json={"documents": docs})
    assert r.status_code == 200, r.text
    r = client.post(f"/v1/collections/{name}/search",
                    json={"query": "a dog runs in the park", "top_k": 3,
                          "fields": ["vector"]})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert hits[0]["id"] == "d0" and hits[0]["score"] == pytest.approx(1.0, abs=1e-4)
    assert len(hits[0]["vector"]) == 8
    emb = client.post("/v1/embeddings", json={"input": "a dog runs in the park",
                                              "dimensions": 8}).json()["data"][0]["embedding"]
    np.testing.assert_allclose(hits[0]["vector"], emb, atol=1e-3)
    r = client.post(f"/v1/collections/{name}/search", json={"vector": [0.1] * 32, "top_k": 1})
    assert r.status_code == 409, r.text  # the full size is not this space (as any length)
    bad = client.post("/v1/collections", json={"name": name + "x", "dimensions": 12})
    assert bad.status_code == 422
    client.delete(f"/v1/collections/{name}")
