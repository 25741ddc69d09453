"""Fixtures for the index tests: the four store backends, and a tiny encoder checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_backends import BACKENDS, open_backend

from index import VectorStore


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = open_backend(backend, request, tmp_path)
    yield s
    s.close()


@pytest.fixture
def collection(store: VectorStore) -> Iterator[str]:
    """A fresh collection name; dropped afterwards (the servers live all session)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    store.drop(name)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained tiny encoder checkpoint (random weights, a real BPE tokenizer)."""
    import torch

    import encoder
    from encoder.tokenizer import train_tokenizer

    torch.manual_seed(0)
    texts = [f"document number {i} about the {w} in the park" for i in range(200)
             for w in ("dog", "cat", "river")]
    tok = train_tokenizer(texts, vocab_size=300)
    cfg = encoder.EncoderConfig(vocab_size=tok.get_vocab_size(), d_model=32, n_layers=1,
                                n_heads=2, d_ff=64, max_tokens=32, name="tiny")
    path = tmp_path_factory.mktemp("tiny-encoder")
    encoder.save_checkpoint(path, encoder.TransformerEncoder(cfg), tok, {})
    return path
