"""A hybrid hit's relevance (issue 75): the line it is 0.5 on, its two signals, the floor
the fusion records, and the fit the shipped encoder brings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from index.hybrid.fusion import CANDIDATES, fuse
from index.hybrid.relevance import (
    DEFAULT_THRESHOLD,
    Relevance,
    coverage,
    distinct_terms,
    model_relevance,
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
    assert model_relevance(tmp_path) == Relevance(1.0, 0.0, 0.1, 10.0)
    assert model_relevance(tmp_path / "none") == Relevance()
