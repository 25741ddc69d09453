import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import decoder
from decoder.data import read_pairs
from decoder.train import BatchPlan, TrainConfig, lr_at, train, train_subset

ARCH = {"d_model": 32, "n_encoder_layers": 1, "n_decoder_layers": 1, "n_heads": 2,
        "d_ff": 64, "max_tokens": 32, "dropout": 0.1}


def overlap_retriever(train_sources: list[str], k: int):
    """A stand-in for the encoder + FAISS retriever: word overlap, softmax(score / 0.1)."""
    words = [set(s.lower().split()) for s in train_sources]

    def retrieve(queries: Sequence[str], exclude: Sequence[int | None]):
        out = []
        for q, e in zip(queries, exclude, strict=True):
            qw = set(q.lower().split())
            scored = sorted(((len(qw & w) / len(qw | w), j) for j, w in enumerate(words)
                             if j != e), reverse=True)[:k]
            z = [math.exp(s / 0.1) for s, _ in scored]
            out.append([(j, zi / sum(z)) for (_, j), zi in zip(scored, z, strict=True)])
        return out

    return retrieve


def _cfg(task1_dir: Path, out: Path, **kw: object) -> TrainConfig:
    base = {"data_dir": str(task1_dir), "out_dir": str(out), "steps": 60, "batch_size": 16,
            "lr": 3e-3, "warmup_steps": 5, "checkpoint_every": 20, "eval_every": 30,
            "vocab_size": 400, "device": "cpu", "k": 2, "arch": ARCH,
            "retrieval": {"who": "word overlap"}}
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


def _retriever(task1_dir: Path, k: int = 2):
    return overlap_retriever([s for s, _ in read_pairs(task1_dir, "train")], k)


def test_tiny_training_run_lowers_the_validation_loss(task1_dir: Path, tmp_path: Path) -> None:
    cfg = _cfg(task1_dir, tmp_path / "run")
    out = train(cfg, _retriever(task1_dir))
    meta = json.loads((out / "config.json").read_text())
    untrained = train(_cfg(task1_dir, tmp_path / "zero", steps=1, lr=0.0, warmup_steps=1),
                      _retriever(task1_dir))
    before = json.loads((untrained / "config.json").read_text())["metrics"]["val_nll"]
    after = meta["metrics"]["val_nll"]
    assert after < 0.6 * before, (before, after)
    assert meta["architecture"]["d_model"] == 32 and meta["training"]["k"] == 2
    assert meta["training"]["retrieval"] == {"who": "word overlap"}
    assert json.loads((out / "last/trainer_state.json").read_text())["step"] == 60
    nbrs = json.loads((out / "neighbours.json").read_text())
    assert len(nbrs["train"]) == 60 and len(nbrs["val"]) == 12
    assert all(len(r) == 2 and i not in [j for j, _ in r] for i, r in enumerate(nbrs["train"]))
    dec = decoder.load(out, device="cpu")
    assert dec.generate("A small dog runs in the park.", beam=2).text  # it writes something


def test_resumed_run_equals_uninterrupted_run(task1_dir: Path, tmp_path: Path) -> None:
    retrieve = _retriever(task1_dir)
    straight = train(_cfg(task1_dir, tmp_path / "a", steps=12, checkpoint_every=4), retrieve)
    train(_cfg(task1_dir, tmp_path / "b", steps=12, checkpoint_every=5, stop_after=7), retrieve)
    assert not (tmp_path / "b/model.safetensors").exists()  # stopped early: only last/
    assert json.loads((tmp_path / "b/last/trainer_state.json").read_text())["step"] == 7

    def no_retrieval(queries: Sequence[str], exclude: Sequence[int | None]) -> list:
        raise AssertionError("neighbours.json should have been reused")

    resumed = train(_cfg(task1_dir, tmp_path / "b", steps=12, checkpoint_every=4), no_retrieval)
    a, b = (load_file(str(p / "model.safetensors")) for p in (straight, resumed))
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4)


def test_baseline_needs_no_retriever_and_k_needs_one(task1_dir: Path, tmp_path: Path) -> None:
    out = train(_cfg(task1_dir, tmp_path / "base", k=0, steps=3))
    assert not (out / "neighbours.json").exists()
    assert json.loads((out / "config.json").read_text())["training"]["k"] == 0
    with pytest.raises(ValueError, match="retrieve"):
        train(_cfg(task1_dir, tmp_path / "nok", k=2, steps=3))


def test_a_half_trained_decoder_sees_a_seeded_half(task1_dir: Path, tmp_path: Path) -> None:
    half = train_subset(60, 0.5, seed=3)
    assert len(half) == 30 and half == sorted(set(half)) and half == train_subset(60, 0.5, 3)
    assert half != train_subset(60, 0.5, seed=4) and train_subset(5, 1.0, 0) == list(range(5))
    with pytest.raises(ValueError, match="train_fraction"):
        train_subset(10, 0.0, 0)
    out = train(_cfg(task1_dir, tmp_path / "half", k=0, steps=2, train_fraction=0.5, seed=3))
    assert json.loads((out / "config.json").read_text())["training"]["pairs"]["train"] == 30
    with pytest.raises(ValueError, match="baseline only"):
        train(_cfg(task1_dir, tmp_path / "nok", steps=2, train_fraction=0.5), _retriever(task1_dir))


def test_batches_cover_each_epoch_once_grouped_by_length_and_replay() -> None:
    cfg = TrainConfig(data_dir="", out_dir="", batch_size=8)
    lengths = [(i * 37) % 101 for i in range(300)]
    plan = BatchPlan(lengths, cfg)
    assert plan.per_epoch == 38
    epoch0 = [plan(s) for s in range(38)]
    assert sorted(np.concatenate(epoch0).tolist()) == list(range(300))  # each pair once
    spread = np.mean([np.ptp([lengths[i] for i in b]) for b in epoch0])
    assert spread < 0.25 * np.ptp(lengths)  # batches hold pairs of similar length
    again = BatchPlan(lengths, cfg)
    assert all(np.array_equal(again(s), plan(s)) for s in (40, 3, 75, 38))  # any order
    assert not np.array_equal(plan(38 + 5), plan(5))  # the next epoch reshuffles
    other = BatchPlan(lengths, TrainConfig(data_dir="", out_dir="", batch_size=8, seed=1))
    assert not all(np.array_equal(other(s), plan(s)) for s in range(5))


def test_learning_rate_warms_up_then_decays() -> None:
    cfg = TrainConfig(data_dir="", out_dir="", steps=100, lr=1e-3, warmup_steps=10)
    assert lr_at(0, cfg) == pytest.approx(1e-4)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(99, cfg) < lr_at(50, cfg) < lr_at(10, cfg)
    assert lr_at(100, cfg) == pytest.approx(1e-4)
