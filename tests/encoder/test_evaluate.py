from pathlib import Path

import numpy as np
import pytest

from encoder.evaluate import bm25_run, evaluate_beir, evaluate_sts, load_beir, score_run


class KeywordEmbedder:
    """A transparent embedder for tests: one dimension per animal word, L2-normalised."""

    words = ["dog", "cat", "horse", "bird", "fish", "cow", "goat", "duck", "fox", "bear",
             "park", "beach", "field", "river", "snow", "hill", "farm", "forest"]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        x = np.array([[t.lower().count(w) for w in self.words] for t in texts], np.float32)
        x += 1e-3
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_load_beir_keeps_only_judged_queries(data_dir: Path) -> None:
    corpus, queries, qrels = load_beir(data_dir / "beir/scifact", "test")
    assert len(corpus) == 80 and set(queries) == set(qrels) and len(queries) == 40
    assert corpus["d0"].startswith("The dog in the park. ")  # title joined to text
    with pytest.raises(ValueError, match="valid: test, train"):
        load_beir(data_dir / "beir/scifact", "dev")


def test_score_run_perfect_and_empty() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    perfect = score_run({"q1": {"a": 2.0, "x": 1.0}, "q2": {"b": 1.0}}, qrels)
    assert perfect == {"ndcg@10": 1.0, "recall@100": 1.0}
    half = score_run({"q1": {"a": 1.0}, "q2": {"x": 1.0}}, qrels)
    assert half == {"ndcg@10": 0.5, "recall@100": 0.5}


def test_bm25_finds_the_keyword_document() -> None:
    corpus = {"a": "the aerodynamics of wings", "b": "stock prices rose", "c": "a cat sleeps"}
    run = bm25_run(corpus, {"q": "aerodynamic wing"})
    assert max(run["q"], key=run["q"].get) == "a"  # stemming matches wing/wings


def test_evaluate_beir_reports_dense_and_bm25(data_dir: Path) -> None:
    report = evaluate_beir(KeywordEmbedder(), data_dir / "beir/scifact", "test")
    assert report["queries"] == 40
    dense, bm25 = report["dense"], report["bm25"]
    assert isinstance(dense, dict) and isinstance(bm25, dict)
    assert dense["ndcg@10"] > 0.9  # animal + place identify each document
    assert 0 < bm25["ndcg@10"] <= 1.0


def test_evaluate_sts_spearman(data_dir: Path, tmp_path: Path) -> None:
    result = evaluate_sts(KeywordEmbedder(), data_dir / "sts/stsbenchmark/sts-dev.csv")
    assert result["pairs"] == 30 and result["spearman"] > 0.5
    bad = tmp_path / "bad.csv"
    bad.write_text("not\tsts\n")
    with pytest.raises(ValueError, match="STS-B-format"):
        evaluate_sts(KeywordEmbedder(), bad)
