"""The cross-encoder reranker over hybrid search's best hits, on the dev collections (issue
74): nDCG@10 of hybrid alone against hybrid's top ``--top`` reordered by the reranker, and
what reranking costs a query on this machine.

Usage: python bench/rerank.py --data ../shared/data [--reranker models/reranker-default]
       [--queries 100] [--top 50] [--sets a,b]

Each collection (the hybrid studies' dev collections, ``bench/calibration.py:dev_sets``;
SciFact test held out, reported apart) is searched offline as the service searches it: an
exact dense top 100 and BM25's top 100 (:class:`index.hybrid.bm25.BM25Index`, Milvus'
scoring), fused (convex) at the weight the collection's label-free tuning chooses. The
reranker reads the query with each of the first ``--top`` hits' text as served (the int8
ONNX graph on a CPU, pairs cut where it was trained) and reorders them. ``--queries``:
that many judged queries a collection (``random.Random(0)``), 0 for all. The time is the
reranker's alone for one query's ``--top`` pairs (tokenizing included), one query at a
time on every core, as a search with ``rerank`` pays it.
"""

from __future__ import annotations

import argparse
import random
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from calibration import HELD_OUT, dev_sets, encoded  # noqa: E402
from machine import add_results_arg, record, stamp  # noqa: E402

from index.beir import load_beir  # noqa: E402
from index.hybrid.bm25 import BM25Index  # noqa: E402
from index.hybrid.calibration import measure, model_mapping, per_query_ndcg  # noqa: E402
from index.hybrid.fusion import CANDIDATES, fuse  # noqa: E402
from index.store import Hit  # noqa: E402


def run_of(ranked: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """A pytrec_eval run from rankings (scores by rank: it breaks score ties by id)."""
    return {q: {d: float(len(ds) - i) for i, d in enumerate(ds)} for q, ds in ranked.items()}


def hybrid_top(enc: Any, mapping: Any, name: str, corpus: dict[str, str],
               queries: dict[str, str], top: int, cache: Path) -> tuple[dict[str, list[str]],
                                                                     float]:
    """Each query's first ``top`` hybrid hits (ids) and the weight fused at."""
    ids, texts = list(corpus), list(corpus.values())
    xb = encoded(enc, name, texts, cache)
    w = mapping.weight(measure(texts, xb, lambda t: enc.encode(list(t), batch_size=64), seed=0))
    bm25 = BM25Index.from_texts(texts)
    qids = list(queries)
    sims = enc.encode([queries[q] for q in qids], batch_size=64) @ xb.T
    depth = min(CANDIDATES, len(ids))
    out = {}
    for r, q in enumerate(qids):
        best = np.argsort(-sims[r], kind="stable")[:depth]
        dense = [Hit(ids[j], float(sims[r, j]), "", None, {}) for j in best]
        lexical = [Hit(ids[j], s, "", None, {}) for j, s in bm25.top(queries[q], depth, ids)]
        out[q] = [h.id for h in fuse(dense, lexical, top, "convex", w, depth=depth)]
    return out, w


def main() -> None:
    import encoder
    from encoder import reranker

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--reranker", type=Path, default=ROOT / "models/reranker-default")
    ap.add_argument("--model", type=Path, default=ROOT / "models/encoder-default")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--top", type=int, default=50)
    ap.add_argument("--sets", default="", help="Comma-separated collections (default: all).")
    ap.add_argument("--dev", type=Path, default=ROOT / "var/dev")
    ap.add_argument("--devcoll", type=Path, default=ROOT / "var/devcoll")
    ap.add_argument("--cache", type=Path, default=ROOT / "var/calibration")
    ap.add_argument("--no-record", action="store_true", help="Print only (a trial).")
    add_results_arg(ap)
    args = ap.parse_args()
    enc = encoder.load(args.model)
    rr = reranker.load(args.reranker)
    mapping = model_mapping(args.model)
    wanted = [s for s in args.sets.split(",") if s]
    sets = {n: v for n, v in dev_sets(args.data, args.dev, args.devcoll).items()
            if not wanted or n in wanted}
    argv = shlex.join(["python", "bench/rerank.py", *sys.argv[1:]])
    lines = [f"\n## The reranker over hybrid's top {args.top} ({args.reranker.name}, "
             f"{time.strftime('%Y-%m-%d')})", "", f"`{argv}` ({stamp()})", "",
             f"nDCG@10 of hybrid (convex at the collection's tuned weight w) and of its top "
             f"{args.top} reordered by the reranker ({rr.backend}, pairs cut at "
             f"{rr.pair_tokens} tokens), on {args.queries or 'all'} judged queries a "
             "collection; the time is the reranker's for one query's pairs.", "",
             "| collection | docs | queries | w | hybrid | reranked | × hybrid | "
             "queries better / worse | both orders fused (RRF) × hybrid |", "|---" * 9 + "|"]
    ratios: dict[str, float] = {}
    blend_ratios: dict[str, float] = {}
    times: list[float] = []
    totals = {"hybrid": [], "reranked": []}  # type: dict[str, list[float]]
    for name, (folder, split) in sets.items():
        corpus, queries, qrels = load_beir(folder, split)
        corpus = {i: t for i, t in corpus.items() if t.strip()}
        qids = sorted(q for q in queries if q in qrels)
        if args.queries and len(qids) > args.queries:
            qids = sorted(random.Random(0).sample(qids, args.queries))
        asked = {q: queries[q] for q in qids}
        judged = {q: qrels[q] for q in qids}
        first, w = hybrid_top(enc, mapping, name, corpus, asked, args.top, args.cache)
        second, blended = {}, {}
        for q in qids:
            t0 = time.perf_counter()
            s = rr.score(asked[q], [corpus[d] for d in first[q]])
            times.append(time.perf_counter() - t0)
            order = np.argsort(-s, kind="stable")
            second[q] = [first[q][int(j)] for j in order]
            # the two orders fused by reciprocal rank (k = 60), hybrid's winning ties
            rank = np.empty(len(order), int)
            rank[order] = np.arange(len(order))
            fused = [1 / (60 + r) + 1 / (60 + i) for i, r in enumerate(rank)]
            blended[q] = [first[q][int(j)] for j in np.argsort(-np.array(fused), kind="stable")]
        a = per_query_ndcg(run_of({q: first[q][:10] for q in qids}), judged)
        b = per_query_ndcg(run_of({q: second[q][:10] for q in qids}), judged)
        c = per_query_ndcg(run_of({q: blended[q][:10] for q in qids}), judged)
        ha, hb = float(np.mean(list(a.values()))), float(np.mean(list(b.values())))
        hc = float(np.mean(list(c.values())))
        held = (name, split) in HELD_OUT
        if not held:
            ratios[name] = hb / ha if ha else float("nan")
            blend_ratios[name] = hc / ha if ha else float("nan")
            totals["hybrid"].append(ha)
            totals["reranked"].append(hb)
        better = sum(b[q] > a[q] + 1e-9 for q in qids)
        worse = sum(b[q] < a[q] - 1e-9 for q in qids)
        lines.append(f"| {name}{' (held out)' if held else ''} | {len(corpus)} | {len(qids)} | "
                     f"{w:.3f} | {ha:.4f} | {hb:.4f} | {hb / ha if ha else float('nan'):.3f} | "
                     f"{better} / {worse} | {hc / ha if ha else float('nan'):.3f} |")
        print(lines[-1], flush=True)
    ms = np.array(times) * 1e3
    summary = {"mean_x_hybrid": round(float(np.mean(list(ratios.values()))), 3),
               "worst_x_hybrid": round(float(min(ratios.values())), 3),
               "worst_collection": min(ratios, key=lambda n: ratios[n]),
               "mean_ndcg_hybrid": round(float(np.mean(totals["hybrid"])), 4),
               "mean_ndcg_reranked": round(float(np.mean(totals["reranked"])), 4),
               "mean_x_hybrid_rrf_blend": round(float(np.mean(list(blend_ratios.values()))), 3),
               "worst_x_hybrid_rrf_blend": round(float(min(blend_ratios.values())), 3),
               "rerank_p50_ms": round(float(np.percentile(ms, 50)), 1),
               "rerank_p90_ms": round(float(np.percentile(ms, 90)), 1),
               "top": args.top, "queries_per_collection": args.queries,
               "dev_collections": len(ratios), "reranker": args.reranker.name,
               "pair_tokens": rr.pair_tokens, "backend": rr.backend}
    met = summary["mean_x_hybrid"] >= 1.10 and summary["worst_x_hybrid"] >= 1.0
    lines += ["", f"Over the {len(ratios)} dev collections: reranked {summary['mean_x_hybrid']} "
              f"× hybrid on the mean, {summary['worst_x_hybrid']} × at worst "
              f"({summary['worst_collection']}); targets ≥ 1.10 × on the mean and never "
              f"below: **{'met' if met else 'MISSED'}**. The reranker's time for a query's "
              f"{args.top} pairs: p50 {summary['rerank_p50_ms']} ms, p90 "
              f"{summary['rerank_p90_ms']} ms (target p50 added ≤ 60 ms: "
              f"**{'met' if summary['rerank_p50_ms'] <= 60 else 'MISSED'}**)."]
    text = "\n".join(lines)
    print(text)
    if not args.no_record:
        record("rerank", argv, summary, section=text, results=args.results)


if __name__ == "__main__":
    main()
