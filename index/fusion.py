"""Fusing a dense and a BM25 ranking of the same query into one (hybrid search).

Each side is a list of hits, best first, from its own search. Both sides are searched
``candidates(k)`` deep (at least :data:`CANDIDATES`, whatever ``k`` the caller asks for:
fusing only the top 10 of each side cost 4 % nDCG@10 in our calibration), and the fused list
holds the best ``k`` of every hit either side found, scored by one of:

* ``convex`` (the default): each side normalised by its theoretical minimum and the list's
  maximum, then mixed with ``dense_weight`` (Bruch, Gai & Ingber 2023, "An Analysis of
  Fusion Functions for Hybrid Retrieval", TMM + convex combination)::

      score(d) = w · (1 + cos(d)) / (1 + max cos) + (1 − w) · bm25(d) / max bm25

  Unlike RRF it keeps how far apart the scores are, so a weak side cannot drag a confident
  one down; on collections we did not tune to it was the only fusion not below BM25 alone.
  ``w`` comes with the encoder (its ``retrieval.json``): a better encoder earns more weight.
* ``rrf`` (reciprocal rank fusion, Cormack et al. 2009), as Milvus' ``RRFRanker(k)``::

      score(d) = Σ_side 1 / (k_rrf + rank_side(d))     ranks from 1, k_rrf = 60

* ``weighted``: as Milvus' ``WeightedRanker``: each score squashed to [0, 1], then mixed::

      score(d) = w · (1 + cos(d)) / 2 + (1 − w) · (2 / π) · atan(bm25(d))

A side that did not find ``d`` adds 0. Ties are broken by id, so the fused order is a pure
function of the two input lists. Every fused hit's ``sources`` maps each side that found it
to its score there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from index.store import Hit

FUSIONS = ("convex", "rrf", "weighted")
DEFAULT_FUSION = "convex"
RRF_K = 60
DEFAULT_DENSE_WEIGHT = 0.5
CANDIDATES = 100
RETRIEVAL_FILE = "retrieval.json"  # in an encoder's checkpoint directory


def candidates(k: int) -> int:
    """How deep each side is searched before fusing into the top ``k``."""
    return max(k, CANDIDATES)


def check_fusion(fusion: str, dense_weight: float) -> None:
    """Refuse an unknown fusion or a weight outside [0, 1] (``ValueError``)."""
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be in [0, 1], got {dense_weight}")


def _parts(side: str, hits: Sequence[Hit], fusion: str, w: float, rrf_k: int) -> list[float]:
    """Each hit's contribution to its fused score (see the module docstring)."""
    if fusion == "rrf":
        return [1.0 / (rrf_k + rank) for rank in range(1, len(hits) + 1)]
    if fusion == "weighted":
        if side == "dense":
            return [w * (1.0 + h.score) / 2.0 for h in hits]
        return [(1.0 - w) * 2.0 / math.pi * math.atan(h.score) for h in hits]
    if fusion == "convex":
        if not hits:
            return []
        if side == "dense":
            top = 1.0 + max(h.score for h in hits)
            return [w * (1.0 + h.score) / top if top > 0 else 0.0 for h in hits]
        top = max(h.score for h in hits)
        return [(1.0 - w) * h.score / top if top > 0 else 0.0 for h in hits]
    raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")


def fuse(dense: Sequence[Hit], bm25: Sequence[Hit], k: int, fusion: str = DEFAULT_FUSION,
         dense_weight: float = DEFAULT_DENSE_WEIGHT, rrf_k: int = RRF_K) -> list[Hit]:
    """The top ``k`` of the two rankings fused (see the module docstring), best first."""
    sides = {"dense": dense, "bm25": bm25}
    first: dict[str, Hit] = {}
    found: dict[str, dict[str, float]] = {}
    score: dict[str, float] = {}
    for side, hits in sides.items():
        for h, part in zip(hits, _parts(side, hits, fusion, dense_weight, rrf_k), strict=True):
            first.setdefault(h.id, h)
            found.setdefault(h.id, {})[side] = h.score
            score[h.id] = score.get(h.id, 0.0) + part
    order = sorted(score, key=lambda i: (-score[i], i))[:k]
    # The vector, when asked for, may only have come with the dense side's hit.
    vectors = {h.id: h.vector for hits in sides.values() for h in hits if h.vector is not None}
    return [replace(first[i], score=score[i], sources=dict(found[i]),
                    vector=vectors.get(i, first[i].vector)) for i in order]


def model_dense_weight(model_dir: str | Path) -> float:
    """The hybrid ``dense_weight`` an encoder brings: ``retrieval.json`` in its checkpoint
    directory (``{"dense_weight": w, ...}``, written by ``bench/fusion.py --write``), else
    :data:`DEFAULT_DENSE_WEIGHT`."""
    path = Path(model_dir) / RETRIEVAL_FILE
    if not path.is_file():
        return DEFAULT_DENSE_WEIGHT
    w = float(json.loads(path.read_text())["dense_weight"])
    check_fusion(DEFAULT_FUSION, w)
    return w
