"""Shared fixtures: a tiny data directory in the shared layout, a tiny encoder, and the
real Milvus servers (2.3.5 standalone, ``milvus-lite server``) for the whole session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from minidata import write_data_dir

from wiring import runtime

runtime.configure()  # before torch loads: idle OpenMP workers sleep (see wiring/runtime.py)

import error_paths  # noqa: E402
from store_backends import milvus_lite_server, milvus_standalone  # noqa: E402

import encoder  # noqa: E402
from encoder.tokenizer import train_tokenizer  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def graph_cache_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The ``qkv`` processes the tests start share one graph cache (encoder/graph_cache.py)
    of their own, not the user's: the first to load an encoder builds its graph."""
    os.environ["QKV_GRAPH_CACHE"] = str(tmp_path_factory.mktemp("graphs"))
    yield
    os.environ.pop("QKV_GRAPH_CACHE", None)


@pytest.fixture(scope="session", autouse=True)
def error_bodies_name_no_path() -> Iterator[None]:
    """Every error answer in the session is read for a server path (tests/error_paths.py)."""
    undo = error_paths.install()
    yield
    undo()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its controller reports them
        workeroutput["path_leaks"] = list(error_paths.leaks)
        return
    if error_paths.leaks:  # also those a client thread swallowed
        print(f"\n{len(error_paths.leaks)} error answers named a server path:",
              *error_paths.leaks[:5], sep="\n")
        session.exitstatus = 1


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist's controller: a worker's leaks, for its session's end above."""
    error_paths.leaks.extend(getattr(node, "workeroutput", {}).get("path_leaks", []))


@pytest.fixture(scope="session")
def fp32_reference() -> tuple[list[str], np.ndarray, str]:
    """The shipped encoder's fp32 reference (tests/fixtures/make_fp32_reference.py): texts,
    the vectors the fp32 network gave them with the shipped token bag added as ``encode``
    adds it (the bag is the same numpy sum on every backend), and the fp32 fingerprint."""
    ref = np.load(Path(__file__).parent / "fixtures/encoder-default-fp32.npz")
    texts = [str(t) for t in ref["texts"]]
    enc = encoder.load(Path(__file__).parents[1] / "models/encoder-default", device="cpu",
                       backend="torch")
    v = enc.add_token_bag(enc.tokenize(texts)[0], ref["vectors"].astype(np.float32))
    return texts, v / np.linalg.norm(v, axis=1, keepdims=True), str(ref["fingerprint"])


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_data_dir(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """An untrained tiny encoder checkpoint (random weights, a real BPE tokenizer)."""
    import torch

    from encoder.pairs import tokenizer_corpus
    from encoder.sources import build_sources

    torch.manual_seed(0)
    tok = train_tokenizer(tokenizer_corpus(build_sources(data_dir)), vocab_size=400)
    cfg = encoder.EncoderConfig(vocab_size=tok.get_vocab_size(), d_model=32, n_layers=2,
                                n_heads=2, d_ff=64, max_tokens=24, name="tiny")
    path = tmp_path_factory.mktemp("tiny-encoder")
    encoder.save_checkpoint(path, encoder.TransformerEncoder(cfg), tok, {})
    return path


@pytest.fixture(scope="session")
def other_tiny_encoder_dir(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path
                           ) -> Path:
    """The tiny encoder with its weights changed: the same name and dimension, another
    fingerprint (what a model stored at another precision looks like to a collection)."""
    import torch

    enc = encoder.load(tiny_encoder_dir, device="cpu")
    with torch.no_grad():
        for p in enc.model.parameters():
            p.mul_(1.01)
    path = tmp_path_factory.mktemp("other-tiny-encoder")
    enc.save(path, {})
    return path


@pytest.fixture(scope="session")
def milvus_server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Milvus 2.3.5 standalone server for the whole session."""
    with milvus_standalone(tmp_path_factory.mktemp("milvus-2.3.5")) as uri:
        yield uri


@pytest.fixture(scope="session")
def lite_server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``milvus-lite server`` for the whole session."""
    with milvus_lite_server(tmp_path_factory.mktemp("lite-server") / "data") as uri:
        yield uri
