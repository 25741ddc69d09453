"""``generate`` end to end with a (tiny, untrained) decoder configured for a collection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import MakeClient

from decoder.testing import tiny_decoder


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_decoder(tmp_path_factory.mktemp("tiny-decoder"))


def test_generate_reads_weighted_neighbours(make_client: MakeClient, decoder_dir: Path) -> None:
    client = make_client(decoders={"tm_en_fr": str(decoder_dir)})
    client.delete("/v1/collections/tm_en_fr")
    assert client.post("/v1/collections", json={"name": "tm_en_fr"}).status_code == 201
    pairs = [("a dog runs", "un chien court"), ("a cat sleeps", "un chat dort"),
             ("a red car", "une voiture rouge")]
    docs = [{"id": f"p{i}", "text": en, "value": fr} for i, (en, fr) in enumerate(pairs)]
    assert client.post("/v1/collections/tm_en_fr/documents",
                       json={"documents": docs}).status_code == 200
    info = client.get("/v1/collections/tm_en_fr").json()
    assert info["decoder"] == str(decoder_dir) and info["count"] == 3

    r = client.post("/v1/collections/tm_en_fr/generate",
                    json={"query": "a cat sleeps", "top_k": 2, "beam": 2, "max_tokens": 8,
                          "return_attention": True})
    body = r.json()
    assert r.status_code == 200, body
    assert isinstance(body["text"], str) and len(body["neighbours"]) == 2
    assert body["neighbours"][0]["id"] == "p1"  # the exact sentence is the best neighbour
    assert sum(body["weights"]) == pytest.approx(1.0, abs=1e-5)
    att = body["attention"]
    assert len(att["weights"]) == len(att["tokens"]) >= 1
    assert all(len(row) == len(att["memory_tokens"]) for row in att["weights"])
    assert set(att["memory_segments"]) == {-1, 0, 1}  # the query and both neighbours
    np.testing.assert_allclose(np.sum(att["weights"], axis=1), 1.0, atol=1e-3)

    plain = client.post("/v1/collections/tm_en_fr/generate",
                        json={"query": "a cat sleeps", "top_k": 0, "max_tokens": 8}).json()
    assert plain["neighbours"] == [] and plain["attention"] is None
    too_long = client.post("/v1/collections/tm_en_fr/generate",
                           json={"query": "x", "max_tokens": 10_000})
    assert too_long.status_code == 422
    client.delete("/v1/collections/tm_en_fr")
