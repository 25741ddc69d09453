"""A hybrid hit's relevance (issue 75): the line it is 0.5 on, its two signals, the floor
the fusion records, whether a query is scattered and how it pools, and the fit the shipped
encoder brings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from index.hybrid.fusion import CANDIDATES, fuse
from index.hybrid.relevance import (
    DEFAULT_THRESHOLD,
    Relevance,
    coverage,
    distinct_terms,
    model_relevance,
    scattered,
    spread,
)
from index.store import Hit

MODEL = Path(__file__).resolve().parents[2] / "models" / "encoder-default"


def test_half_on_the_line_and_rising_with_each_signal() -> None:
    rel = Relevance(standing=0.8, cover=0.6, offset=0.2, scale=30.0)
    on = 0.2 / 0.8  # cos − floor on the line with no coverage
    assert rel.hit(0.5 + on, 0.5, 0.0) == pytest.approx(0.5, abs=1e-4)
    assert rel.hit(0.5 + on + 0.05, 0.5, 0.0) > 0.5 > rel.hit(0.5 + on - 0.05, 0.5, 0.0)
    assert rel.hit(0.5 + on, 0.5, 0.5) > rel.hit(0.5 + on, 0.5, 0.25) > 0.5
    assert rel.hit(0.9, 0.1, 1.0) > 0.999 and rel.hit(0.1, 0.1, 0.0) < 0.01


def test_coverage_counts_the_querys_distinct_terms_as_bm25_reads_them() -> None:
    asked = distinct_terms("Reading JSON files, reading fast")  # read, json, file, fast
    assert asked == {"read", "json", "file", "fast"}
    assert coverage(asked, "how to read a json file") == 0.75  # stemmed: read, json, file
    assert coverage(asked, "nothing shared here") == 0.0
    assert coverage(distinct_terms("the and of"), "the and of") == 0.0  # stop words only


def test_fusion_records_the_querys_floor() -> None:
    def hits(n: int, top: float) -> list[Hit]:
        return [Hit(f"d{i}", top - 0.001 * i, "", None, {}) for i in range(n)]

    deep = fuse(hits(150, 0.9), [], 10, "convex", 0.9, depth=150)
    assert [h.floor for h in deep] == [pytest.approx(0.9 - 0.001 * (CANDIDATES - 1))] * 10
    small = fuse(hits(7, 0.6), hits(3, 5.0), 5, "convex", 0.9)  # a small collection: its last
    assert [h.floor for h in small] == [pytest.approx(0.6 - 0.006)] * 5
    assert {h.floor for h in fuse([], hits(3, 5.0), 3, "convex", 0.9)} == {None}


def test_an_encoder_brings_its_fit_else_the_shipped_one(tmp_path: Path) -> None:
    shipped = json.loads((MODEL / "retrieval.json").read_text())["relevance"]
    assert model_relevance(MODEL) == Relevance.from_dict(shipped) == Relevance()
    assert shipped["threshold"] == DEFAULT_THRESHOLD and shipped["worst_loo_kept"] >= 0.9
    (tmp_path / "retrieval.json").write_text(json.dumps(
        {"dense_weight": 0.8, "relevance": {"standing": 1.0, "cover": 0.0, "offset": 0.1,
                                            "scale": 10.0}}))
    # a fit from before queries were asked keeps its line alone
    assert model_relevance(tmp_path) == Relevance(1.0, 0.0, 0.1, 10.0, spread_max=1.0)
    assert model_relevance(tmp_path / "none") == Relevance()
    assert shipped["spread_max"] < 1.0  # the shipped fit holds scattered queries back


def test_a_scattered_querys_hits_are_held_back_whatever_their_line() -> None:
    rel = Relevance(standing=0.8, cover=0.6, offset=0.2, scale=30.0, spread_max=0.85)
    good = (0.9, 0.5, 0.25)  # cos, floor, coverage: well above the line
    assert rel.hit(*good) > 0.99  # not scattered (spread counted as 0): the line alone
    assert rel.hit(*good, spread=0.80) > 0.5 > rel.hit(*good, spread=0.90)
    assert rel.hit(*good, spread=0.85) == pytest.approx(0.5, abs=1e-4)
    assert rel.hit(0.5, 0.5, 0.0, spread=0.5) < 0.01  # below the line: focused or not
    assert Relevance(spread_max=1.0).hit(*good, spread=0.99) > 0.5  # none held back


def test_scattered_terms_are_found_only_apart() -> None:
    asked = distinct_terms("purple elephant banana")
    assert scattered(asked, ["a purple flag", "an elephant", "banana bread"])
    assert scattered(asked, ["a purple flag", "purple rain"])  # one of them, never two
    assert not scattered(asked, ["a purple flag", "the elephant ate a banana"])  # they meet
    assert not scattered(asked, [])  # none found (a paraphrase in a small collection)
    assert not scattered(asked, ["nothing of it"])
    assert not scattered(distinct_terms("bananas"), ["banana"])  # one term
    assert not scattered(frozenset(), ["anything"])


def test_spread_is_the_pooling_entropy_over_log_tokens() -> None:
    assert spread(np.full(8, 1 / 8)) == pytest.approx(1.0)
    assert spread(np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(0.0)
    assert spread(np.array([1.0])) == 0.0
    assert 0.0 < spread(np.array([0.7, 0.1, 0.1, 0.1])) < spread(np.array([0.4, 0.2, 0.2, 0.2]))


def test_the_shipped_encoder_pools_a_question_on_its_word_and_a_noun_list_evenly() -> None:
    import encoder

    enc = encoder.load(MODEL)
    question, nouns = (spread(w) for w in enc.pooling_weights(
        ["what do pigs eat", "purple elephant banana spaceship"]))
    fit = model_relevance(MODEL)
    assert question < fit.spread_max < nouns, (question, nouns)


def test_a_hybrid_search_records_whether_the_querys_terms_are_scattered(tmp_path: Path
                                                                        ) -> None:
    from index import FaissStore
    from index.store import Item

    store = FaissStore(tmp_path / "store")
    store.create("c", 4, hybrid=True)
    texts = ["the elephant ate a banana", "a purple flag", "spaceship launch"]
    store.upsert("c", [Item(f"d{i}", np.eye(4, dtype=np.float32)[i], t, None, {})
                       for i, t in enumerate(texts)])
    q = np.eye(4, dtype=np.float32)[:1]

    def apart(query: str) -> set[bool | None]:
        return {h.scattered for h in store.search("c", q, 3, query_text=[query],
                                                  mode="hybrid")[0]}

    assert apart("elephant banana") == {False}
    assert apart("purple spaceship") == {True}
    assert apart("spaceship") == {False}  # one term
    assert {h.scattered for h in store.search("c", q, 3, query_text=["purple spaceship"],
                                              mode="dense")[0]} == {None}
