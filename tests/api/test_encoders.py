"""Several encoders in one service (wiring.encoders, issue 38): derived checkpoints under the
encoders directory are listed, loaded on first use within a budget, embed for the
collections they made, and a collection whose encoder is gone gets a 409 naming it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import MakeClient
from fastapi.testclient import TestClient

from wiring.components import write_card


def derived(base: Path, root: Path, name: str, scale: float = 1.05) -> Path:
    """The tiny encoder under another name, its weights scaled (another fingerprint)."""
    import torch

    import encoder

    enc = encoder.load(base, device="cpu", backend="torch")
    enc.model.config = type(enc.model.config)(**{**enc.model.config.to_dict(), "name": name})
    with torch.no_grad():
        for p in enc.model.parameters():
            p.mul_(scale)
    out = root / name
    enc.save(out, {})
    write_card(out, {"name": name, "base": "tiny", "collection": None, "created": 1,
                     "dim": enc.dim, "dims": list(enc.dims), "fingerprint": None})
    return out


@pytest.fixture
def root(lite_path: str) -> Path:
    path = Path(lite_path).parent / "encoders"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    return path


def _embed(client: TestClient, text: str, model: str | None = None) -> np.ndarray:
    r = client.post("/v1/embeddings", json={"input": [text], **({"model": model} if model
                                                                 else {})})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == (model or "tiny")
    return np.array(r.json()["data"][0]["embedding"])


def test_models_lists_derived_encoders_and_embeddings_take_model(
        make_client: MakeClient, tiny_encoder_dir: Path, root: Path) -> None:
    derived(tiny_encoder_dir, root, "tiny+a")
    (root / "half").mkdir()  # a checkpoint without its card: not an encoder yet
    client = make_client()
    models = client.get("/v1/models").json()["data"]
    assert [(m["id"], m["default"], m["loaded"]) for m in models] == [
        ("tiny", True, True), ("tiny+a", False, False)]
    mine = models[0]  # its backend self-timed at start (encoder.backend_pick), and why
    assert mine["backend"] in ("onnx", "torch") and mine["backend"] in mine["backend_why"]
    assert models[1]["backend_why"] is None  # a derived one runs as the default does
    a, default = _embed(client, "a dog runs", "tiny+a"), _embed(client, "a dog runs")
    assert not np.allclose(a, default)  # another network made it
    assert client.get("/v1/models/tiny+a").json()["loaded"] is True
    for bad in ("nope", "half", "../tiny+a"):
        r = client.post("/v1/embeddings", json={"input": ["x"], "model": bad})
        assert r.status_code == 404 and "tiny+a" in r.json()["error"]["message"]


def test_a_collection_embeds_with_its_encoder_and_409s_when_it_is_gone(
        make_client: MakeClient, tiny_encoder_dir: Path, root: Path) -> None:
    path = derived(tiny_encoder_dir, root, "tiny+b")
    client = make_client()
    r = client.post("/v1/collections", json={"name": "by-b", "model": "tiny+b"})
    assert r.status_code == 201, r.text
    assert r.json()["encoder"]["name"] == "tiny+b"
    docs = [{"id": str(i), "text": t} for i, t in enumerate(
        ["a dog runs in the park", "a cat sleeps on a hill", "a fish swims near the river"])]
    r = client.post("/v1/collections/by-b/documents", json={"documents": docs})
    assert r.status_code == 200, r.text
    r = client.post("/v1/collections/by-b/search", json={"query": "a cat sleeps on a hill",
                                                         "top_k": 1, "mode": "dense"})
    assert r.status_code == 200, r.text
    assert r.json()["hits"][0]["id"] == "1"
    assert client.post("/v1/collections", json={"name": "x", "model": "nope"}
                       ).status_code == 404

    shutil.move(str(path), str(root.parent / "moved-away"))
    again = make_client()
    for method, url, body in (
            ("post", "/v1/collections/by-b/search", {"query": "dog", "top_k": 1}),
            ("post", "/v1/collections/by-b/documents", {"documents": docs[:1]})):
        r = getattr(again, method)(url, json=body)
        assert r.status_code == 409, r.text
        assert "tiny+b" in r.json()["error"]["message"]
    shutil.move(str(root.parent / "moved-away"), str(path))


def test_loaded_encoders_stay_within_the_budget(
        make_client: MakeClient, tiny_encoder_dir: Path, root: Path) -> None:
    for name, scale in (("tiny+c", 1.1), ("tiny+d", 1.2)):
        derived(tiny_encoder_dir, root, name, scale)
    client = make_client(encoders_loaded=2)  # the default and one more
    loaded = lambda: {m["id"] for m in client.get("/v1/models").json()["data"]  # noqa: E731
                      if m["loaded"]}
    c1 = _embed(client, "a horse eats", "tiny+c")
    assert loaded() == {"tiny", "tiny+c"}
    _embed(client, "a horse eats", "tiny+d")
    assert loaded() == {"tiny", "tiny+d"}  # the least recently used went
    assert np.allclose(_embed(client, "a horse eats", "tiny+c"), c1, atol=1e-5)  # reloaded
    assert loaded() == {"tiny", "tiny+c"}


def test_an_encoder_in_memory_serves_without_a_load_and_counts_as_used(
        make_client: MakeClient, tiny_encoder_dir: Path, root: Path) -> None:
    # /v1/embeddings takes an encoder already in memory on the event loop
    # (Encoders.loaded_now); that use must still count for the budget's order
    for name, scale in (("tiny+e", 1.1), ("tiny+f", 1.2), ("tiny+g", 1.3)):
        derived(tiny_encoder_dir, root, name, scale)
    client = make_client(encoders_loaded=3)  # the default and two more
    registry = client.app.state.service.encoders  # type: ignore[attr-defined]
    assert registry.loaded_now("tiny+e") is None  # not loaded: no load here either
    _embed(client, "a horse eats", "tiny+e")
    _embed(client, "a horse eats", "tiny+f")
    assert registry.loaded_now("tiny+e").name == "tiny+e"  # and now the most recent
    _embed(client, "a horse eats", "tiny+e")
    _embed(client, "a horse eats", "tiny+g")  # the least recently used goes: tiny+f
    assert set(registry.loaded()) >= {"tiny+e", "tiny+g"} and "tiny+f" not in registry.loaded()
    assert registry.loaded_now(None) is registry.default


def test_batches_run_one_per_core_with_the_onnx_backend(make_client: MakeClient) -> None:
    # QKV_BATCH_WORKERS: two batches side by side, each call on one thread, the vectors
    # the same as one worker's on all threads
    texts = [f"a dog number {i} runs in the park" for i in range(24)]
    vectors = {}
    for workers in (1, 2):
        client = make_client(encoder_backend="onnx", encoder_threads=2,
                             batch_workers=workers)
        svc = client.app.state.service  # type: ignore[attr-defined]
        assert len(svc.batcher._threads) == workers
        assert svc.encoder._onnx.threads == (1 if workers == 2 else None)
        r = client.post("/v1/embeddings", json={"input": texts})
        assert r.status_code == 200, r.text
        vectors[workers] = np.array([d["embedding"] for d in r.json()["data"]])
    np.testing.assert_allclose(vectors[2], vectors[1], atol=2e-3)
