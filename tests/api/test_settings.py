"""Settings that name collections: decoders (JSON or NAME=DIR, from the environment or
given), the demo collections; names are checked when the settings are made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from api.settings import Settings


@pytest.mark.parametrize("env", ['{"tm-en-fr": "models/decoder-en-fr", "b": "d/b"}',
                                 "tm-en-fr=models/decoder-en-fr,b=d/b",
                                 " tm-en-fr = models/decoder-en-fr , b=d/b ,"])
def test_decoders_from_the_environment(monkeypatch: pytest.MonkeyPatch, env: str) -> None:
    monkeypatch.setenv("QKV_DECODERS", env)
    assert Settings().decoders == {"tm-en-fr": Path("models/decoder-en-fr"), "b": Path("d/b")}


def test_no_decoders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QKV_DECODERS", "")
    assert Settings().decoders == {}
    monkeypatch.delenv("QKV_DECODERS")
    assert Settings().decoders == {}


@pytest.mark.parametrize("decoders", [
    "tm-en-fr", "=models/x", "tm-en-fr=", '["models/x"]', {"-tm": "models/x"},
    {"tm-en-fr": "a", "tm_en_fr": "b"}])
def test_bad_decoders_are_refused(decoders: object) -> None:
    with pytest.raises(ValidationError, match="decoder|collection"):
        Settings(decoders=decoders)  # type: ignore[arg-type]


def test_demo_collections(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings()
    assert (s.demo_collection, s.demo_tm_collection, s.demo_tm) == ("docs", "tm-en-fr", None)
    monkeypatch.setenv("QKV_DEMO_TM", "data/demo/multi30k-en-fr.jsonl.gz")
    assert Settings().demo_tm == Path("data/demo/multi30k-en-fr.jsonl.gz")
    for field in ("demo_collection", "demo_tm_collection"):
        with pytest.raises(ValidationError, match="collection name"):
            Settings(**{field: "a b"})  # type: ignore[arg-type]


def test_encoder_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QKV_ENCODER_BACKEND", "")  # .env.example's empty value: the default
    assert Settings().encoder_backend is None
    monkeypatch.setenv("QKV_ENCODER_BACKEND", "torch")
    assert Settings().encoder_backend == "torch"
    monkeypatch.setenv("QKV_ENCODER_BACKEND", "tensorrt")
    with pytest.raises(ValidationError, match="onnx"):
        Settings()


def test_encoder_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QKV_ENCODER_SPIN", raising=False)
    assert Settings().encoder_spin is False  # the event loop shares the cores
    monkeypatch.setenv("QKV_ENCODER_SPIN", "true")
    assert Settings().encoder_spin is True
    monkeypatch.setenv("QKV_ENCODER_SPIN", "sometimes")
    with pytest.raises(ValidationError, match="encoder_spin"):
        Settings()


def test_search_ef_defaults_by_store(tmp_path: Path) -> None:
    """Unset, ``QKV_SEARCH_EF`` is the store's own default: 64 in Lite (recall@10 0.973 at
    522,000 documents, twice as fast as 128), 128 on a server and in ``faiss+hnsw://``."""
    from index import open_store
    from index.milvus.store import EF, LITE_EF, MilvusStore

    assert Settings().search_ef is None and (LITE_EF, EF) == (64, 128)
    assert MilvusStore(str(tmp_path / "x.db")).ef == 64
    assert MilvusStore("http://127.0.0.1:1").ef == 128
    assert open_store(f"faiss+hnsw://{tmp_path / 'f'}").ef == 128  # type: ignore[attr-defined]
    assert MilvusStore(str(tmp_path / "y.db"), ef=200).ef == 200


def test_search_ef_reaches_the_store(make_client: Any, tmp_path: Path) -> None:
    """``QKV_SEARCH_EF`` is how wide the store searches its HNSW index: a ``faiss+hnsw://``
    store searched at 16 finds fewer of the exact neighbours than at 512."""
    import numpy as np

    from index import Item

    found = {}
    for ef in (16, 512):
        client = make_client(filled=False, store=f"faiss+hnsw://{tmp_path / str(ef)}",
                             search_ef=ef)
        store = client.app.state.service.store  # type: ignore[attr-defined]
        assert store.inner.ef == ef
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4000, 32)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        store.create("v", 32)
        store.upsert("v", [Item(id=str(i), vector=v, text="") for i, v in enumerate(x)])
        xq = x[:50] + 0.3 * rng.standard_normal((50, 32)).astype(np.float32)
        exact = np.argsort(-(xq @ x.T), axis=1)[:, :10]
        hits = store.search("v", xq, 10, mode="dense")
        found[ef] = np.mean([len({h.id for h in hs} & {str(i) for i in row}) / 10
                             for hs, row in zip(hits, exact, strict=True)])
    assert found[512] > found[16] and found[512] >= 0.99, found
