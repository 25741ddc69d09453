"""A hybrid hit's relevance: how good a match it is, on a scale that does not move with the
query's best hit (issue 75).

A hybrid hit's ``score`` is the convex fusion's (:mod:`index.hybrid.fusion`): each side is
divided by its own best score for the query, so the best hit of *any* query, a nonsense one
included, scores near 1. That ranks, but says nothing of how well the best hit matches.
``relevance`` does, from two signals of the hit::

    relevance = σ(scale · (standing_w · (cos − floor) + cover_w · coverage − offset))

* ``cos − floor``: how far the hit's cosine to the query stands above the query's
  :data:`~index.hybrid.fusion.CANDIDATES`-th best cosine in the collection (``floor``,
  what the fusion records on every hit: the dense list's cosine at that rank, or its last
  in a smaller collection). A cosine alone does not do: a nonsense query's best cosine
  (0.3–0.45 with the shipped encoder) is above many judged-relevant hits' (0.16–0.3 on the
  keyword-style dev sets); how far a hit stands out from the query's crowd separates them
  better.
* ``coverage``: the share of the query's distinct analysed terms
  (:func:`index.hybrid.analysis.analyze`) the hit's text has.

``relevance`` is 0.5 on the line where the bracket is 0, fitted per encoder on labelled dev
collections (``bench/relevance.py``, stored in the encoder's ``retrieval.json``): among
lines that keep at least 92 % of the judged-relevant hits of every dev collection, the one
that drops the most nonsense queries (random nouns) whole. :data:`DEFAULT_THRESHOLD` is
therefore the threshold to use; the measured figures are in the benchmarks. (The BM25
score itself, per query term, was tried as a third signal and did not help: one rare word of
a nonsense query matched scores high.)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from index.hybrid.analysis import analyze
from index.hybrid.fusion import RETRIEVAL_FILE

DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True)
class Relevance:
    """The line and slope of a hit's relevance (see the module docstring). The defaults
    are the shipped encoder's fit; an encoder's ``retrieval.json`` may bring its own."""

    standing: float = 0.8241
    cover: float = 0.5664
    offset: float = 0.2069
    scale: float = 30.32

    def of(self, features: np.ndarray) -> np.ndarray:
        """The relevance of features (..., 2): (cos − floor, coverage), in (0, 1)."""
        x = np.asarray(features, dtype=np.float64)
        margin = self.standing * x[..., 0] + self.cover * x[..., 1] - self.offset
        return 1.0 / (1.0 + np.exp(-np.clip(self.scale * margin, -60.0, 60.0)))

    def hit(self, cos: float, floor: float, coverage: float) -> float:
        """One hit's relevance, rounded to 4 places."""
        return round(float(self.of(np.array([cos - floor, coverage]))), 4)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Relevance:
        if not d:
            return cls()
        return cls(**{k: float(d[k]) for k in cls.__dataclass_fields__ if k in d})


def distinct_terms(query: str) -> frozenset[str]:
    """A query's distinct analysed terms, as BM25 reads them."""
    return frozenset(analyze(query))


def coverage(distinct: frozenset[str], text: str) -> float:
    """The share of the query's ``distinct`` terms that ``text`` has (0 with none)."""
    if not distinct:
        return 0.0
    return len(distinct.intersection(analyze(text))) / len(distinct)


def model_relevance(model_dir: str | Path) -> Relevance:
    """The relevance an encoder brings: ``retrieval.json`` → ``relevance`` in its checkpoint
    directory (written by ``bench/relevance.py --write``), else :class:`Relevance`'s
    defaults."""
    path = Path(model_dir) / RETRIEVAL_FILE
    if not path.is_file():
        return Relevance()
    return Relevance.from_dict(json.loads(path.read_text()).get("relevance"))
