"""Long documents: the encoder's vector of a whole (cut) document against scores that also
look at its windows, on collections whose documents run past the encoder's window.

Usage: python bench/long_docs.py --data ../shared/data [--model models/encoder-default]
       [--sets jargon,foldoc,scitldr,scifact-dev,medquad-dev,cranfield,scifact]
       [--window 128] [--stride 64] [--rerank 30]

The service embeds a document once, cut at the encoder's ``max_tokens`` (256); the encoder
was trained on documents of at most 192 tokens. Here each document longer than
``--window`` tokens is also embedded in windows of that many tokens (``<s>`` and
``window - 1`` of its tokens, every ``--stride`` tokens, to its end); a shorter one is its
own single window. Per set, nDCG@10 × bm25s of:

- ``dense``: the cut document's vector alone (what the service does today);
- ``maxp``: the best window alone (MaxP, Dai & Callan 2019);
- ``full+maxp``: the mean of the two cosines, ``(q·d + max_i q·w_i) / 2``; for a short
  document it is ``q·d``, so scores stay on the cosine scale;
- ``rerank``: full+maxp over only the top ``--rerank`` of the whole vectors (what a store
  would do with the windows kept beside each row, re-scoring the dense candidates);
- ``hybrid`` (convex fusion with bm25s' run at the model's ``dense_weight``) with the dense
  side first as it is, then full+maxp.

Exact search (numpy); the sets are the ten dev collections (``bench/devcollections.py``),
the two dev sets (``encoder.devsets``) and public test sets, named as in
``bench/encoder_dev.py``. Prints a markdown section and records it, with the means over
the sets and each set's ratios (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
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

PUBLIC = {"cranfield": "beir/cranfield", "scifact": "beir/scifact",
          "captions": "beir/multi30k-captions-val"}
DEV = ("scifact-dev", "medquad-dev")


def folders(data: Path, names: list[str], devcoll: Path, dev: Path) -> list[tuple[str, Path, str]]:
    """(name, BEIR folder, split) of each set."""
    from devcollections import write_dev_collections

    from encoder.devsets import write_dev_sets

    out = []
    carved = [n for n in names if n not in PUBLIC and n not in DEV]
    made = write_dev_collections(data, devcoll, carved) if carved else {}
    if any(n in DEV for n in names) and not (dev / "medquad-dev").is_dir():
        write_dev_sets(data, dev)
    for n in names:
        if n in PUBLIC:
            out.append((n, data / PUBLIC[n], "test"))
        elif n in DEV:
            out.append((n, dev / n, "dev"))
        else:
            out.append((n, made[n], "dev"))
    return out


def windows(ids: list[int], window: int, stride: int) -> list[list[int]]:
    """``ids`` (``<s>`` first, longer than ``window``) in windows of ``window`` tokens, each
    ``<s>`` and the next ``window - 1``, every ``stride``, the last reaching the end."""
    out = []
    for s in range(1, len(ids), stride):
        out.append([ids[0], *ids[s:s + window - 1]])
        if s + window - 1 >= len(ids):
            break
    return out


def run_of(scores: np.ndarray, doc_ids: list[str], q_ids: list[str], k: int = 100
           ) -> dict[str, dict[str, float]]:
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return {q: {doc_ids[j]: float(scores[r, j]) for j in top[r]} for r, q in enumerate(q_ids)}


def hybrid(dense: dict[str, dict[str, float]], bm25: dict[str, dict[str, float]],
           weight: float) -> dict[str, dict[str, float]]:
    """Convex fusion (the service's ``index.hybrid.fusion.fuse``) of two runs, top 10."""
    from index.hybrid.fusion import fuse
    from index.store import Hit

    def hits(run: dict[str, float]) -> list[Hit]:
        return [Hit(i, s, "", None, {}) for i, s in sorted(run.items(), key=lambda x: -x[1])]

    return {q: {h.id: h.score for h in fuse(hits(d), hits(bm25.get(q, {})), 10,
                                            dense_weight=weight)}
            for q, d in dense.items()}


def score_set(enc: Any, folder: Path, split: str, args: argparse.Namespace, weight: float
              ) -> dict[str, Any]:
    from encoder.evaluate import bm25_run
    from encoder.tokenizer import clean_text
    from index.beir import load_beir, score_run

    corpus, queries, qrels = load_beir(folder, split)
    doc_ids, q_ids = list(corpus), list(queries)
    t0 = time.perf_counter()
    bm25 = bm25_run(corpus, queries)
    bm = score_run(bm25, qrels)["ndcg@10"]
    xq = enc.encode([queries[i] for i in q_ids])
    # every token of each document (TextEncoder.tokenize would cut them at max_tokens)
    whole = [e.ids for e in enc.tokenizer.encode_batch([clean_text(corpus[i]) for i in doc_ids])]
    cut = [x[: enc.max_tokens] for x in whole]
    # only the long documents have windows; a short one is its own (its cut vector)
    long = [j for j, x in enumerate(whole) if len(x) > args.window]
    wins: list[list[int]] = []
    owner: list[int] = []
    for j in long:
        w = windows(whole[j], args.window, args.stride)
        wins += w
        owner += [j] * len(w)
    t1 = time.perf_counter()
    xd = enc.encode_ids(cut)
    t_docs = time.perf_counter() - t1
    full = xq @ xd.T
    best = full.copy()
    t1 = time.perf_counter()
    if wins:
        xw = enc.encode_ids(wins)
        starts = np.r_[0, np.flatnonzero(np.diff(np.asarray(owner))) + 1]
        best[:, long] = np.maximum.reduceat(xq @ xw.T, starts, axis=1)
    t_wins = time.perf_counter() - t1
    both = (full + best) / 2
    top = np.argsort(-full, axis=1, kind="stable")[:, : args.rerank]
    rerank = np.full_like(full, -2.0)  # below every cosine: only the re-scored candidates rank
    np.put_along_axis(rerank, top, np.take_along_axis(both, top, 1), 1)
    runs = {"dense": run_of(full, doc_ids, q_ids), "maxp": run_of(best, doc_ids, q_ids),
            "full+maxp": run_of(both, doc_ids, q_ids), "rerank": run_of(rerank, doc_ids, q_ids)}
    nd = {k: score_run(v, qrels)["ndcg@10"] / bm for k, v in runs.items()}
    nd["hybrid"] = score_run(hybrid(runs["dense"], bm25, weight), qrels)["ndcg@10"] / bm
    nd["hybrid full+maxp"] = score_run(hybrid(runs["full+maxp"], bm25, weight),
                                       qrels)["ndcg@10"] / bm
    lengths = np.array([len(x) for x in whole])
    return {"set": folder.name, "docs": len(doc_ids), "queries": len(q_ids),
            "longer_than_window": round(float(np.mean(lengths > args.window)), 3),
            "longer_than_max_tokens": round(float(np.mean(lengths > enc.max_tokens)), 3),
            "windows_per_doc": round((len(wins) + len(doc_ids) - len(long)) / len(doc_ids), 2),
            "bm25s_ndcg10": round(bm, 4),
            **{f"{k.replace(' ', '_').replace('+', '_')}_x_bm25s": round(v, 3)
               for k, v in nd.items()},
            "windows_encode_x_docs": round(t_wins / t_docs, 2),
            "seconds": round(time.perf_counter() - t0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=ROOT / "models/encoder-default")
    ap.add_argument("--sets", default="jargon,foldoc,scitldr,scifact-dev,medquad-dev,"
                                      "cranfield,scifact")
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--stride", type=int, default=64)
    ap.add_argument("--rerank", type=int, default=30)
    ap.add_argument("--devcoll", type=Path, default=ROOT / "var/devcoll")
    ap.add_argument("--dev", type=Path, default=ROOT / "var/dev")
    add_results_arg(ap)
    args = ap.parse_args()
    if not 1 <= args.stride <= args.window - 1:
        ap.error("--stride must be between 1 and --window - 1")

    import encoder
    from index.hybrid.fusion import model_dense_weight

    argv = "python bench/long_docs.py " + " ".join(map(shlex.quote, sys.argv[1:]))
    enc = encoder.load(args.model)
    weight = model_dense_weight(args.model)
    rows = []
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    for name, folder, split in folders(args.data, names, args.devcoll, args.dev):
        row = {"set": name, **{k: v for k, v in score_set(enc, folder, split, args,
                                                             weight).items() if k != "set"}}
        rows.append(row)
        print(row, flush=True)
    cols = ["dense", "maxp", "full_maxp", "rerank", "hybrid", "hybrid_full_maxp"]
    lines = [f"#### Long documents: whole vector against windows ({stamp()})", "",
             f"`{argv}`", "",
             f"Windows of {args.window} tokens every {args.stride}; re-ranking the top "
             f"{args.rerank}; hybrid is convex fusion at dense weight {weight}. "
             "Each figure × bm25s (nDCG@10).", "",
             "| set | docs | > window | > 256 | windows a doc | bm25s | dense (today) | MaxP | "
             "full + MaxP | re-rank | hybrid (today) | hybrid, full + MaxP | "
             "windows' encode time × docs' |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['docs']:,} | {r['longer_than_window']:.0%} | "
            f"{r['longer_than_max_tokens']:.0%} | {r['windows_per_doc']} | "
            f"{r['bm25s_ndcg10']:.3f} | "
            + " | ".join(f"{r[c + '_x_bm25s']:.3f}" for c in cols)
            + f" | {r['windows_encode_x_docs']} |")
    means = {c: round(float(np.mean([r[c + "_x_bm25s"] for r in rows])), 3) for c in cols}
    lines += ["", f"Means over the {len(rows)} sets: dense {means['dense']:.3f} → full + MaxP "
              f"{means['full_maxp']:.3f}; hybrid {means['hybrid']:.3f} → "
              f"{means['hybrid_full_maxp']:.3f}."]
    section = "\n".join(lines)
    print(section)
    record("long_docs", argv, {
        "dense_mean_x_bm25s": means["dense"], "full_maxp_mean_x_bm25s": means["full_maxp"],
        "hybrid_mean_x_bm25s": means["hybrid"],
        "hybrid_full_maxp_mean_x_bm25s": means["hybrid_full_maxp"],
        "window": args.window, "stride": args.stride, "rerank": args.rerank,
        "model": args.model.name, "sets": [r["set"] for r in rows],
        "full_maxp_over_dense": {r["set"]: round(r["full_maxp_x_bm25s"] / r["dense_x_bm25s"], 3)
                                 for r in rows},
        "hybrid_full_maxp_over_hybrid": {
            r["set"]: round(r["hybrid_full_maxp_x_bm25s"] / r["hybrid_x_bm25s"], 3)
            for r in rows},
        "windows_encode_x_docs": {r["set"]: r["windows_encode_x_docs"] for r in rows}},
        section=section, results=args.results)

if __name__ == "__main__":
    main()
