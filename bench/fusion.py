"""Choosing hybrid search's fusion and dense weight for an encoder, on dev data.

Usage: python bench/fusion.py --data ../shared/data [--model models/encoder-default]
       [--dev var/dev] [--write]

For each BEIR set the corpus and queries are encoded with the encoder, each query searched
exactly (dense, top 100) and with BM25 (bm25s with :mod:`index.hybrid.analysis`' analysis, scores
times (k1 + 1) as Milvus and the FAISS store give them, top 100), and the two lists fused
by :func:`index.hybrid.fusion.fuse` exactly as the stores fuse them. nDCG@10 is printed relative
to BM25 alone and to the better of the two sides, for the two sides, RRF, Milvus'
atan-weighted fusion and the convex fusion over a grid of dense weights.

The dev sets: cranfield and multi30k-captions-val (public), and ``scifact-dev`` and
``medquad-dev``, carved from the training sources and left out of the encoder's training
(:mod:`encoder.devsets`, written under ``--dev``). Hybrid should be at least as good as
each of its sides everywhere, so the chosen weight is the one whose *worst* dev set, × the
better side, is highest (ties: the best mean); leave-one-out (the weight chosen on the
other dev sets, scored on the left-out one) says how well that choice travels. SciFact's
test queries are held out: scored with the chosen weight, never used to choose.
``--write`` stores the weight in the model's ``retrieval.json``, which the server reads as
hybrid's default.
Prints a markdown section and records it with the figures (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from machine import add_results_arg, record  # noqa: E402

from index.beir import load_beir, score_run  # noqa: E402
from index.hybrid.analysis import BM25_K1, analyze  # noqa: E402
from index.hybrid.fusion import CANDIDATES, RETRIEVAL_FILE, fuse  # noqa: E402
from index.store import Hit  # noqa: E402

PUBLIC_DEV = [("cranfield", "test"), ("multi30k-captions-val", "test")]
CARVED_DEV = [("scifact-dev", "dev"), ("medquad-dev", "dev")]
HELD_OUT = [("scifact", "test")]
WEIGHTS = [0.5, 0.6, 0.7, 0.75, 0.8, 0.82, 0.84, 0.86, 0.88, 0.9, 0.92, 0.95]


def sides(enc, folder: Path, split: str) -> tuple[dict, dict, dict]:  # type: ignore[no-untyped-def]
    """(dense hits, BM25 hits, qrels) per query, each side CANDIDATES deep."""
    import bm25s

    corpus, queries, qrels = load_beir(folder, split)
    doc_ids, q_ids = list(corpus), list(queries)
    t0 = time.time()
    xb = enc.encode([corpus[i] for i in doc_ids], batch_size=64)
    xq = enc.encode([queries[i] for i in q_ids], batch_size=64)
    print(f"  {folder.name}/{split}: encoded {len(doc_ids)} docs, {len(q_ids)} queries in "
          f"{time.time() - t0:.0f} s", flush=True)
    k = min(CANDIDATES, len(doc_ids))
    S = xq @ xb.T
    top = np.argsort(-S, axis=1)[:, :k]
    dense = {q: [Hit(doc_ids[j], float(S[r, j]), "", None, {}) for j in top[r]]
             for r, q in enumerate(q_ids)}
    ref = bm25s.BM25()
    ref.index([analyze(corpus[i]) for i in doc_ids], show_progress=False)
    bm25: dict[str, list[Hit]] = {}
    for q in q_ids:
        terms = [t for t in analyze(queries[q]) if t in ref.vocab_dict]
        if not terms:
            bm25[q] = []
            continue
        docs, scores = ref.retrieve([terms], k=k, show_progress=False)
        bm25[q] = [Hit(doc_ids[int(d)], float(s) * (BM25_K1 + 1), "", None, {})
                   for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
    return dense, bm25, qrels


def ndcg(dense: dict, bm25: dict, qrels: dict, how: str, w: float = 0.5) -> float:  # type: ignore[type-arg]
    run: dict[str, dict[str, float]] = {}
    for q in dense:
        if how == "dense":
            hits = dense[q][:10]
        elif how == "bm25":
            hits = bm25[q][:10]
        else:
            hits = fuse(dense[q], bm25[q], 10, how, w)
        # pytrec_eval ranks by score: make the order explicit and strictly decreasing
        run[q] = {h.id: float(len(hits) - r) for r, h in enumerate(hits)}
    return score_run(run, qrels)["ndcg@10"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=ROOT / "models/encoder-default")
    ap.add_argument("--dev", type=Path, default=ROOT / "var/dev",
                    help="Where the carved dev sets are (written there if missing).")
    ap.add_argument("--write", action="store_true", help="Store the chosen weight with the model.")
    add_results_arg(ap)
    args = ap.parse_args()
    import encoder
    from encoder.devsets import write_dev_sets

    if not (args.dev / "medquad-dev").is_dir():
        write_dev_sets(args.data, args.dev)
    folders = {n: args.data / "beir" / n for n, _ in PUBLIC_DEV + HELD_OUT}
    folders |= {n: args.dev / n for n, _ in CARVED_DEV}
    enc = encoder.load(args.model)
    methods = ["dense", "bm25", "rrf", "weighted"] + [f"convex {w}" for w in WEIGHTS]
    table: dict[str, dict[str, float]] = {}
    for name, split in PUBLIC_DEV + CARVED_DEV + HELD_OUT:
        dense, bm25, qrels = sides(enc, folders[name], split)
        row = {}
        for m in methods:
            how, _, w = m.partition(" ")
            row[m] = ndcg(dense, bm25, qrels, how, float(w) if w else 0.5)
        table[f"{name}/{split}"] = row
    dev = [f"{n}/{s}" for n, s in PUBLIC_DEV + CARVED_DEV]
    held = [f"{n}/{s}" for n, s in HELD_OUT]

    def ratio(s: str, m: str) -> float:
        return table[s][m] / table[s]["bm25"]

    def vs_best(s: str, m: str) -> float:
        return table[s][m] / max(table[s]["dense"], table[s]["bm25"])

    def best(sets: list[str]) -> float:
        return max(WEIGHTS, key=lambda w: (min(vs_best(s, f"convex {w}") for s in sets),
                                           np.mean([vs_best(s, f"convex {w}") for s in sets])))

    chosen = best(dev)
    argv = shlex.join(["python", "bench/fusion.py", *sys.argv[1:]])
    lines = [f"\n## Hybrid fusion on dev sets ({args.model.name}, {time.strftime('%Y-%m-%d')})",
             "", f"`{argv}`", "",
             "nDCG@10, × BM25 (stemmed, bm25s' analysis) and, in brackets, × the better of "
             "the two sides; each side 100 deep, fused as the stores fuse. Dense weight "
             "chosen on the dev sets (highest worst × better side); the held-out set was not "
             "looked at to choose.", "",
             "| method | " + " | ".join(s + (" (held out)" if s in held else "")
                                      for s in dev + held) + " | worst dev | mean dev |",
             "|---" * (len(dev + held) + 3) + "|"]
    for m in methods:
        cells = [f"{table[s][m]:.3f}, {ratio(s, m):.3f}× ({vs_best(s, m):.3f})"
                 for s in dev + held]
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {min(vs_best(s, m) for s in dev):.3f}"
                     f" | {np.mean([vs_best(s, m) for s in dev]):.3f} |")
    loo = {s: best([t for t in dev if t != s]) for s in dev}
    lines += ["", f"Chosen dense weight: **{chosen}**. Leave-one-out: " + "; ".join(
                  f"{s}: w={w} → {vs_best(s, f'convex {w}'):.3f} × better side (best weight "
                  f"there {max(vs_best(s, f'convex {v}') for v in WEIGHTS):.3f})"
                  for s, w in loo.items()) + ".",
              "Held out, with the chosen weight: " + "; ".join(
                  f"{s}: convex {ratio(s, f'convex {chosen}'):.3f}× BM25, "
                  f"{vs_best(s, f'convex {chosen}'):.3f}× the better side; dense "
                  f"{ratio(s, 'dense'):.3f}×, rrf {ratio(s, 'rrf'):.3f}×" for s in held) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    best_m = f"convex {chosen}"
    fig: dict[str, object] = {"model": args.model.name, "chosen_dense_weight": chosen}
    for key, m in (("convex_chosen", best_m), ("dense", "dense"), ("bm25", "bm25"),
                   ("rrf", "rrf"), ("weighted", "weighted")):
        on_dev = [vs_best(d, m) for d in dev]
        fig |= {f"{key}_worst_dev_x_better_side": round(min(on_dev), 3),
                f"{key}_mean_dev_x_better_side": round(float(np.mean(on_dev)), 3)}
    for d in dev + held:
        fig |= {f"{d}_convex_chosen_ndcg10": round(table[d][best_m], 3),
                f"{d}_convex_chosen_x_bm25": round(ratio(d, best_m), 3)}
    for d in held:
        fig |= {f"{d}_dense_x_bm25": round(ratio(d, "dense"), 3),
                f"{d}_rrf_x_bm25": round(ratio(d, "rrf"), 3)}
    record("fusion", argv, fig, section=text, results=args.results)
    if args.write:
        out = args.model / RETRIEVAL_FILE
        out.write_text(json.dumps({
            "fusion": "convex", "dense_weight": chosen, "chosen_on": dev,
            "worst_vs_better_side": round(min(vs_best(s, f"convex {chosen}") for s in dev), 4),
            "mean_ndcg10_vs_bm25": round(float(np.mean([ratio(s, f"convex {chosen}")
                                                        for s in dev])), 4),
            "command": "python bench/fusion.py --data DATA --write"}, indent=2) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
