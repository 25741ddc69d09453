"""Per-collection calibration of hybrid search: how far to trust the dense side against BM25.

One dense weight for every collection cannot serve both a keyword-style corpus, where the
encoder is far weaker than BM25, and captions, where it is stronger. A collection estimates
its own weight from its documents, without labels:

1. *Pseudo-queries* (:func:`pseudo_queries`): a sample of the collection's documents, and
   from each a query cut from it. A document of two or more sentences gives an *inverse
   cloze* query (Lee et al. 2019): one of its sentences is the query and the document
   *without that sentence* is the one to find, so neither side finds it by the query's own
   words. A shorter one gives a *crop*: about half its words, in order, the document
   unchanged.
2. *Signals* (:func:`measure`): the pseudo-queries are searched, dense and BM25, over a
   pool of sampled documents (the targets re-embedded without their query sentence), and
   the source's reciprocal-rank gain at 10 is taken for each side alone and for the convex
   fusion (:func:`index.hybrid.fusion.fused_ids`: the ids the stores' fuse ranks) at every weight of
   :data:`GRID`.
3. *The weight* (:class:`Mapping`): pseudo-queries are easier for BM25 than
   real queries are, so the signals are not the answer: a mapping learned on labelled dev
   collections (``bench/calibration.py``, stored in the encoder's ``retrieval.json``)
   turns them into the weight.

With judged queries (:func:`from_labels`) the weight is chosen by nDCG@10 on them instead.
Nothing here runs on a request's path: :mod:`wiring.calibrating` runs it as a job.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from index.hybrid.bm25 import BM25Index
from index.hybrid.fusion import CANDIDATES, RETRIEVAL_FILE, check_fusion, fuse, fused_ids
from index.store import Hit

Embed = Callable[[Sequence[str]], np.ndarray]
GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.92, 0.95, 1.0)
SOURCES = ("collection", "labels", "manual", "encoder default", "request")
MIN_DOCS = 200  # fewer documents than this: too few to calibrate, the encoder's default
POOL = 3000  # documents searched by the pseudo-queries (a sample of a bigger collection)
QUERIES = 500  # pseudo-queries cut
_SENTENCE = re.compile(r"(?<=[.!?;])\s+(?=\S)")


@dataclass(frozen=True)
class PseudoQuery:
    """A query cut from document ``source``: ``text``, and what the document is when it is
    searched for (``target``: the document without the query's sentence for ``ict``, the
    document itself for ``crop``)."""

    source: int
    text: str
    target: str
    kind: str  # "ict" or "crop"


@dataclass
class Calibration:
    """A collection's hybrid calibration, stored with it (JSON).

    ``dense_weight`` is hybrid's ``w`` (see :mod:`index.hybrid.fusion`); ``source`` says where it
    came from (:data:`SOURCES`); ``signals`` what it was chosen from; ``docs`` how many
    documents the collection had then (so that a collection that has grown a lot is tuned
    again); ``queries`` how many pseudo- or judged queries were used; ``seconds`` its cost.
    """

    dense_weight: float
    source: str
    method: str
    docs: int = 0
    queries: int = 0
    seed: int = 0
    seconds: float = 0.0
    note: str = ""
    signals: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        check_fusion("convex", self.dense_weight)
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


def sentences(text: str) -> list[str]:
    """``text`` cut after ``.``, ``!``, ``?`` or ``;`` followed by white space."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def pseudo_queries(texts: Sequence[str], n: int, seed: int = 0) -> list[PseudoQuery]:
    """Up to ``n`` pseudo-queries, each from a different document of ``texts`` chosen at
    random (``seed``); see the module docstring."""
    rng = random.Random(seed)
    order = list(range(len(texts)))
    rng.shuffle(order)
    out: list[PseudoQuery] = []
    for j in order:
        if len(out) >= n:
            break
        words = texts[j].split()
        if len(words) < 4:
            continue
        sents = [s for s in sentences(texts[j]) if len(s.split()) >= 4]
        if len(sents) >= 2 and len(words) >= 20:
            i = rng.randrange(len(sents))
            rest = " ".join(s for t, s in enumerate(sents) if t != i)
            out.append(PseudoQuery(j, sents[i], rest, "ict"))
            continue
        keep = max(3, len(words) // 2)
        start = rng.randrange(len(words) - keep + 1)
        out.append(PseudoQuery(j, " ".join(words[start:start + keep]), texts[j], "crop"))
    return out


def _gain(hits: Sequence[Hit], target: str, k: int = 10) -> float:
    """Reciprocal-rank gain of ``target`` in the first ``k`` hits (:func:`_id_gain`)."""
    return _id_gain([h.id for h in hits[:k]], target, k)


def _id_gain(ids: Sequence[str], target: str, k: int = 10) -> float:
    """Reciprocal-rank gain of ``target`` in the first ``k`` ids, 1/log2(rank + 1), as
    nDCG@k with one relevant document."""
    for r, i in enumerate(ids[:k]):
        if i == target:
            return 1.0 / math.log2(r + 2)
    return 0.0


def measure(texts: Sequence[str], vectors: np.ndarray, embed: Embed, seed: int = 0,
            n_queries: int = QUERIES, pool: int = POOL, held: Sequence[int] | None = None
            ) -> dict[str, Any]:
    """The label-free signals of a collection given as a sample of its documents
    (``texts`` and their stored unit ``vectors``, (n, d)); see the module docstring. With
    ``held``, the pseudo-queries are cut from those documents only (the others are
    distractors): documents an adapted encoder never trained on (:mod:`encoder.domain`),
    whose pseudo-queries it cannot have learnt by heart."""
    rng = np.random.default_rng(seed)
    n = len(texts)
    if held is None:
        keep = np.sort(rng.choice(n, size=min(n, pool), replace=False))
    else:
        rest = np.setdiff1d(np.arange(n), np.asarray(held, dtype=np.int64))
        others = rng.choice(rest, size=min(len(rest), max(0, pool - len(held))), replace=False)
        keep = np.sort(np.concatenate([np.asarray(held, dtype=np.int64), others]))
    texts = [texts[i] for i in keep]
    xb = np.array(vectors[keep], dtype=np.float32)
    if held is None:
        pq = pseudo_queries(texts, n_queries, seed)
    else:
        where = [int(np.searchsorted(keep, i)) for i in held]  # the held ones in the pool
        pq = [PseudoQuery(where[q.source], q.text, q.target, q.kind) for q in
              pseudo_queries([texts[j] for j in where], n_queries, seed)]
    if not pq:
        return {"queries": 0}
    targets = [q.source for q in pq]
    docs = list(texts)
    changed = [i for i, q in enumerate(pq) if q.kind == "ict"]
    if changed:
        xb[[targets[i] for i in changed]] = embed([pq[i].target for i in changed])
        for i in changed:
            docs[targets[i]] = pq[i].target
    xq = embed([q.text for q in pq])
    ids = [str(i) for i in range(len(docs))]
    bm25 = BM25Index.from_texts(docs)
    depth = min(CANDIDATES, len(docs))
    scores = xq @ xb.T  # (nq, n)
    gains: dict[str, list[float]] = {"dense": [], "bm25": [], **{f"w{w}": [] for w in GRID}}
    agree = []
    for r, q in enumerate(pq):
        top = np.argsort(-scores[r], kind="stable")[:depth]
        dense = [Hit(ids[j], float(scores[r, j]), "", None, {}) for j in top]
        lexical = [Hit(ids[j], s, "", None, {}) for j, s in bm25.top(q.text, depth, ids)]
        target = ids[q.source]
        gains["dense"].append(_gain(dense, target))
        gains["bm25"].append(_gain(lexical, target))
        for w, fused in zip(GRID, fused_ids(dense, lexical, 10, GRID, depth=depth),
                            strict=True):
            gains[f"w{w}"].append(_id_gain(fused, target))
        a, b = {h.id for h in dense[:10]}, {h.id for h in lexical[:10]}
        agree.append(len(a & b) / 10)
    out: dict[str, Any] = {k: round(float(np.mean(v)), 4) for k, v in gains.items()}
    best_side = max(out["dense"], out["bm25"], 1e-6)
    out |= {"queries": len(pq), "pool": len(docs), "ict": round(len(changed) / len(pq), 4),
            "agreement": round(float(np.mean(agree)), 4),
            "dense_vs_bm25": round(out["dense"] / max(out["bm25"], 1e-6), 4),
            "fusion_gain": round(max(out[f"w{w}"] for w in GRID) / best_side - 1.0, 4)}
    return out


def best_weight(curve: dict[float, float], tolerance: float = 0.0) -> float:
    """The weight of ``curve`` (weight → score) with the highest score; among those within
    ``tolerance`` of it, the one nearest the middle of them (a plateau's centre)."""
    top = max(curve.values())
    near = sorted(w for w, s in curve.items() if s >= top - tolerance)
    return near[len(near) // 2]


@dataclass(frozen=True)
class Mapping:
    """How the signals become a weight::

        w = clip(intercept + slope · log(dense_vs_bm25) + gain · fusion_gain, low, high)

    on the pseudo-queries' dense-to-BM25 ratio and how much fusing them gained over the
    better side, and ``w = boost`` where that gain reaches ``boost_gain`` (the dense side
    adds so much that it earns the weight strong encoders get); fitted on dev collections
    (``bench/calibration.py``). The defaults are a neutral guess, used only when an
    encoder's ``retrieval.json`` has no fitted mapping."""

    intercept: float = 0.9
    slope: float = 1.0
    low: float = 0.0
    high: float = 0.95
    gain: float = 0.0
    boost_gain: float = 1.0  # a fusion gain this high or more ...
    boost: float = 0.95  # ... gives this weight (1.0: never: no fusion gains 100 %)

    def weight(self, signals: dict[str, Any]) -> float:
        ratio = max(float(signals.get("dense_vs_bm25", 0.0)), 1e-3)
        gained = float(signals.get("fusion_gain", 0.0))
        if gained >= self.boost_gain:
            return round(self.boost, 3)
        w = self.intercept + self.slope * math.log(ratio) + self.gain * gained
        return round(min(self.high, max(self.low, w)), 3)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Mapping:
        if not d:
            return cls()
        return cls(**{k: float(v) for k, v in d.items() if k in cls.__dataclass_fields__})


def model_mapping(model_dir: str | Path) -> Mapping:
    """The mapping an encoder brings: ``retrieval.json`` → ``calibration.mapping`` in its
    checkpoint directory (written by ``bench/calibration.py --write``), else the neutral
    :class:`Mapping`."""
    path = Path(model_dir) / RETRIEVAL_FILE
    if not path.is_file():
        return Mapping()
    return Mapping.from_dict(json.loads(path.read_text()).get("calibration", {}).get("mapping"))


Labels = dict[str, tuple[str, dict[str, int]]]  # query id -> (query text, doc id -> grade)


def per_query_ndcg(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]
                   ) -> dict[str, float]:
    """nDCG@10 of each judged query (pytrec_eval; 0 for a query the run lacks)."""
    import pytrec_eval

    got = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    return {q: float(got.get(q, {}).get("ndcg_cut_10", 0.0)) for q in qrels}


def from_labels(sides: dict[str, tuple[list[Hit], list[Hit]]], labels: Labels,
                default_weight: float, seed: int = 0, rounds: int = 200
                ) -> tuple[float, dict[str, Any]]:
    """The weight of :data:`GRID` with the best mean nDCG@10 on judged queries, from each
    query's (dense, BM25) hits searched :data:`CANDIDATES` deep; and how sure that is:
    over ``rounds`` bootstrap resamples of the queries, how often the chosen weight scores
    better than ``default_weight`` and how often the same (a tie is no win), and the
    10th–90th percentile of the best weight. The default is kept when no weight scores
    better than it on the judged queries.
    """
    qrels = {q: rel for q, (_, rel) in labels.items()}
    weights = sorted({*GRID, default_weight})
    per: dict[float, np.ndarray] = {}
    for w in weights:
        run = {}
        for q, (dense, bm25) in sides.items():
            hits = fuse(dense, bm25, 10, "convex", w)
            run[q] = {h.id: float(len(hits) - r) for r, h in enumerate(hits)}
        nd = per_query_ndcg(run, qrels)
        per[w] = np.array([nd[q] for q in sorted(qrels)])
    mean = {w: float(v.mean()) for w, v in per.items()}
    chosen = best_weight({w: mean[w] for w in GRID})
    if mean[chosen] <= mean[default_weight] + 1e-9:  # nothing gained: the default stays
        chosen = default_weight
    rng = np.random.default_rng(seed)
    n = len(qrels)
    wins, ties, bests = 0, 0, []
    for _ in range(rounds):
        idx = rng.integers(0, n, n)
        boot = {w: float(per[w][idx].mean()) for w in GRID}
        bests.append(best_weight(boot))
        gain = per[chosen][idx].mean() - per[default_weight][idx].mean()
        wins += gain > 1e-9
        ties += abs(gain) <= 1e-9
    return chosen, {
        "ndcg@10": round(mean[chosen], 4), "ndcg@10_default": round(mean[default_weight], 4),
        "ndcg@10_bm25": round(mean[0.0], 4), "ndcg@10_dense": round(mean[1.0], 4),
        "beats_default": round(wins / rounds, 3), "ties_default": round(ties / rounds, 3),
        "kept_default": chosen == default_weight,
        "weight_p10_p90": [float(np.percentile(bests, 10)), float(np.percentile(bests, 90))]}
