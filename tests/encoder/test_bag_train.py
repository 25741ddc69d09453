"""Training the token bag's table with the network frozen (encoder/bag_train.py) and `qkv
token-bag --pairs / --corpus`, on the tiny encoder."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from minidata import COMMODITIES, write_corpus
from typer.testing import CliRunner

import encoder
from cli.app import app
from encoder.bag_train import BagTraining, TextBags, sample_pairs
from encoder.dataset import Bundle
from encoder.sources import build_sources
from encoder.token_bag import bags

TEXTS = ["copper prices rose as miners struck", "a dog runs in the park",
         "the wheat harvest failed in the north", "coffee and sugar traders met"]


@pytest.fixture(scope="module")
def bagged_dir(tiny_encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny encoder with an (untrained) token bag of weight 0.5."""
    tmp = tmp_path_factory.mktemp("bagged")
    texts = tmp / "texts.jsonl"
    texts.write_text("".join(json.dumps(f"{w} market report {i}") + "\n"
                             for i, w in enumerate(COMMODITIES * 4)))
    r = CliRunner().invoke(app, ["token-bag", "--model", str(tiny_encoder_dir), "--texts",
                                 str(texts), "--out", str(tmp / "model")])
    assert r.exit_code == 0, r.output
    return tmp / "model"


def test_training_vectors_are_the_served_vectors(bagged_dir: Path) -> None:
    enc = encoder.load(bagged_dir, device="cpu", backend="torch")
    ids, _ = enc.tokenize(TEXTS)
    idf = enc.model.get_buffer("lexical_idf").numpy()
    text_bags = TextBags(ids, enc.encode_ids(ids, bag=False), idf)
    served = text_bags.served(np.arange(len(TEXTS)), enc.model.embed.weight.detach(), 0.5)
    assert np.allclose(served.detach().numpy(), enc.encode(TEXTS), atol=1e-5)
    # and what the bag adds is the token bag of encoder.token_bag
    net = enc.encode_ids(ids, bag=False)
    assert not np.allclose(net, enc.encode(TEXTS), atol=1e-3)
    bag = bags(ids, idf, enc.model.embed.weight.detach().numpy())
    want = net + 0.5 * bag
    assert np.allclose(enc.encode(TEXTS), want / np.linalg.norm(want, axis=1, keepdims=True),
                       atol=1e-5)


def test_options_and_sampling(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="steps"):
        BagTraining(steps=0)
    with pytest.raises(ValueError, match="lr"):
        BagTraining(lr=0.0)
    bundle = Bundle.from_sources(build_sources(data_dir))
    drawn = sample_pairs(bundle, 5, seed=0)
    assert [len(p) for p in drawn] == [min(5, len(s)) for s in bundle.sources]
    assert all(p[:, :2].min() >= 0 and p.max() < len(bundle.texts) for p in drawn if len(p))
    again = sample_pairs(bundle, 5, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(drawn, again, strict=True))


def test_adapting_the_bag_to_a_corpus(tiny_encoder_dir: Path, bagged_dir: Path,
                                      tmp_path: Path) -> None:
    run = CliRunner().invoke
    out = tmp_path / "adapted"
    corpus = str(write_corpus(tmp_path))
    r = run(app, ["token-bag", "--model", str(bagged_dir), "--corpus", corpus, "--steps", "40",
                  "--batch-size", "16", "--lr", "0.01", "--out", str(out)])
    assert r.exit_code == 0, r.output
    base = encoder.load(bagged_dir, device="cpu", backend="torch")
    adapted = encoder.load(out, device="cpu", backend="torch")
    assert adapted.config.lexical_table and not base.config.lexical_table
    assert adapted.fingerprint != base.fingerprint
    record = json.loads((out / "config.json").read_text())["token_bag"]
    assert record["weight"] == 0.5 and record["n_texts"] == 40  # the idf's record is kept
    trained = record["trained"]
    assert trained["adapted"] and trained["steps"] == 40 and trained["from"] == "embed"
    assert trained["loss_last"] < trained["loss_first"], trained
    # the network is untouched: its vectors are the same; only the bag's table moved
    for k, v in base.model.state_dict().items():
        assert torch.equal(v, adapted.model.state_dict()[k]), k
    ids, _ = base.tokenize(TEXTS)
    assert np.array_equal(base.encode_ids(ids, bag=False), adapted.encode_ids(ids, bag=False))
    table = adapted.model.lexical.weight.detach()
    assert not torch.allclose(table, base.model.embed.weight.detach(), atol=1e-3)
    net = adapted.encode_ids(ids, bag=False)
    want = net + 0.5 * bags(ids, adapted.model.get_buffer("lexical_idf").numpy(), table.numpy())
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(adapted.encode(TEXTS), want, atol=1e-5)
    onnx = encoder.load(out, device="cpu", backend="onnx")
    assert float((onnx.encode(TEXTS) * want).sum(axis=1).min()) > 0.99

    # adapting again goes on from the trained table
    r = run(app, ["token-bag", "--model", str(out), "--corpus", corpus,
                  "--steps", "2", "--batch-size", "16", "--out", str(tmp_path / "again")])
    assert r.exit_code == 0, r.output
    again = json.loads((tmp_path / "again/config.json").read_text())["token_bag"]["trained"]
    assert again["from"] == "lexical"

    # --weight 0 takes the bag out, trained table and all: the network's fingerprint again
    r = run(app, ["token-bag", "--model", str(out), "--texts", corpus, "--weight", "0",
                  "--out", str(tmp_path / "plain")])
    assert r.exit_code == 0, r.output
    plain = encoder.load(tmp_path / "plain", device="cpu", backend="torch")
    assert not plain.config.lexical_table and not plain.config.lexical_weight
    assert plain.fingerprint == encoder.load(tiny_encoder_dir, device="cpu").fingerprint


def test_training_the_bag_on_a_bundle(bagged_dir: Path, data_dir: Path, tmp_path: Path
                                      ) -> None:
    folder = Bundle.from_sources(build_sources(data_dir)).save(tmp_path / "bundle")
    r = CliRunner().invoke(app, ["token-bag", "--model", str(bagged_dir), "--pairs",
                                 str(folder), "--steps", "3", "--batch-size", "8",
                                 "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    trained = json.loads((tmp_path / "m/config.json").read_text())["token_bag"]["trained"]
    assert not trained["adapted"] and trained["on"] == "bundle" and trained["pairs"] > 0


def test_bad_requests_write_nothing(tiny_encoder_dir: Path, bagged_dir: Path, tmp_path: Path
                                    ) -> None:
    run = CliRunner().invoke
    corpus = str(write_corpus(tmp_path))
    out = tmp_path / "out"
    cases = [
        (["--model", str(tiny_encoder_dir), "--corpus", corpus], "no token bag"),
        (["--model", str(bagged_dir), "--corpus", corpus, "--pairs", str(tmp_path)],
         "not both"),
        (["--model", str(bagged_dir)], "--texts"),
        (["--model", str(bagged_dir), "--corpus", str(tmp_path / "missing.jsonl")],
         "--corpus"),
        (["--model", str(bagged_dir), "--pairs", str(tmp_path)], "--pairs"),  # no bundle
        (["--model", str(bagged_dir), "--corpus", corpus, "--weight", "1"], "--weight"),
        (["--model", str(bagged_dir), "--corpus", corpus, "--lr", "0"], "lr must be > 0"),
    ]
    for args, message in cases:
        r = run(app, ["token-bag", *args, "--out", str(out)])
        assert r.exit_code == 2 and message in r.output, (args, r.output)
        assert not out.exists()
