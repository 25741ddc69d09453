"""Can hybrid's fusion weight be chosen per query? Leave-one-collection-out on the dev
collections (issue 71).

Usage: python bench/query_sides.py --data ../shared/data   (first: the cached lists)
       python bench/query_fusion.py [--model models/encoder-default] [--sides var/qsides]

Each judged query's dense and BM25 lists (``bench/query_sides.py``, 100 deep) are fused as
the stores fuse (:func:`index.hybrid.fusion.fuse`, convex, with its per-query confidence
mix) at every base weight of :data:`GRID`; nDCG@10 per query and weight (pytrec_eval).
Against that, per collection:

* *collection*: the weight its label-free tuning chooses (what serves today);
* *best in hindsight*: the one weight that scores best on its judged queries;
* *oracle*: each query at its own best weight (a ceiling no model reaches);
* *per-query*: a model that moves the collection's weight for each query, from what the
  two lists show at search time (:data:`FEATURES`: no labels, no extra store call):
  ``w_q = σ(logit(w_collection) + shrink · θ·z)``, ``z`` the features standardised on the
  fitting collections and ``θ`` a weighted ridge regression of each query's best weight
  (in logits, relative to the collection's; ties resolved towards it) weighted by what
  that query gains over the collection's weight. Fitted on the other dev collections and
  scored on the one left out, for several feature sets and shrinks, every one reported.

Then one global change of the mix served today (:data:`SHARP`): each query's weight is
``σ(logit(w) + log(c_dense / c_bm25))`` (:func:`index.hybrid.fusion.query_weight`); a
grid of ``σ(logit(w) + δ + p · log(c_dense / c_bm25))``, every point's worst and mean, and
the best mean of the points that lose on no dev collection. Chosen on all of them, so an
upper bound of what a left-out choice would give.

All figures are nDCG@10 × BM25's. SciFact's test is held out of every fit and shown apart.
Prints a markdown section and records it (``bench/machine.py``).

Tried and not kept (2026-12-02, a throwaway copy with three more features): whether the
query's terms are scattered over BM25's best texts and how the encoder pools it
(:mod:`index.hybrid.relevance`), alone, with the overlap, and with all the others: the
worst dev collection 0.970–0.986 × BM25 left out, against 0.987 × for the collection's
weight; the means 1.076–1.094 × against 1.094 ×.

Tried and not kept (2026-12-04, a throwaway script on the cached lists): a choice of form
rather than of weight, BM25's best text put first when it holds every term of the query
and leads the second by a margin of 5–50 % of its score (the rest fused at the
collection's weight): the worst dev collection 0.987–0.988 ×, the means 1.093–1.095 ×.
The losses of the two worst (SciTLDR 0.987 ×, the tweets 0.994 ×) are first and second
places swapped, in both directions (the tweets: 10 queries gained so, 9 lost), at BM25
margins of a few per cent, where neither list says which is right.

Tried and not kept (2026-12-05, a throwaway script on the cached lists, AVX2-only AMD
EPYC): (a) the fusion given each BM25-only hit's true cosine (the cached lists hold it; a
store would need the vectors with BM25's hits) instead of the dense list's last: worst
0.985 ×, mean 1.095 × against 0.987 ×, 1.094 ×; (b) a fusion learned per candidate rather
than per query: a logistic regression over the union of both lists (each side's normalised
score at the query's served weight, ranks as 1/(10 + rank), which list holds it, and the
scores times the top-10 overlap and the log query length), fitted on the other dev
collections' judgements, each query weighing the same: worst 0.961 ×, mean 1.078–1.080 ×
left out for three feature sets (SciTLDR 0.961 ×, the tweets 0.980–0.983 ×).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from machine import add_results_arg, record, stamp  # noqa: E402

from index.hybrid.analysis import BM25_K1  # noqa: E402
from index.hybrid.fusion import CANDIDATES, fuse  # noqa: E402
from index.store import Hit  # noqa: E402

GRID = np.array([0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9,
                 0.92, 0.94, 0.96, 0.98, 1.0])
FEATURES = ("dense top cos", "dense top − 10th", "dense top − 100th", "bm25 top per term",
            "bm25 top − 10th (relative)", "bm25 hits / 100", "top-10 overlap",
            "log query terms", "bm25 top's coverage", "dense top's coverage",
            "same top hit")
SETS = {"all": list(range(len(FEATURES))), "overlap": [6], "bm25 rarity": [3],
        "overlap + rarity + length + coverage": [3, 6, 7, 8]}
SHRINKS = (0.5, 1.0)
RIDGE = 1.0
# the confidence mix sharpened: w_q = σ(logit(w) + δ + p · log(c_dense / c_bm25)); served
# today: δ 0, p 1
SHARP = [(d, p) for d in (-1.0, -0.5, 0.0, 0.5, 1.0) for p in (1.0, 1.5, 2.0, 3.0, 4.0)]


def logit(p: np.ndarray | float) -> np.ndarray:
    q = np.clip(p, 0.02, 0.98)
    return np.log(q / (1 - q))


def features(q: dict[str, Any], dense: list[Hit], bm25: list[Hit]) -> list[float]:
    """:data:`FEATURES` of one query, from its two lists."""
    dc = [h.score for h in dense]
    bs = [h.score for h in bm25] or [0.0]
    terms = max(q["terms"], 1)
    overlap = len({h.id for h in dense[:10]} & {h.id for h in bm25[:10]}) / 10
    return [dc[0], dc[0] - dc[min(9, len(dc) - 1)], dc[0] - dc[-1],
            bs[0] / terms / (BM25_K1 + 1),
            (bs[0] - bs[min(9, len(bs) - 1)]) / bs[0] if bm25 else 0.0,
            len(bm25) / CANDIDATES, overlap, float(np.log(terms)),
            q["bm25"][0][3] if q["bm25"] else 0.0, q["dense"][0][2],
            float(bool(bm25) and bm25[0].id == dense[0].id)]


def collection(path: Path) -> dict[str, Any]:
    """One cached collection: per query its nDCG@10 at each weight of :data:`GRID`, BM25's,
    its lists (to fuse at any weight) and its features."""
    import pytrec_eval

    with gzip.open(path, "rt") as f:
        row = json.load(f)
    ids, qids = row["ids"], [q for q in row["queries"] if q in row["qrels"]]
    evaluator = pytrec_eval.RelevanceEvaluator({q: row["qrels"][q] for q in qids},
                                               {"ndcg_cut_10"})
    sides = {}
    for q in qids:
        got = row["queries"][q]
        sides[q] = ([Hit(ids[j], s, "", None, {}) for j, s, _ in got["dense"]],
                    [Hit(ids[j], s, "", None, {}) for j, s, _, _ in got["bm25"]])

    def ndcg(lists: dict[str, list[Hit]]) -> np.ndarray:
        run = {q: {h.id: float(len(h_) - r) for r, h in enumerate(h_)} or {"-": 0.0}
               for q, h_ in lists.items()}
        got = evaluator.evaluate(run)
        return np.array([got.get(q, {}).get("ndcg_cut_10", 0.0) for q in qids])

    def fused(weights: np.ndarray) -> np.ndarray:
        return ndcg({q: fuse(d, b, 10, "convex", float(w), depth=CANDIDATES)
                     for (q, (d, b)), w in zip(sides.items(), weights, strict=True)})

    grid = np.stack([fused(np.full(len(qids), w)) for w in GRID], 1)
    # each query's fusion as the service fuses it: the weight it is fused with (its answer's
    # query_weight; the collection's where neither side found anything) and its
    # log(c_dense / c_bm25) (0 where a side has none: the mix then ignores w)
    mixes = [m[0].mix if m else None for m in
             (fuse(d, b, 1, "convex", row["weight"], depth=CANDIDATES) for d, b in sides.values())]
    served = np.array([m.weight if m else row["weight"] for m in mixes])
    log_conf = np.array([np.log(m.dense / m.bm25) if m and m.dense and m.bm25 else 0.0
                         for m in mixes])
    return {"name": row["name"], "held_out": row["held_out"], "weight": row["weight"],
            "served": served, "log_conf": log_conf,
            "grid": grid, "bm25": ndcg({q: b[:10] for q, (_, b) in sides.items()}),
            "X": np.array([features(row["queries"][q], d, b) for q, (d, b) in sides.items()]),
            "fused": fused}


def targets(c: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best weight (logit, relative to the collection's; among ties the one
    nearest it) and how much it gains over the collection's weight."""
    base = c["grid"][:, int(np.argmin(np.abs(GRID - c["weight"])))]
    y, gain = [], []
    for r, row in enumerate(c["grid"]):
        cands = GRID[row >= row.max() - 1e-9]
        pick = cands[np.argmin(np.abs(logit(cands) - logit(c["weight"])))]
        y.append(float(logit(pick) - logit(c["weight"])))
        gain.append(float(row.max() - base[r]))
    return np.array(y), np.array(gain)


def fit(train: list[dict[str, Any]], cols: list[int]
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X = np.concatenate([c["X"][:, cols] for c in train])
    y = np.concatenate([c["y"] for c in train])
    w = np.concatenate([c["gain"] for c in train])
    mu, sd = X.mean(0), X.std(0) + 1e-9
    Z = np.c_[np.ones(len(X)), (X - mu) / sd]
    theta = np.linalg.solve((Z.T * w) @ Z + RIDGE * np.eye(Z.shape[1]), (Z.T * w) @ y)
    return theta, mu, sd


def per_query(c: dict[str, Any], model: tuple[np.ndarray, np.ndarray, np.ndarray],
              cols: list[int], shrink: float) -> float:
    theta, mu, sd = model
    z = np.c_[np.ones(len(c["X"])), (c["X"][:, cols] - mu) / sd]
    w = 1 / (1 + np.exp(-(logit(c["weight"]) + shrink * (z @ theta))))
    return float(c["fused"](w).mean() / c["bm25"].mean())


def sharpened(c: dict[str, Any], delta: float, p: float) -> float:
    """nDCG@10 × BM25 with the confidence mix sharpened (:data:`SHARP`): the weight handed
    to the fusion is moved so that, once mixed, it is σ(logit(w) + δ + p · log(c_d / c_b))."""
    w = 1 / (1 + np.exp(-(logit(c["weight"]) + delta + (p - 1) * c["log_conf"])))
    return float(c["fused"](w).mean() / c["bm25"].mean())


def main() -> None:
    import encoder

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "models/encoder-default")
    ap.add_argument("--sides", type=Path, default=ROOT / "var/qsides")
    add_results_arg(ap)
    args = ap.parse_args()
    fingerprint = encoder.load(args.model).fingerprint
    table = [collection(p) for p in sorted(args.sides.glob(f"*.{fingerprint}.json.gz"))]
    if not table:
        sys.exit(f"no cached lists for {fingerprint} under {args.sides}: run "
                 "bench/query_sides.py first")
    for c in table:
        c["y"], c["gain"] = targets(c)
        bm = c["bm25"].mean()
        at = c["grid"].mean(0)
        c["coll"] = float(c["fused"](np.full(len(c["X"]), c["weight"])).mean() / bm)
        c["best"] = (float(GRID[at.argmax()]), float(at.max() / bm))
        c["oracle"] = float(c["grid"].max(1).mean() / bm)
    dev = [c for c in table if not c["held_out"]]
    loo: dict[tuple[str, float], dict[str, float]] = {}
    for name, cols in SETS.items():
        for c in table:
            model = fit([o for o in dev if o is not c], cols)
            for shrink in SHRINKS:
                loo.setdefault((name, shrink), {})[c["name"]] = per_query(c, model, cols,
                                                                          shrink)
    sharp = {(d, p): {c["name"]: sharpened(c, d, p) for c in table} for d, p in SHARP}
    argv = shlex.join(["python", "bench/query_fusion.py", *sys.argv[1:]])
    head = [f"{n}, ×{s}" for n, s in loo]
    lines = [f"\n## Per-query fusion weight, leave-one-collection-out ({args.model.name}, "
             f"{time.strftime('%Y-%m-%d')})", "", f"`{argv}` ({stamp()})", "",
             "nDCG@10 × BM25 on each dev collection's judged queries. Per-query columns: "
             "feature set, shrink; fitted on the other dev collections. *Served w_q*: the "
             "weight each query is fused with today (the collection's w moved by the two "
             "sides' confidence, `query_weight` in a hybrid answer), 10th, 50th and 90th "
             "percentiles over the collection's queries.", "",
             "| collection | collection w | served w_q | best w (hindsight) | oracle per query | "
             + " | ".join(head) + " |", "|---" * (5 + len(head)) + "|"]
    for c in table:
        p10, p50, p90 = np.percentile(c["served"], [10, 50, 90])
        lines.append(f"| {c['name']}{' (held out)' if c['held_out'] else ''} | "
                     f"{c['weight']} → {c['coll']:.3f} | {p10:.2f} / {p50:.2f} / {p90:.2f} | "
                     f"{c['best'][0]} → {c['best'][1]:.3f} | "
                     f"{c['oracle']:.3f} | "
                     + " | ".join(f"{loo[k][c['name']]:.3f}" for k in loo) + " |")
    names = {c["name"] for c in dev}

    def summary(values: dict[str, float]) -> tuple[float, float]:
        got = [v for n, v in values.items() if n in names]
        return round(min(got), 3), round(float(np.mean(got)), 3)

    figures: dict[str, Any] = {}
    coll = summary({c["name"]: c["coll"] for c in table})
    figures["collection_worst"], figures["collection_mean"] = coll
    best_key = max(loo, key=lambda k: summary(loo[k]))
    figures["per_query_best_worst"], figures["per_query_best_mean"] = summary(loo[best_key])
    figures["per_query_best"] = f"{best_key[0]}, ×{best_key[1]}"
    oracle = summary({c["name"]: c["oracle"] for c in table})
    figures["oracle_worst"], figures["oracle_mean"] = oracle
    for k, v in loo.items():
        figures[f"loo {k[0]} x{k[1]}"] = list(summary(v))
    lines += ["", f"Dev collections ({len(dev)}), worst and mean: collection weight "
              f"{coll[0]}×, {coll[1]}×; per query, the best of the {len(loo)} models left "
              f"out ({figures['per_query_best']}): {figures['per_query_best_worst']}×, "
              f"{figures['per_query_best_mean']}×; oracle {oracle[0]}×, {oracle[1]}×."]
    lines += ["", "### The confidence mix sharpened", "",
              "One global change of how each query's weight follows the two sides' "
              "confidence, w_q = σ(logit(w) + δ + p · log(c_dense / c_bm25)) (served today: "
              "δ 0, p 1; p > 1 trusts the surer side more, δ < 0 leans to BM25): worst and "
              "mean over the dev collections, and SciTLDR and the tweets, the two that lose.",
              "", "| δ | p | worst | mean | scitldr | twitter |", "|---|---|---|---|---|---|"]
    for (d, p), got in sharp.items():
        worst, mean = summary(got)
        lines.append(f"| {d} | {p} | {worst:.3f} | {mean:.3f} | {got.get('scitldr', 0):.3f} "
                     f"| {got.get('twitter', 0):.3f} |")
        figures[f"sharp d{d} p{p}"] = [worst, mean]
    safe = [k for k in sharp if summary(sharp[k])[0] >= 1.0]
    if safe:
        k = max(safe, key=lambda k: summary(sharp[k])[1])
        figures["sharp_never_loses_best_mean"] = summary(sharp[k])[1]
        lines += ["", f"Of those that lose on no dev collection (to three places) the best mean is "
                  f"{summary(sharp[k])[1]}× (δ {k[0]}, p {k[1]}), against {coll[1]}× served."]
    text = "\n".join(lines)
    print(text)
    record("query_fusion", argv, figures, section=text, results=args.results)


if __name__ == "__main__":
    main()
