"""The cross-encoder reranker (issue 74): a pair's ids, the loaded reranker scoring as the
trained module does, training that learns and resumes, a plain encoder refused, and the
training examples built from the shared layout with held-out texts left out."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import encoder
from encoder import reranker
from encoder.device import Defaults
from encoder.rerank_train import RerankTrainConfig, train

WORDS = ("apple river stone cloud music engine garden window paper silver orange forest "
         "bridge candle rocket tiger violin winter yellow harbor").split()


def _examples(path: Path, n: int, seed: int) -> Path:
    """Queries of three words; the positive holds them, the negatives other words."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = rng.sample(WORDS, 6)
        rows.append({"query": " ".join(words[:3]),
                     "positive": " ".join(words[:3][::-1] + words[3:4]),
                     "negatives": [" ".join(rng.sample([w for w in WORDS if w not in words[:3]],
                                                       4)) for _ in range(3)]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_pair_ids_cut_the_query_then_the_whole() -> None:
    q, p = list(range(1, 80)), list(range(100, 400))
    ids = reranker.pair_ids(q, p, max_tokens=128, query_tokens=48)
    assert ids[:48] == q[:48] and ids[48] == 100 and len(ids) == 128
    assert reranker.pair_ids([1, 5], [1, 7, 8], 256) == [1, 5, 1, 7, 8]
    # marked: the tokens both sides have (not <s>) move up by the vocabulary's size
    assert reranker.pair_ids([1, 5, 9], [1, 9, 8, 5, 5], 256, vocab=100) == [
        1, 105, 109, 1, 109, 8, 105, 105]
    # a token cut from the passage marks nothing in the query
    assert reranker.pair_ids([1, 5], [1, 7, 5], 4, vocab=100) == [1, 5, 1, 7]


def test_marked_tokens_start_as_the_plain_ones(tiny_encoder_dir: Path) -> None:
    base = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    scorer = reranker.from_encoder(base.model)
    v = base.config.vocab_size
    assert scorer.vocab == v and scorer.config.vocab_size == 2 * v
    table = scorer.encoder.embed.weight
    assert torch.equal(table[:v], table[v:]) and torch.equal(table[:v], base.model.embed.weight)
    plain = reranker.from_encoder(base.model, marked=False)
    assert plain.vocab is None and plain.config.vocab_size == v


def test_loaded_reranker_scores_as_the_trained_module(tiny_encoder_dir: Path,
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # fp32 on every CPU: on one with native bf16 the loaded reranker's score ran in bf16
    # autocast and the module's call below did not (0.008 apart on an Intel Xeon)
    monkeypatch.setattr(Defaults, "bf16", False)  # QKV_NO_BF16
    base = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    scorer = reranker.from_encoder(base.model)
    torch.manual_seed(0)
    with torch.no_grad():
        scorer.head.weight.normal_()
        scorer.head.bias.fill_(0.25)
    reranker.save(scorer, base.tokenizer, tmp_path / "rr", {}, precision="fp32")
    assert reranker.is_reranker(tmp_path / "rr") and not reranker.is_reranker(tiny_encoder_dir)
    loaded = reranker.load(tmp_path / "rr", device="cpu", backend="torch")
    passages = ["a dog runs in the park", "the market fell", "x"]
    got = loaded.score("a dog", passages)
    pairs = loaded.pairs("a dog", passages)
    with torch.no_grad():
        want = [float(scorer.eval()(torch.tensor([p]))[0]) for p in pairs]
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert len(set(np.round(got, 4))) == 3  # the head reads the pair: three scores
    onnx = reranker.load(tmp_path / "rr", device="cpu", backend="onnx")  # int8, as served
    np.testing.assert_allclose(onnx.score("a dog", passages), got, atol=0.15 * np.ptp(got) + 0.05)


def test_a_plain_encoder_is_not_a_reranker(tiny_encoder_dir: Path) -> None:
    with pytest.raises(reranker.NotARerankerError, match="train-reranker"):
        reranker.load(tiny_encoder_dir, device="cpu")


def test_training_learns_the_pairs_and_resumes(tiny_encoder_dir: Path, tmp_path: Path) -> None:
    train_file = _examples(tmp_path / "train.jsonl", 400, seed=1)
    test = [json.loads(x) for x in _examples(tmp_path / "test.jsonl", 60, seed=2)
            .read_text().splitlines()]
    out = tmp_path / "run"
    cfg = RerankTrainConfig(str(train_file), str(out), str(tiny_encoder_dir), steps=30,
                            queries=8, negatives=3, lr=3e-3, warmup_steps=5, device="cpu",
                            checkpoint_every_s=1e9)
    train(cfg)
    assert json.loads((out / "config.json").read_text())["training"]["step"] == 30
    cfg.steps = 150
    train(cfg)  # resumes from out/last at step 30
    meta = json.loads((out / "config.json").read_text())
    assert meta["training"]["step"] == 150 and meta["kind"] == "reranker"
    loaded = reranker.load(out, device="cpu", backend="torch")
    right = 0
    for row in test:
        s = loaded.score(row["query"], [row["positive"], *row["negatives"]])
        right += int(s[0] > s[1:].max())  # a tie (the untrained zero head's) is wrong
    assert right / len(test) >= 0.45, right  # chance: 1 in 4


def test_a_time_budget_ends_the_run_with_a_checkpoint(tiny_encoder_dir: Path,
                                                      tmp_path: Path) -> None:
    train_file = _examples(tmp_path / "train.jsonl", 50, seed=3)
    cfg = RerankTrainConfig(str(train_file), str(tmp_path / "run"), str(tiny_encoder_dir),
                            steps=100_000, queries=4, negatives=2, device="cpu", budget_s=3.0,
                            checkpoint_every_s=1e9)
    train(cfg)
    step = json.loads((tmp_path / "run/config.json").read_text())["training"]["step"]
    assert 5 <= step < 100_000


def test_a_time_budget_is_spent_when_the_first_steps_ran_slow(
        tiny_encoder_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU's first steps (its warm-up) run far slower than the rest: the budget is re-read
    as the run goes, so the run still lasts about its budget (one reading after the first
    steps ended it at a fraction)."""
    import encoder.rerank_train as rt

    calls = {"n": 0}
    real = rt.group_loss

    def slow_start(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] <= rt.PROBE:
            time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(rt, "group_loss", slow_start)
    train_file = _examples(tmp_path / "train.jsonl", 50, seed=3)
    budget = 8.0
    cfg = RerankTrainConfig(str(train_file), str(tmp_path / "run"), str(tiny_encoder_dir),
                            steps=100_000, queries=4, negatives=2, device="cpu",
                            budget_s=budget, checkpoint_every_s=1e9)
    t0 = time.time()
    train(cfg)
    took = time.time() - t0
    step = json.loads((tmp_path / "run/config.json").read_text())["training"]["step"]
    assert took >= 0.8 * budget, (took, step)  # one early reading: about half of it
    assert step > 4 * rt.PROBE, step  # one early reading stopped near 2 * PROBE


def test_examples_leave_held_out_texts_out(data_dir: Path, tmp_path: Path) -> None:
    from encoder.rerank_data import build

    out = tmp_path / "ex.jsonl"
    counts = build(data_dir, out, [], per_source=40, encode=None, only=["stsb-train", "medquad"])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows and sum(counts.values()) == len(rows)
    assert all(r["positive"] not in r["negatives"] and r["negatives"] for r in rows)
    # hold one query out as a dev collection would: it and its passages are gone
    held = rows[0]
    dev = tmp_path / "dev"
    (dev / "qrels").mkdir(parents=True)
    (dev / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": held["query"]}) + "\n")
    (dev / "corpus.jsonl").write_text(json.dumps({"_id": "d", "text": held["positive"]}) + "\n")
    (dev / "qrels/dev.tsv").write_text("query-id\tcorpus-id\tscore\nq\td\t1\n")
    build(data_dir, out, [dev], per_source=40, encode=None, only=["stsb-train", "medquad"])
    again = [json.loads(x) for x in out.read_text().splitlines()]
    assert all(r["query"] != held["query"] and r["positive"] != held["positive"]
               for r in again)
