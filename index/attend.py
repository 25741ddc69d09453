"""Soft retrieval: the collection read as a key-value memory.

For a query with neighbour scores s₁..s_k (cosine similarities) and values v₁..v_k::

    wᵢ = softmax(s / T)ᵢ = exp((sᵢ − max s) / T) / Σⱼ exp((sⱼ − max s) / T)
    out = Σᵢ wᵢ vᵢ

Subtracting the max keeps every exponent ≤ 0, so huge scores or a tiny temperature never
overflow; as T → 0 the weights become one-hot on the best neighbour (split evenly among
exact ties), as T → ∞ they become uniform. This is the same scaled dot-product attention
as the encoder's, with the temperature in place of √d and numpy in place of torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from index.store import Hit

DEFAULT_TEMPERATURE = 0.05


@dataclass(frozen=True)
class Attention:
    """Weights over the neighbours (…, k), summing to 1, and the weighted output (…, d)."""

    weights: np.ndarray
    output: np.ndarray


def softmax(scores: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(scores / T) over the last axis, stable for any finite scores and T > 0."""
    if not temperature > 0 or not np.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature}")
    s = np.asarray(scores, dtype=np.float64)
    if s.shape[-1] == 0:
        return s.astype(np.float32)
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite")
    with np.errstate(over="ignore"):  # a tiny T sends z to -inf: exp gives 0, the T → 0 limit
        z = (s - s.max(axis=-1, keepdims=True)) / temperature  # every entry ≤ 0
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def attend(
    scores: np.ndarray, values: np.ndarray, temperature: float = DEFAULT_TEMPERATURE
) -> Attention:
    """Weights ``softmax(scores / T)`` and output ``Σ wᵢ vᵢ``.

    ``scores`` (k,) with ``values`` (k, d), or a batch: (nq, k) with (nq, k, d).
    With no neighbours (k = 0) the weights are empty and the output is zeros.
    """
    s = np.asarray(scores, dtype=np.float32)
    v = np.asarray(values, dtype=np.float32)
    if s.ndim not in (1, 2) or v.ndim != s.ndim + 1 or v.shape[:-1] != s.shape:
        raise ValueError(
            f"scores (k,) need values (k, d), scores (nq, k) need values (nq, k, d); "
            f"got scores {s.shape} and values {v.shape}"
        )
    w = softmax(s, temperature)  # (..., k)
    out = np.einsum("...k,...kd->...d", w, v).astype(np.float32)  # (..., d)
    return Attention(weights=w, output=out)


def attend_hits(
    hits: Sequence[Hit], temperature: float = DEFAULT_TEMPERATURE, values: np.ndarray | None = None
) -> Attention:
    """:func:`attend` over one query's hits; values default to the hits' vectors (search
    with ``with_vectors=True``)."""
    scores = np.array([h.score for h in hits], dtype=np.float32)
    if values is None:
        if any(h.vector is None for h in hits):
            raise ValueError("hits carry no vectors: search with with_vectors=True or pass values")
        dim = len(hits[0].vector) if hits and hits[0].vector is not None else 0
        values = (np.stack([h.vector for h in hits if h.vector is not None]) if hits
                  else np.zeros((0, dim), np.float32))
    return attend(scores, values, temperature)
