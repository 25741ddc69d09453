"""Graded-similarity tuning (encoder/graded.py, `qkv tune-graded`) on the tiny encoder."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import encoder
from cli.app import app
from encoder.graded import GradedOptions, Served, cosent, train_graded
from encoder.pairs import sick_graded, stsb_graded

TEXTS = ["copper prices rose as miners struck", "a dog runs in the park",
         "the wheat harvest failed in the north", "coffee and sugar traders met"]


def test_cosent_is_low_when_the_cosines_keep_the_gold_order() -> None:
    gold = torch.tensor([0.9, 0.5, 0.1])
    right = cosent(torch.tensor([0.8, 0.4, 0.0]), gold, 20.0)
    wrong = cosent(torch.tensor([0.0, 0.4, 0.8]), gold, 20.0)
    assert float(right) < 0.01 < 10.0 < float(wrong)
    # pairs with the same gold score are not compared: log(1 + nothing) = 0
    assert float(cosent(torch.tensor([0.1, 0.9]), torch.tensor([0.5, 0.5]), 20.0)) == 0.0


def test_graded_readers_scale_the_scores_to_unit(data_dir: Path) -> None:
    for pairs in (stsb_graded(data_dir), sick_graded(data_dir)):
        assert pairs and all(a and b and 0.0 <= s <= 1.0 for a, b, s in pairs)
    assert {s for _, _, s in stsb_graded(data_dir)} == {4.6 / 5, 0.4 / 5}
    assert {s for _, _, s in sick_graded(data_dir)} == {(4.0 - 1) / 4}  # relatedness 1–5


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="steps"):
        GradedOptions(steps=0)
    with pytest.raises(ValueError, match="lr"):
        GradedOptions(lr=0.0)


def test_trained_vectors_are_the_served_vectors(tiny_encoder_dir: Path, tmp_path: Path
                                                ) -> None:
    """With a token bag, the vectors tuned are those the encoder serves (bag included)."""
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps(t) + "\n" for t in TEXTS * 3))
    r = CliRunner().invoke(app, ["token-bag", "--model", str(tiny_encoder_dir), "--texts",
                                 str(texts), "--out", str(tmp_path / "bagged")])
    assert r.exit_code == 0, r.output
    for model in (tiny_encoder_dir, tmp_path / "bagged"):
        enc = encoder.load(model, device="cpu", backend="torch")
        ids, _ = enc.tokenize(TEXTS)
        with torch.no_grad():
            got = Served(enc.model.eval())(ids, torch.device("cpu")).numpy()
        assert np.allclose(got, enc.encode(TEXTS), atol=2e-3)


def test_tuning_follows_the_gold_order_and_the_cli_writes_it(
        tiny_encoder_dir: Path, data_dir: Path, tmp_path: Path) -> None:
    base = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    pairs = stsb_graded(data_dir)

    gold = np.array([p[2] for p in pairs])

    def gap(enc: encoder.TextEncoder) -> float:
        """How much closer the pairs scored high are than those scored low."""
        cos = (enc.encode([p[0] for p in pairs]) * enc.encode([p[1] for p in pairs])).sum(1)
        return float(cos[gold > 0.5].mean() - cos[gold < 0.5].mean())

    model, report = train_graded(base, [pairs], options=GradedOptions(
        steps=60, lr=1e-3, batch_size=32, warmup_steps=5))
    assert report["cosent_last"] < report["cosent_first"]
    tuned = encoder.TextEncoder(model, base.tokenizer, device="cpu")
    tuned.use_backend("torch")
    assert gap(tuned) > gap(base) + 0.3
    # the CLI: a new checkpoint that says how it was tuned, the base left as it was
    before = (tiny_encoder_dir / "model.safetensors").read_bytes()
    r = CliRunner().invoke(app, ["tune-graded", "--model", str(tiny_encoder_dir), "--data",
                                 str(data_dir), "--out", str(tmp_path / "tuned"),
                                 "--steps", "3", "--batch-size", "8"])
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "tuned/config.json").read_text())
    assert meta["graded"]["steps"] == 3 and meta["graded"]["keep_pairs"] > 0
    assert set(meta["graded"]["sources"]) == {"sts-b", "sick"}
    assert (tiny_encoder_dir / "model.safetensors").read_bytes() == before
    assert encoder.load(tmp_path / "tuned").fingerprint != base.fingerprint


def test_frozen_parameters_stay_as_they_were(tiny_encoder_dir: Path, data_dir: Path) -> None:
    base = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    model, _ = train_graded(base, [stsb_graded(data_dir)], options=GradedOptions(
        steps=5, lr=1e-3, batch_size=8, warmup_steps=1, freeze=("embed", "blocks.0")))
    before, after = base.model.state_dict(), model.state_dict()
    for name in before:
        if not before[name].is_floating_point():
            continue
        same = torch.equal(before[name], after[name])
        assert same == (name.startswith(("embed.", "blocks.0.")) or "lexical" in name), name
    with pytest.raises(ValueError, match="no parameter of the network is named blocks.99"):
        train_graded(base, [stsb_graded(data_dir)],
                     options=GradedOptions(steps=1, freeze=("blocks.99",)))


def test_cli_refuses_unknown_sets_and_precisions(tiny_encoder_dir: Path, data_dir: Path,
                                                  tmp_path: Path) -> None:
    for flag, value, says in (("--sources", "sts-b,nope", "choose among"),
                              ("--precision", "int4", "choose among"),
                              ("--freeze", "embed,nope", "no parameter of the network"),
                              ("--model", str(tmp_path / "none"), "Invalid value for --model")):
        r = CliRunner().invoke(app, ["tune-graded", "--model", str(tiny_encoder_dir), "--data",
                                     str(data_dir), "--out", str(tmp_path / "x"), flag, value])
        assert r.exit_code == 2 and says in r.output, r.output
        assert not (tmp_path / "x").exists()
