"""Soft retrieval: weights = softmax(scores / T), output = Σ w v."""

from __future__ import annotations

import numpy as np
import pytest

from index import Hit, attend, attend_hits


def _case(k: int = 6, d: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, k).astype(np.float32), rng.standard_normal((k, d)).astype(np.float32)


@pytest.mark.parametrize("temperature", [0.01, 0.05, 1.0, 100.0])
def test_weights_sum_to_one_and_match_the_formula(temperature: float) -> None:
    s, v = _case()
    a = attend(s, v, temperature)
    assert a.weights.sum() == pytest.approx(1.0, abs=1e-6)
    e = np.exp((s - s.max()) / temperature)
    np.testing.assert_allclose(a.weights, e / e.sum(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(a.output, (e / e.sum()) @ v, rtol=1e-4, atol=1e-6)


def test_permuting_neighbours_permutes_weights_and_keeps_output() -> None:
    s, v = _case()
    a = attend(s, v, 0.1)
    perm = np.random.default_rng(1).permutation(len(s))
    b = attend(s[perm], v[perm], 0.1)
    np.testing.assert_allclose(b.weights, a.weights[perm], atol=1e-7)
    np.testing.assert_allclose(b.output, a.output, atol=1e-6)


def test_tiny_temperature_picks_the_best_neighbour() -> None:
    s, v = _case()
    a = attend(s, v, 1e-6)
    best = int(np.argmax(s))
    assert a.weights[best] == pytest.approx(1.0)
    np.testing.assert_allclose(a.output, v[best], atol=1e-6)


def test_huge_temperature_is_uniform_and_huge_scores_do_not_overflow() -> None:
    s, v = _case()
    np.testing.assert_allclose(attend(s, v, 1e6).weights, np.full(len(s), 1 / len(s)), atol=1e-6)
    big = np.array([1e30, 1e30 - 1e24, -1e30], dtype=np.float32)
    a = attend(big, np.eye(3, dtype=np.float32), 1e-3)
    assert np.isfinite(a.weights).all() and np.isfinite(a.output).all()
    assert a.weights.sum() == pytest.approx(1.0)


def test_batched_form_equals_row_by_row() -> None:
    s = np.stack([_case(seed=i)[0] for i in range(3)])
    v = np.stack([_case(seed=i)[1] for i in range(3)])
    a = attend(s, v, 0.2)
    for i in range(3):
        np.testing.assert_allclose(a.output[i], attend(s[i], v[i], 0.2).output, atol=1e-6)


def test_bad_arguments() -> None:
    s, v = _case()
    with pytest.raises(ValueError, match="temperature"):
        attend(s, v, 0.0)
    with pytest.raises(ValueError, match="values"):
        attend(s, v[:-1], 0.1)
    with pytest.raises(ValueError, match="finite"):
        attend(np.array([np.nan, 1.0]), np.ones((2, 2)), 0.1)


def test_attend_hits_uses_the_hit_vectors_by_default() -> None:
    s, v = _case(k=3)
    hits = [Hit(f"h{i}", float(s[i]), "", None, {}, v[i]) for i in range(3)]
    np.testing.assert_allclose(attend_hits(hits, 0.1).output, attend(s, v, 0.1).output, atol=1e-6)
    with pytest.raises(ValueError, match="with_vectors"):
        attend_hits([Hit("x", 1.0, "", None, {})], 0.1)
    empty = attend_hits([], 0.1, values=np.zeros((0, 4), np.float32))
    assert empty.weights.shape == (0,) and np.array_equal(empty.output, np.zeros(4))
