"""The label-free check of an adaptation (encoder.domain): probes cut from held-back
documents, MRR@10, and when adapting is skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from encoder import domain


def test_probe_holds_documents_back_and_cuts_a_span_out_of_each() -> None:
    texts = [" ".join(f"w{i}x{j}" for j in range(40)) for i in range(500)] + ["short"] * 10
    probe = domain.make_probe(texts, seed=1)
    assert len(probe.queries) == domain.HELD_BACK == len(probe.held_back)
    assert all(len(texts[i].split()) >= 30 for i in probe.held_back)  # never a short one
    assert len(probe.docs) == len(texts)  # the held-back ones cut, every other one whole
    for q, a in zip(probe.queries, probe.answers, strict=True):
        n = len(q.split())
        source = int(q.split()[0].split("x")[0][1:])  # its words are w<doc>x<position>
        assert 8 <= n <= 20 and q in texts[source] and source in probe.held_back
        assert q not in probe.docs[a] and len(probe.docs[a].split()) == 40 - n  # cut out


def test_mrr_counts_the_rank_of_the_answer_and_hybrid_takes_its_best_weight() -> None:
    from index.store import Hit

    def ranked(*ids: int) -> list[Hit]:
        return [Hit(str(i), 1.0 - 0.1 * r, "", None, {}) for r, i in enumerate(ids)]

    dense = [ranked(0, 1, 2), ranked(2, 0, 1), ranked(0, 1, 2)]
    assert domain.rr(dense, [0, 0, 2], k=2) == pytest.approx((1 + 0.5 + 0) / 3)
    bm25 = [ranked(1, 0, 2), ranked(0, 2, 1), ranked(2, 1, 0)]
    assert domain.rr(bm25, [0, 0, 2]) == pytest.approx((0.5 + 1 + 1) / 3)
    # at some weight fusing both is at least as good as either side alone
    assert domain.hybrid_rr(dense, bm25, [0, 0, 2]) >= domain.rr(bm25, [0, 0, 2])


def test_skip_when_the_encoder_is_already_as_good_as_bm25() -> None:
    assert domain.should_skip(0.58, 0.65) is not None  # scifact-like: dense already strong
    assert domain.should_skip(0.17, 0.36) is None
    assert domain.should_skip(0.0, 0.0) is None


def test_short_texts_are_skipped_with_the_reason_and_refused_when_forced(
        tmp_path: Path) -> None:
    texts = [f"a small dog number {i} runs" for i in range(400)]
    out = domain.adapt(tmp_path / "enc", texts, [""] * 400, tmp_path / "out", "x")
    assert out.skipped and not out.accepted and "short (median 6 words" in out.reason
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="short"):
        domain.adapt(tmp_path / "enc", texts, [""] * 400, tmp_path / "out", "x", force=True)
    with pytest.raises(ValueError, match="at least 300"):
        domain.adapt(tmp_path / "enc", texts[:10], [""] * 10, tmp_path / "out", "x")
