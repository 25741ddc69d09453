"""Per-collection hybrid calibration (index.hybrid.calibration): pseudo-queries, the label-free
signals, the mapping to a weight, the choice on judged queries, and the fusion's edge."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from index.hybrid.calibration import (
    GRID,
    Calibration,
    Mapping,
    best_weight,
    from_labels,
    measure,
    pseudo_queries,
    sentences,
)
from index.hybrid.fusion import fuse, fused_ids
from index.store import Hit

WORDS = [f"w{i}" for i in range(400)]


def corpus(n: int, seed: int = 0) -> list[str]:
    """Documents of three to five sentences of random words (each topic its own words)."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        topic = rng.sample(WORDS, 30)
        docs.append(" ".join(" ".join(rng.choices(topic, k=8)) + "."
                             for _ in range(rng.randint(3, 5))))
    return docs


def bag_embed(texts: list[str] | tuple[str, ...], d: int = 256) -> np.ndarray:
    """A real (if simple) embedding: hashed bag of words, L2-normalised."""
    x = np.zeros((len(texts), d), np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().replace(".", " ").split():
            x[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % d] += 1.0
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def noise_embed(texts: list[str] | tuple[str, ...], d: int = 256) -> np.ndarray:
    """An embedding that knows nothing of the text (seeded by it, so deterministic)."""
    x = np.stack([np.random.default_rng(int(hashlib.md5(t.encode()).hexdigest()[:8], 16))
                  .standard_normal(d) for t in texts]).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_pseudo_queries_cut_a_sentence_out_or_crop_and_are_seeded() -> None:
    long = "The first sentence is here now. A second one follows it closely. And a third " \
           "sentence ends the text of this document."
    short = "a dog runs in the park with a red ball"
    qs = pseudo_queries([long, short], 2, seed=3)
    assert pseudo_queries([long, short], 2, seed=3) == qs
    by_kind = {q.kind: q for q in qs}
    ict, crop = by_kind["ict"], by_kind["crop"]
    assert ict.text in sentences(long) and ict.text not in ict.target  # cut out of the target
    assert crop.target == short and crop.text in short and len(crop.text.split()) >= 3
    assert pseudo_queries(["too short"], 5) == []  # fewer than four words: no query


def test_measure_is_deterministic_and_sees_a_useless_dense_side() -> None:
    docs = corpus(300)
    good = measure(docs, bag_embed(docs), bag_embed, seed=1, n_queries=80)
    assert measure(docs, bag_embed(docs), bag_embed, seed=1, n_queries=80) == good
    bad = measure(docs, noise_embed(docs), noise_embed, seed=1, n_queries=80)
    assert good["queries"] == bad["queries"] == 80 and good["ict"] == 1.0
    assert bad["dense"] < 0.1 < good["dense"]
    assert bad["dense_vs_bm25"] < good["dense_vs_bm25"]
    m = Mapping(0.9, 1.0, 0.0, 0.95)
    assert m.weight(bad) < m.weight(good)
    # fusing with a side that knows nothing costs BM25 most at a high weight
    assert bad["w0.95"] < bad["w0.0"]


def test_mapping_is_clipped_and_read_back() -> None:
    m = Mapping(0.9, 2.0, 0.05, 0.9)
    assert m.weight({"dense_vs_bm25": 10.0}) == 0.9
    assert m.weight({"dense_vs_bm25": 0.01}) == 0.05
    assert m.weight({}) == 0.05  # no signal: the BM25 end
    assert Mapping.from_dict({"intercept": 0.9, "slope": 2.0, "low": 0.05, "high": 0.9,
                              "extra": 1}) == m
    assert Mapping.from_dict(None) == Mapping()


def test_calibration_checks_its_fields_and_round_trips() -> None:
    cal = Calibration(0.4, "collection", "pseudo-queries", docs=10, signals={"a": 1})
    assert Calibration.from_dict(cal.to_dict() | {"unknown": 1}) == cal
    with pytest.raises(ValueError, match="dense_weight"):
        Calibration(1.5, "collection", "x")
    with pytest.raises(ValueError, match="source must be one of"):
        Calibration(0.5, "guess", "x")


def test_best_weight_takes_a_plateau_centre() -> None:
    assert best_weight({0.0: 0.5, 0.5: 0.7, 1.0: 0.6}) == 0.5
    assert best_weight({0.0: 0.70, 0.3: 0.71, 0.6: 0.71, 0.9: 0.2}, tolerance=0.011) == 0.3


def hits(ids: list[str], scores: list[float]) -> list[Hit]:
    return [Hit(i, s, "", None, {}) for i, s in zip(ids, scores, strict=True)]


def test_from_labels_picks_the_side_that_finds_the_judged_documents() -> None:
    docs = [f"d{i}" for i in range(12)]
    dense = hits(docs, list(np.linspace(0.9, 0.1, 12)))  # d0 first
    bm25 = hits(docs[::-1], list(np.linspace(9.0, 1.0, 12)))  # d11 first
    sides = {f"q{i}": (dense, bm25) for i in range(6)}
    lexical = {q: ("text", {"d11": 1}) for q in sides}
    semantic = {q: ("text", {"d0": 1}) for q in sides}
    w, sig = from_labels(sides, lexical, 0.9)
    assert w < 0.5 and sig["ndcg@10_bm25"] == 1.0 and sig["beats_default"] >= 0.5
    w, sig = from_labels(sides, semantic, 0.9)
    assert w > 0.5 and sig["ndcg@10_dense"] == 1.0
    assert set(GRID) >= {w}


def test_a_bm25_weight_of_one_still_ranks_when_bm25_found_nothing() -> None:
    dense = hits(["b", "a", "c"], [0.9, 0.5, 0.1])
    assert [h.id for h in fuse(dense, [], 3, "convex", 0.0)] == ["b", "a", "c"]
    bm25 = hits(["c", "a"], [3.0, 1.0])
    assert [h.id for h in fuse([], bm25, 2, "convex", 1.0)] == ["c", "a"]


@pytest.mark.parametrize("seed", range(40))
def test_fused_ids_are_fuses_at_every_weight(seed: int) -> None:
    """Calibration's grid fusion gives, at each weight, the ids ``fuse`` gives in its order:
    overlapping lists, ties, repeated ids, a side cut at the depth or empty."""
    rnd = random.Random(seed)
    pool = [f"d{i}" for i in range(rnd.randint(1, 40))]

    def side(scale: float) -> list[Hit]:
        n = rnd.choice([0, 1, 5, 12, 20])
        scores = sorted((round(rnd.uniform(-0.2, 1.0) * scale, rnd.choice([1, 3]))
                         for _ in range(n)), reverse=True)
        return [Hit(rnd.choice(pool), s, "", None, {}) for s in scores]

    dense, bm25 = side(1.0), side(rnd.choice([0.0, 8.0]))
    weights = [0.0, 0.1, 0.5, 0.85, 0.92, 1.0, rnd.random()]
    k, depth = rnd.choice([3, 10]), rnd.choice([5, 12, 100])
    assert fused_ids(dense, bm25, k, weights, depth=depth) == [
        [h.id for h in fuse(dense, bm25, k, "convex", w, depth=depth)] for w in weights]
