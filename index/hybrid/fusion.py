"""Fusing a dense and a BM25 ranking of the same query into one (hybrid search).

Each side is a list of hits, best first, from its own search. Both sides are searched
``candidates(k)`` deep (at least :data:`CANDIDATES`, whatever ``k`` the caller asks for:
fusing only the top 10 of each side cost 4 % nDCG@10 in our calibration), and the fused list
holds the best ``k`` of every hit either side found, scored by one of:

* ``convex`` (the default): each side normalised by its theoretical minimum and the list's
  maximum (Bruch, Gai & Ingber 2023, "An Analysis of Fusion Functions for Hybrid
  Retrieval", TMM), then mixed with a weight ``w_q`` for the query::

      score(d) = w_q · (1 + cos(d)) / (1 + max cos) + (1 − w_q) · bm25(d) / max bm25

  Unlike RRF it keeps how far apart the scores are, so a weak side cannot drag a confident
  one down. Two refinements, chosen on dev sets by ``bench/fusion.py``:

  - *A side that did not find d* gives it its own last score when its list was cut at the
    search depth (d ranks below everything it returned, so its last score is the best
    guess, where 0 would bury d under the other side's whole list); a side whose list is
    shorter than the depth returned everything it matched, and adds 0.
  - *The weight follows each side's confidence for this query*: ``dense_weight`` ``w``
    (from the encoder's ``retrieval.json``: a better encoder earns more) is scaled by how
    far each list's best score stands above its last::

        w_q = w · c_dense / (w · c_dense + (1 − w) · c_bm25)
        c_dense = max cos − last cos        c_bm25 = 1 − last bm25 / max bm25

    where "last" is what a hit the side did not return gets: the list's last score when
    it was cut at the depth, else the floor (cos −1, BM25 0), so a query that matched a
    single document by a rare term trusts BM25 fully rather than not at all.

    A query whose BM25 scores are flat (common words only) leans on the dense side and
    one with a rare matching term on BM25; one weight for every query was below one side
    or the other on some dev sets. ``w`` = 1 or 0 still picks one side alone.
* ``rrf`` (reciprocal rank fusion, Cormack et al. 2009), as Milvus' ``RRFRanker(k)``::

      score(d) = Σ_side 1 / (k_rrf + rank_side(d))     ranks from 1, k_rrf = 60

* ``weighted``: as Milvus' ``WeightedRanker``: each score squashed to [0, 1], then mixed::

      score(d) = w · (1 + cos(d)) / 2 + (1 − w) · (2 / π) · atan(bm25(d))

Every fused hit records the query's ``floor``: its dense list's cosine at rank
:data:`CANDIDATES` (the last in a smaller collection), from which
:mod:`index.hybrid.relevance` measures how far a hit stands out; and its ``mix``
(:class:`index.store.Mix`): the dense weight this query was fused with and, for
``convex``, the two confidences that moved it there (``rrf`` has no weight).

For ``rrf`` and ``weighted`` a side that did not find ``d`` adds 0. Ties are broken by id,
so the fused order is a pure function of the two input lists. Every fused hit's ``sources``
maps each side that found it to its score there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from index.store import Hit, Mix

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


class _Side(NamedTuple):
    parts: list[float]  # each hit's score, before the side's weight
    missed: float  # what a hit the side did not return gets
    confidence: float  # how far its best stands above ``missed`` (convex only)


def _normalised(side: str, hits: Sequence[Hit], fusion: str, rrf_k: int, depth: int) -> _Side:
    """One side of the fusion (see the module docstring)."""
    if fusion == "rrf":
        return _Side([1.0 / (rrf_k + rank) for rank in range(1, len(hits) + 1)], 0.0, 0.0)
    if fusion == "weighted":
        if side == "dense":
            return _Side([(1.0 + h.score) / 2.0 for h in hits], 0.0, 0.0)
        return _Side([2.0 / math.pi * math.atan(h.score) for h in hits], 0.0, 0.0)
    if fusion == "convex":
        shift = 1.0 if side == "dense" else 0.0  # cos ≥ −1, BM25 ≥ 0
        top = shift + max((h.score for h in hits), default=-shift)
        if top <= 0:
            return _Side([0.0] * len(hits), 0.0, 0.0)
        parts = [(shift + h.score) / top for h in hits]
        # a list cut at the depth: a hit it missed ranks below its last; else it matched none
        missed = min(parts) if len(hits) >= depth else 0.0
        # in cosine units on the dense side (best − last cos), relative on BM25's
        return _Side(parts, missed, (top if side == "dense" else 1.0) * (1.0 - missed))
    raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")


def _mix(dense_confidence: float, bm25_confidence: float, dense_weight: float) -> float:
    cd = dense_weight * dense_confidence
    cb = (1.0 - dense_weight) * bm25_confidence
    if cd + cb > 0:
        return cd / (cd + cb)
    # w is 0 or 1 and that side found nothing (or scored all alike): the other side ranks
    if dense_confidence > 0:
        return 1.0
    return 0.0 if bm25_confidence > 0 else dense_weight


def query_weight(dense: Sequence[Hit], bm25: Sequence[Hit], dense_weight: float,
                 depth: int = CANDIDATES) -> float:
    """The convex fusion's dense weight for one query, each side searched ``depth`` deep
    (see the module docstring)."""
    return _mix(_normalised("dense", dense, "convex", RRF_K, depth).confidence,
                _normalised("bm25", bm25, "convex", RRF_K, depth).confidence, dense_weight)


def fuse(dense: Sequence[Hit], bm25: Sequence[Hit], k: int, fusion: str = DEFAULT_FUSION,
         dense_weight: float = DEFAULT_DENSE_WEIGHT, rrf_k: int = RRF_K,
         depth: int | None = None) -> list[Hit]:
    """The top ``k`` of the two rankings fused (see the module docstring), best first.
    ``depth`` is how deep each side was searched (``candidates(k)`` unless said)."""
    depth = candidates(k) if depth is None else depth
    sides = {"dense": dense, "bm25": bm25}
    norm = {side: _normalised(side, hits, fusion, rrf_k, depth) for side, hits in sides.items()}
    mix: Mix | None = None
    if fusion == "convex":
        cd, cb = norm["dense"].confidence, norm["bm25"].confidence
        w = _mix(cd, cb, dense_weight)
        weights, mix = {"dense": w, "bm25": 1.0 - w}, Mix(w, cd, cb)
    elif fusion == "weighted":
        weights, mix = {"dense": dense_weight, "bm25": 1.0 - dense_weight}, Mix(dense_weight)
    else:
        weights = {"dense": 1.0, "bm25": 1.0}
    first: dict[str, Hit] = {}
    found: dict[str, dict[str, float]] = {}
    values: dict[str, dict[str, float]] = {side: {} for side in sides}
    for side, hits in sides.items():
        for h, part in zip(hits, norm[side].parts, strict=True):
            first.setdefault(h.id, h)
            found.setdefault(h.id, {})[side] = h.score
            values[side].setdefault(h.id, part)
    score = {i: sum(weights[side] * values[side].get(i, norm[side].missed) for side in sides)
             for i in first}
    order = sorted(score, key=lambda i: (-score[i], i))[:k]
    # The vector, when asked for, may only have come with the dense side's hit.
    vectors = {h.id: h.vector for hits in sides.values() for h in hits if h.vector is not None}
    # the query's CANDIDATES-th best cosine (its last in a smaller collection): what a
    # hit's relevance is measured from (index.hybrid.relevance)
    floor = dense[min(len(dense), CANDIDATES) - 1].score if dense else None
    return [replace(first[i], score=score[i], sources=dict(found[i]),
                    vector=vectors.get(i, first[i].vector), floor=floor, mix=mix)
            for i in order]


def fused_ids(dense: Sequence[Hit], bm25: Sequence[Hit], k: int,
              dense_weights: Sequence[float], depth: int | None = None) -> list[list[str]]:
    """The ids of the convex :func:`fuse`'s top ``k`` at each of ``dense_weights``: the same
    ids in the same order, each side normalised once for all the weights and the scores
    summed as arrays (a calibration fuses each of its 500 pseudo-queries at 14 weights)."""
    depth = candidates(k) if depth is None else depth
    nd = _normalised("dense", dense, "convex", RRF_K, depth)
    nb = _normalised("bm25", bm25, "convex", RRF_K, depth)
    vd: dict[str, float] = {}
    vb: dict[str, float] = {}
    for h, part in zip(dense, nd.parts, strict=True):
        vd.setdefault(h.id, part)
    for h, part in zip(bm25, nb.parts, strict=True):
        vb.setdefault(h.id, part)
    ids = list(dict.fromkeys([*vd, *vb]))
    d = np.array([vd.get(i, nd.missed) for i in ids], dtype=np.float64)
    b = np.array([vb.get(i, nb.missed) for i in ids], dtype=np.float64)
    by_id = np.empty(len(ids), dtype=np.int64)  # each id's place in id order (ties)
    by_id[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    out = []
    for dense_weight in dense_weights:
        w = _mix(nd.confidence, nb.confidence, dense_weight)
        score = w * d + (1.0 - w) * b
        out.append([ids[j] for j in np.lexsort((by_id, -score))[:k]])
    return out


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
