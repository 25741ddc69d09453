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

Two more questions, the same way left out:

* *fitted on the objective* (:func:`direct`): the shift's θ chosen to maximise the other
  collections' mean × BM25 less a penalty for each that falls below 1 (what the issue
  asks), not regressed on each query's best weight, for :data:`DIRECT_SETS` and
  :data:`PENALTIES`;
* *can the lists tell which side is right?* (:func:`tell`): a logistic regression of "the
  served fusion loses to BM25 on this query" on every feature, over the queries where the
  two differ; its AUC on the collection left out. Near 0.5, no per-query weight drawn from
  these features can move the right queries.

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

Tried and not kept (2026-12-06, throwaway, Intel Xeon): :func:`tell`'s question on twenty
features (those above or close variants, with the gaps to the second hit, the top-3
overlap, BM25's first hit's cosine below the dense first's, the pooling's spread and
scatter, and three of the collection's calibration signals): AUC left out 0.45–0.69 with a
logistic regression; with gradient-boosted trees (depth 2 and 3, scikit-learn's
``HistGradientBoostingClassifier``, not a dependency) 0.34–0.36 on SciTLDR (worse than a
coin), 0.50–0.53 on the tweets, 0.38–0.81 over the rest.
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
            "same top hit", "encoder tokens per word")
SETS = {"all": list(range(len(FEATURES))), "overlap": [6], "bm25 rarity": [3],
        "overlap + rarity + length + coverage": [3, 6, 7, 8], "tokens per word": [11]}
# fitted on the objective itself (:func:`direct`): these sets, each at these penalties λ
DIRECT_SETS = {"none (a shift)": [], "overlap": [6], "tokens per word": [11],
               "overlap + rarity + length + coverage": [3, 6, 7, 8]}
PENALTIES = (0.0, 1.0)
# the weights of GRID as logits, 0 and 1 kept apart from 0.02 and 0.98 (interpolation)
GRID_T = np.log(np.clip(GRID, 1e-3, 1 - 1e-3) / (1 - np.clip(GRID, 1e-3, 1 - 1e-3)))
SHRINKS = (0.5, 1.0)
RIDGE = 1.0
# the confidence mix sharpened: w_q = σ(logit(w) + δ + p · log(c_dense / c_bm25)); served
# today: δ 0, p 1
SHARP = [(d, p) for d in (-1.0, -0.5, 0.0, 0.5, 1.0) for p in (1.0, 1.5, 2.0, 3.0, 4.0)]


def logit(p: np.ndarray | float) -> np.ndarray:
    q = np.clip(p, 0.02, 0.98)
    return np.log(q / (1 - q))


def tokens_per_word(enc: Any, texts: list[str]) -> list[float]:
    """How many of the encoder's tokens each text's words become, on the mean (1: every
    word is in its vocabulary; a rare technical word splits into several)."""
    from encoder.tokenizer import clean_text

    cleaned = [clean_text(t) for t in texts]
    return [sum(1 for m in e.special_tokens_mask if not m) / max(len(t.split()), 1)
            for t, e in zip(cleaned, enc.tokenizer.encode_batch(cleaned), strict=True)]


def features(q: dict[str, Any], dense: list[Hit], bm25: list[Hit], split: float
             ) -> list[float]:
    """:data:`FEATURES` of one query, from its two lists (``split``: its tokens per word)."""
    dc = [h.score for h in dense]
    bs = [h.score for h in bm25] or [0.0]
    terms = max(q["terms"], 1)
    overlap = len({h.id for h in dense[:10]} & {h.id for h in bm25[:10]}) / 10
    return [dc[0], dc[0] - dc[min(9, len(dc) - 1)], dc[0] - dc[-1],
            bs[0] / terms / (BM25_K1 + 1),
            (bs[0] - bs[min(9, len(bs) - 1)]) / bs[0] if bm25 else 0.0,
            len(bm25) / CANDIDATES, overlap, float(np.log(terms)),
            q["bm25"][0][3] if q["bm25"] else 0.0, q["dense"][0][2],
            float(bool(bm25) and bm25[0].id == dense[0].id), split]


def collection(path: Path, enc: Any) -> dict[str, Any]:
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
    split = tokens_per_word(enc, [row["queries"][q]["text"] for q in qids])
    return {"name": row["name"], "held_out": row["held_out"], "weight": row["weight"],
            "served": served, "log_conf": log_conf,
            "grid": grid, "bm25": ndcg({q: b[:10] for q, (_, b) in sides.items()}),
            "X": np.array([features(row["queries"][q], d, b, s)
                           for (q, (d, b)), s in zip(sides.items(), split, strict=True)]),
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


def at_logits(c: dict[str, Any], t: np.ndarray) -> float:
    """nDCG@10 × BM25 with each query's base weight at logit ``t``, read off the grid
    (linear between its points: what :func:`direct` fits on, fast enough for a search)."""
    t = np.clip(t, GRID_T[0], GRID_T[-1])
    i = np.clip(np.searchsorted(GRID_T, t) - 1, 0, len(GRID_T) - 2)
    f = (t - GRID_T[i]) / (GRID_T[i + 1] - GRID_T[i])
    rows = np.arange(len(t))
    got = c["grid"][rows, i] * (1 - f) + c["grid"][rows, i + 1] * f
    return float(got.mean() / c["bm25"].mean())


def direct(train: list[dict[str, Any]], cols: list[int], penalty: float
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A per-query shift fitted on the issue's objective rather than on each query's best
    weight: θ maximising the fitting collections' mean nDCG@10 × BM25 less ``penalty`` ×
    how far each falls below 1 (Nelder–Mead from five starts, on :func:`at_logits`)."""
    from scipy.optimize import minimize

    X = np.concatenate([c["X"][:, cols] for c in train])
    mu, sd = X.mean(0), X.std(0) + 1e-9
    Zs = [np.c_[np.ones(len(c["X"])), (c["X"][:, cols] - mu) / sd] for c in train]

    def loss(theta: np.ndarray) -> float:
        got = np.array([at_logits(c, logit(c["weight"]) + z @ theta)
                        for c, z in zip(train, Zs, strict=True)])
        return float(-(got.mean() - penalty * np.maximum(0.0, 1.0 - got).sum())
                     + 1e-4 * (theta[1:] ** 2).sum())

    rng = np.random.default_rng(0)
    starts = [np.zeros(1 + len(cols))] + [rng.normal(0, 0.5, 1 + len(cols)) for _ in range(4)]
    best = min((minimize(loss, s, method="Nelder-Mead",
                         options={"maxiter": 3000, "xatol": 1e-3, "fatol": 1e-6})
                for s in starts), key=lambda r: r.fun)
    return best.x, mu, sd


def tell(train: list[dict[str, Any]], c: dict[str, Any]) -> tuple[int, int, float]:
    """Can the lists tell which side is right? A logistic regression of "the served fusion
    loses to BM25 on this query" on every feature of :data:`FEATURES`, over the queries
    where the two differ, each weighted by how much; fitted on ``train``, scored on ``c``:
    its losing and winning queries and the AUC (0.5: no better than a coin)."""
    from scipy.optimize import minimize

    def labelled(o: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        d = o["served_ndcg"] - o["bm25"]
        m = np.abs(d) > 1e-9
        return o["X"][m], (d[m] < 0).astype(float), np.abs(d[m])

    parts = [labelled(o) for o in train]
    X, y, w = (np.concatenate([p[k] for p in parts]) for k in range(3))
    mu, sd = X.mean(0), X.std(0) + 1e-9
    Z = np.c_[np.ones(len(X)), (X - mu) / sd]

    def nll(theta: np.ndarray) -> float:
        z = Z @ theta
        return float((w * (np.logaddexp(0, z) - y * z)).sum() / w.sum()
                     + 1e-2 * (theta[1:] ** 2).sum())

    theta = minimize(nll, np.zeros(Z.shape[1]), method="L-BFGS-B").x
    Xc, yc, _ = labelled(c)
    p = np.c_[np.ones(len(Xc)), (Xc - mu) / sd] @ theta
    pos, neg = p[yc == 1], p[yc == 0]
    if not len(pos) or not len(neg):
        return len(pos), len(neg), float("nan")
    auc = (pos[:, None] > neg[None]).mean() + 0.5 * (pos[:, None] == neg[None]).mean()
    return len(pos), len(neg), float(auc)


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
    enc = encoder.load(args.model)
    table = [collection(p, enc)
             for p in sorted(args.sides.glob(f"*.{enc.fingerprint}.json.gz"))]
    if not table:
        sys.exit(f"no cached lists for {enc.fingerprint} under {args.sides}: run "
                 "bench/query_sides.py first")
    for c in table:
        c["y"], c["gain"] = targets(c)
        bm = c["bm25"].mean()
        at = c["grid"].mean(0)
        c["served_ndcg"] = c["fused"](np.full(len(c["X"]), c["weight"]))
        c["coll"] = float(c["served_ndcg"].mean() / bm)
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
    fitted: dict[tuple[str, float], dict[str, float]] = {}
    told: dict[str, tuple[int, int, float]] = {}
    for c in table:
        others = [o for o in dev if o is not c]
        told[c["name"]] = tell(others, c)
        for name, cols in DIRECT_SETS.items():
            for penalty in PENALTIES:
                fitted.setdefault((name, penalty), {})[c["name"]] = per_query(
                    c, direct(others, cols, penalty), cols, 1.0)
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
    head = [f"{n}, λ {p}" for n, p in fitted]
    lines += ["", "### Fitted on the objective", "",
              "A per-query shift w_q = σ(logit(w) + θ·[1, z]) with θ chosen on the other dev "
              "collections to maximise their mean nDCG@10 × BM25 less λ × how far each falls "
              "below 1 (Nelder–Mead on the grid read linearly), scored exactly on the one left "
              "out. Columns: feature set, λ.", "",
              "| collection | served | " + " | ".join(head) + " |", "|---" * (2 + len(head)) + "|"]
    for c in table:
        lines.append(f"| {c['name']}{' (held out)' if c['held_out'] else ''} | "
                     f"{c['coll']:.3f} | "
                     + " | ".join(f"{fitted[k][c['name']]:.3f}" for k in fitted) + " |")
    for k, v in fitted.items():
        figures[f"direct {k[0]} l{k[1]}"] = list(summary(v))
    lines += ["", "Dev collections, worst and mean: "
              + "; ".join(f"{n}, λ {p}: {summary(v)[0]}×, {summary(v)[1]}×"
                          for (n, p), v in fitted.items()) + "."]
    aucs = [a for n, (_, _, a) in told.items() if n in names and not np.isnan(a)]
    lines += ["", "### Can the lists tell which side is right?", "",
              "Each query where the served fusion and BM25 differ, labelled by which is "
              "better; a logistic regression on every feature above, each query weighted by "
              "the difference, fitted on the other dev collections: the AUC of its guess on "
              "the one left out (0.5: a coin; 1: always right).", "",
              "| collection | queries lost to BM25 | won | AUC left out |", "|---|---|---|---|"]
    for c in table:
        lost, won, auc = told[c["name"]]
        lines.append(f"| {c['name']}{' (held out)' if c['held_out'] else ''} | {lost} | {won} "
                     f"| {'–' if np.isnan(auc) else f'{auc:.3f}'} |")
        if not np.isnan(auc):
            figures[f"auc {c['name']}"] = round(auc, 3)
    figures["auc_min"], figures["auc_max"] = round(min(aucs), 3), round(max(aucs), 3)
    figures["auc_mean"] = round(float(np.mean(aucs)), 3)
    lines += ["", f"AUC over the dev collections: {figures['auc_min']}–{figures['auc_max']}, "
              f"mean {figures['auc_mean']}."]
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
    safe = [dp for dp in sharp if summary(sharp[dp])[0] >= 1.0]
    if safe:
        top = max(safe, key=lambda dp: summary(sharp[dp])[1])
        figures["sharp_never_loses_best_mean"] = summary(sharp[top])[1]
        lines += ["", f"Of those that lose on no dev collection (to three places) the best mean is "
                  f"{summary(sharp[top])[1]}× (δ {top[0]}, p {top[1]}), against {coll[1]}× "
                  "served."]
    text = "\n".join(lines)
    print(text)
    record("query_fusion", argv, figures, section=text, results=args.results)


if __name__ == "__main__":
    main()
