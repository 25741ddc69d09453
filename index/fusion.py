"""Fusing a dense and a BM25 ranking of the same query into one (hybrid search).

Each side is a list of hits, best first, from its own search with the same ``k``. The
fused list holds every hit either side found, scored by one of:

* ``rrf`` (reciprocal rank fusion, Cormack et al. 2009), as Milvus' ``RRFRanker(k)``::

      score(d) = Σ_side 1 / (k_rrf + rank_side(d))     ranks from 1, k_rrf = 60

  A side that did not find ``d`` adds nothing. Scores are at most 2 / 61 ≈ 0.0328.
* ``weighted``: each side's score mapped to [0, 1], then mixed with ``dense_weight``::

      score(d) = w · (1 + cos(d)) / 2 + (1 − w) · (2 / π) · atan(bm25(d))    w = 0.5

  (cosines of unit vectors lie in [-1, 1]; BM25 scores in [0, ∞), squashed as Milvus'
  ``WeightedRanker`` does). A side that did not find ``d`` adds 0.

Ties are broken by id, so the fused order is a pure function of the two input lists.
Every fused hit's ``sources`` maps each side that found it to its score there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from index.store import Hit

FUSIONS = ("rrf", "weighted")
RRF_K = 60
DEFAULT_DENSE_WEIGHT = 0.5


def check_fusion(fusion: str, dense_weight: float) -> None:
    """Refuse an unknown fusion or a weight outside [0, 1] (``ValueError``)."""
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be in [0, 1], got {dense_weight}")


def fuse(dense: Sequence[Hit], bm25: Sequence[Hit], k: int, fusion: str = "rrf",
         dense_weight: float = DEFAULT_DENSE_WEIGHT, rrf_k: int = RRF_K) -> list[Hit]:
    """The top ``k`` of the two rankings fused (see the module docstring), best first."""
    sides = {"dense": dense, "bm25": bm25}
    first: dict[str, Hit] = {}
    found: dict[str, dict[str, float]] = {}
    score: dict[str, float] = {}
    for side, hits in sides.items():
        for rank, h in enumerate(hits, start=1):
            first.setdefault(h.id, h)
            found.setdefault(h.id, {})[side] = h.score
            if fusion == "rrf":
                part = 1.0 / (rrf_k + rank)
            elif fusion == "weighted":
                part = (dense_weight * (1.0 + h.score) / 2.0 if side == "dense"
                        else (1.0 - dense_weight) * 2.0 / math.pi * math.atan(h.score))
            else:
                raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
            score[h.id] = score.get(h.id, 0.0) + part
    order = sorted(score, key=lambda i: (-score[i], i))[:k]
    # The vector, when asked for, may only have come with the dense side's hit.
    vectors = {h.id: h.vector for hits in sides.values() for h in hits if h.vector is not None}
    return [replace(first[i], score=score[i], sources=dict(found[i]),
                    vector=vectors.get(i, first[i].vector)) for i in order]
