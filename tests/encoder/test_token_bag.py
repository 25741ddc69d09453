"""The encoder's token bag (encoder/token_bag.py) and `qkv token-bag`, on the tiny encoder."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import encoder
from cli.app import app
from encoder.token_bag import ROWWISE_MAX, bags, idf_of

TEXTS = ["the wing flutter at supersonic speed", "a dog runs in the park",
         "supersonic flutter of a thin wing", "children play in a park"]


def test_idf_and_bags() -> None:
    idf = idf_of([[1, 5, 6], [1, 5], [1, 7]], vocab=8, specials=[1])
    assert idf[1] == 0.0 and idf[0] > idf[6] > idf[5] > 0  # rarer weighs more; unseen most
    table = np.eye(8, dtype=np.float32)
    b = bags([[5, 6, 6], [1]], idf, table)
    assert np.allclose(np.linalg.norm(b[0]), 1.0)
    assert b[0, 6] > b[0, 5] > 0 and b[0, 1] == 0  # tf (saturated) and idf
    assert not b[1].any()  # only specials: a zero bag, the network's vector alone
    assert bags([], idf, table).shape == (0, 8)


def test_small_and_large_batches_make_the_same_bags() -> None:
    """Up to ROWWISE_MAX texts the bags are summed row by row, above it in one sparse
    product: a text's bag must not depend on which."""
    rng = np.random.default_rng(0)
    vocab, width = 50, 16
    idf = idf_of([rng.integers(0, vocab, 8) for _ in range(30)], vocab, specials=[0])
    table = rng.standard_normal((vocab, width)).astype(np.float32)
    ids = [list(rng.integers(0, vocab, rng.integers(1, 12))) for _ in range(3 * ROWWISE_MAX)]
    ids[5] = [0, 0]  # specials only: a zero bag either way
    together = bags(ids, idf, table)  # the sparse product
    alone = np.concatenate([bags([x], idf, table) for x in ids])  # row by row
    few = np.concatenate([bags(ids[i:i + ROWWISE_MAX], idf, table)
                          for i in range(0, len(ids), ROWWISE_MAX)])
    assert np.allclose(together, alone, atol=1e-6) and np.allclose(together, few, atol=1e-6)
    assert not together[5].any() and np.allclose(np.linalg.norm(together[:5], axis=1), 1)


@pytest.fixture()
def idf_texts(tmp_path: Path) -> Path:
    path = tmp_path / "texts.jsonl"
    lines = [json.dumps(t) for t in TEXTS] + [json.dumps({"text": "the a of in"})] * 20
    path.write_text("\n".join(lines) + "\n")
    return path


def test_token_bag_command(tiny_encoder_dir: Path, idf_texts: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke
    plain = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    bagged_dir, removed_dir = tmp_path / "bagged", tmp_path / "removed"
    r = run(app, ["token-bag", "--model", str(tiny_encoder_dir), "--texts", str(idf_texts),
                  "--weight", "0.5", "--out", str(bagged_dir)])
    assert r.exit_code == 0, r.output
    bagged = encoder.load(bagged_dir, device="cpu", backend="torch")
    assert bagged.config.lexical_weight == 0.5
    assert bagged.fingerprint != plain.fingerprint
    assert json.loads((bagged_dir / "config.json").read_text())["token_bag"]["n_texts"] == 24

    # what encode returns: n(n(network) + 0.5 bag), on both backends
    ids, _ = plain.tokenize(TEXTS)
    net = plain.encode(TEXTS)
    idf = bagged.model.get_buffer("lexical_idf").numpy()
    want = net + 0.5 * bags(ids, idf, bagged.model.embed.weight.detach().numpy())
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(bagged.encode(TEXTS), want, atol=1e-5)
    onnx = encoder.load(bagged_dir, device="cpu", backend="onnx")
    assert float((onnx.encode(TEXTS) * want).sum(axis=1).min()) > 0.99
    # texts sharing rare words move closer than texts sharing none
    gain = bagged.encode(TEXTS) @ bagged.encode(TEXTS).T - net @ net.T
    assert gain[0, 2] > gain[0, 1], gain

    # weight 0 takes it out again: the same weights, vectors and fingerprint as before
    r = run(app, ["token-bag", "--model", str(bagged_dir), "--texts", str(idf_texts),
                  "--weight", "0", "--out", str(removed_dir)])
    assert r.exit_code == 0, r.output
    removed = encoder.load(removed_dir, device="cpu", backend="torch")
    assert removed.fingerprint == plain.fingerprint
    assert np.array_equal(removed.encode(TEXTS), net)
    r = run(app, ["token-bag", "--model", str(tiny_encoder_dir), "--texts",
                  str(tmp_path / "missing.jsonl")])
    assert r.exit_code == 2 and "--texts" in r.output  # a usage error, nothing written
