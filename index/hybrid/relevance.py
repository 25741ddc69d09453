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
lines that keep at least 93 % of the judged-relevant hits of every dev collection, the one
that drops the most nonsense queries (random nouns) whole. :data:`DEFAULT_THRESHOLD` is
therefore the threshold to use; the measured figures are in the benchmarks. (The BM25
score itself, per query term, was tried as a third signal and did not help: one rare word of
a nonsense query matched scores high.)

A hit can pass that line and still answer nothing: a query of unrelated words ("purple
elephant banana spaceship") finds texts that each hold one of them, with cosines that stand
out as far as a real answer's. So the query is asked too, whether the collection can answer
it at all, and a hit is as relevant as the weaker of the two::

    relevance = σ(scale · min(hit's bracket above, spread_max − spread))

* the query is *scattered* when it has two or more distinct terms and the BM25 side's
  :data:`MEET_DEPTH` best texts hold them only apart: some text has one of them, none has
  two (what the store records on every fused hit, ``scattered``). Otherwise (two of its
  terms meet in a text, or BM25 found none of them, or it has one term) ``spread`` counts
  as 0 and only the hit's line decides: a paraphrase that shares no word with a small
  collection is not held back;
* a scattered query's ``spread`` is how evenly the encoder's attention pooling spreads over
  its tokens (the weights' entropy over log(tokens): 1 even, 0 on one token). A question
  whose answer shares one of its words ("what do pigs eat" → "pigs are omnivores ...")
  pools on that word (0.81); a list of unrelated nouns pools on all of them (0.92).

``spread_max`` is fitted with the line (``bench/relevance.py``): on the 14 dev collections,
keeping at least 0.93 of each one's judged-relevant hits, the nonsense queries that lose
every hit rose from 0.718 (the line alone, fitted the same way) to 0.937 on the mean. An
encoder whose ``retrieval.json`` has a line but no ``spread_max`` keeps the line alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from index.hybrid.analysis import analyze
from index.hybrid.fusion import RETRIEVAL_FILE

DEFAULT_THRESHOLD = 0.5
MEET_DEPTH = 20  # the BM25 side's best texts looked through for the query's terms


@dataclass(frozen=True)
class Relevance:
    """The line and slope of a hit's relevance, and the most a scattered query's pooling
    may spread (see the module docstring). The defaults are the shipped encoder's fit; an
    encoder's ``retrieval.json`` may bring its own."""

    standing: float = 0.8039
    cover: float = 0.5948
    offset: float = 0.1881
    scale: float = 44.62
    spread_max: float = 0.85  # 1: no query held back (every spread is at most 1)

    def of(self, features: np.ndarray) -> np.ndarray:
        """The relevance of features (..., 2): (cos − floor, coverage), or (..., 3) with
        the query's spread (0 unless it is scattered), in (0, 1)."""
        x = np.asarray(features, dtype=np.float64)
        margin = self.standing * x[..., 0] + self.cover * x[..., 1] - self.offset
        if x.shape[-1] > 2:
            margin = np.minimum(margin, self.spread_max - x[..., 2])
        return 1.0 / (1.0 + np.exp(-np.clip(self.scale * margin, -60.0, 60.0)))

    def hit(self, cos: float, floor: float, coverage: float, spread: float = 0.0) -> float:
        """One hit's relevance, rounded to 4 places; ``spread`` the query's (0 unless it
        is scattered)."""
        return round(float(self.of(np.array([cos - floor, coverage, spread]))), 4)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Relevance:
        """A fit as ``retrieval.json`` stores it; one without ``spread_max`` (fitted before
        queries were asked) keeps its line alone."""
        if not d:
            return cls()
        return cls(**{k: float(d[k]) for k in cls.__dataclass_fields__ if k in d}
                   | {"spread_max": float(d.get("spread_max", 1.0))})


def distinct_terms(query: str) -> frozenset[str]:
    """A query's distinct analysed terms, as BM25 reads them."""
    return frozenset(analyze(query))


def coverage(distinct: frozenset[str], text: str) -> float:
    """The share of the query's ``distinct`` terms that ``text`` has (0 with none)."""
    if not distinct:
        return 0.0
    return len(distinct.intersection(analyze(text))) / len(distinct)


def scattered(distinct: frozenset[str], texts: Iterable[str]) -> bool:
    """Whether ``texts`` (the BM25 side's best, :data:`MEET_DEPTH`) hold the query's two or
    more ``distinct`` terms only apart: one of them in some text, never two in one."""
    if len(distinct) < 2:
        return False
    found = False
    for t in texts:
        held = len(distinct.intersection(analyze(t)))
        if held >= 2:
            return False
        found = found or held == 1
    return found


def spread(weights: np.ndarray) -> float:
    """How evenly attention-pooling ``weights`` (one text's, summing to 1) spread over its
    tokens: their entropy over log(tokens), 1 when even, 0 when all on one token (and for a
    text of one token)."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) < 2:
        return 0.0
    w = w[w > 0]
    return float(-(w * np.log(w)).sum() / np.log(len(weights)))


def model_relevance(model_dir: str | Path) -> Relevance:
    """The relevance an encoder brings: ``retrieval.json`` → ``relevance`` in its checkpoint
    directory (written by ``bench/relevance.py --write``), else :class:`Relevance`'s
    defaults."""
    path = Path(model_dir) / RETRIEVAL_FILE
    if not path.is_file():
        return Relevance()
    return Relevance.from_dict(json.loads(path.read_text()).get("relevance"))
