"""Fitting and checking hybrid search's per-collection calibration on labelled dev collections.

Usage: python bench/calibration.py --data ../shared/data [--model models/encoder-default]
       [--dev var/dev] [--devcoll var/devcoll] [--cache var/calibration] [--write]

For each dev collection (the four of ``bench/fusion.py`` and those of
``bench/devcollections.py``) the corpus is encoded once (cached under ``--cache`` by the
encoder's fingerprint), and then:

* *real*: its judged queries searched exactly (dense, top 100) and with BM25
  (:class:`index.hybrid.bm25.BM25Index`, which scores as Milvus does, top 100), fused by
  :func:`index.hybrid.fusion.fuse` at every weight of
  :data:`index.hybrid.calibration.GRID`: nDCG@10 per weight, and the best weight in hindsight;
* *label-free*: :func:`index.hybrid.calibration.measure` on the corpus alone (what a collection
  sees of itself when it calibrates), timed.

The mapping from signals to weight (:class:`index.hybrid.calibration.Mapping`) is fitted on all dev
collections and checked leave-one-out (fitted without a collection, scored on it): the
mapping chosen maximises the worst collection's hybrid × BM25, then the mean. SciFact's test
queries are held out. ``--write`` stores the mapping in the encoder's ``retrieval.json``.
Prints a markdown section and records it with the summary figures (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import bisect
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

from index.beir import load_beir, score_run  # noqa: E402
from index.hybrid.bm25 import BM25Index  # noqa: E402
from index.hybrid.calibration import GRID, Mapping, measure  # noqa: E402
from index.hybrid.fusion import CANDIDATES, RETRIEVAL_FILE, fuse  # noqa: E402
from index.store import Hit  # noqa: E402

PUBLIC_DEV = [("cranfield", "test"), ("multi30k-captions-val", "test")]
CARVED_DEV = [("scifact-dev", "dev"), ("medquad-dev", "dev")]
HELD_OUT = [("scifact", "test")]
INTERCEPTS = np.round(np.arange(0.5, 1.01, 0.05), 3)
SLOPES = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
HIGHS = (0.88, 0.9, 0.91, 0.92, 0.95)
LOWS = (0.0, 0.3)
GAINS = (0.0, 3.0, 5.0, 10.0)
BOOSTS = ((1.0, 0.95), (0.025, 0.95), (0.03, 0.95), (0.04, 0.95), (0.03, 0.92))
JITTER = 0.005
SEEDS = (0, 1, 2)  # the mapping must hold for the signals of each seed
SLACK = 0.01  # calibrated hybrid may fall this far below hybrid at the encoder's default


def encoded(enc: Any, name: str, texts: list[str], cache: Path) -> np.ndarray:
    path = cache / f"{name}.{enc.fingerprint}.npy"
    if path.is_file():
        x = np.load(path)
        if len(x) == len(texts):
            return x
    t0 = time.time()
    x = enc.encode(texts, batch_size=64)
    print(f"  encoded {len(texts)} docs of {name} in {time.time() - t0:.0f} s", flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, x)
    return x


def real_curve(enc: Any, corpus: dict[str, str], xb: np.ndarray, queries: dict[str, str],
               qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """nDCG@10 of dense, BM25, and the convex fusion at every weight (key ``w{w}``)."""
    doc_ids, q_ids = list(corpus), list(queries)
    xq = enc.encode([queries[q] for q in q_ids], batch_size=64)
    k = min(CANDIDATES, len(doc_ids))
    S = xq @ xb.T
    bm25 = BM25Index.from_texts([corpus[i] for i in doc_ids])
    doc_at = {d: j for j, d in enumerate(doc_ids)}
    runs: dict[str, dict[str, dict[str, float]]] = {}

    def add(method: str, q: str, hits: list[Hit]) -> None:
        runs.setdefault(method, {})[q] = {h.id: float(len(hits) - r) for r, h in enumerate(hits)}

    for r, q in enumerate(q_ids):
        top = np.argsort(-S[r], kind="stable")[:k]
        dense = [Hit(doc_ids[j], float(S[r, j]), "", None, {}) for j in top]
        lexical = [Hit(doc_ids[j], s, "", None, {}) for j, s in bm25.top(queries[q], k, doc_ids)]
        add("dense", q, dense[:10])
        add("bm25", q, lexical[:10])
        add("rrf", q, fuse(dense, lexical, 10, "rrf", depth=k))
        # LaPraDoR's form: BM25's list re-scored by BM25 × ((1 + cos) / 2)^p
        for name, p in (("product", 1.0), ("product2", 2.0)):
            by = {h.id: h.score * ((1.0 + float(S[r, doc_at[h.id]])) / 2.0) ** p
                  for h in lexical}
            order = sorted(by, key=lambda i: (-by[i], i))[:10] if by else \
                [h.id for h in dense[:10]]
            add(name, q, [Hit(i, 0.0, "", None, {}) for i in order])
        for w in GRID:
            add(f"w{w}", q, fuse(dense, lexical, 10, "convex", w, depth=k))
    return {m: score_run(run, qrels)["ndcg@10"] for m, run in runs.items()}


def dev_sets(data: Path, dev: Path, devcoll: Path) -> dict[str, tuple[Path, str]]:
    """Every labelled collection the hybrid studies use, name → (BEIR folder, split): the
    public dev sets and SciFact's held-out test, the carved dev sets (written under ``dev``
    when missing) and ``bench/devcollections.py``'s (under ``devcoll``)."""
    from devcollections import write_dev_collections

    from encoder.devsets import write_dev_sets

    if not (dev / "medquad-dev").is_dir():
        write_dev_sets(data, dev)
    sets = {n: (data / "beir" / n, s) for n, s in PUBLIC_DEV + HELD_OUT}
    sets |= {n: (dev / n, s) for n, s in CARVED_DEV}
    sets |= {n: (p, "dev") for n, p in write_dev_collections(data, devcoll).items()}
    return sets


def collect(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    import encoder

    sets = dev_sets(args.data, args.dev, args.devcoll)
    enc = encoder.load(args.model)
    out: dict[str, dict[str, Any]] = {}
    for name, (folder, split) in sets.items():
        path = args.cache / f"{name}.{enc.fingerprint}.json"
        if path.is_file() and not args.again:
            out[name] = json.loads(path.read_text())
            continue
        corpus, queries, qrels = load_beir(folder, split)
        corpus = {i: t for i, t in corpus.items() if t.strip()}
        texts = list(corpus.values())
        xb = encoded(enc, name, texts, args.cache)
        real = real_curve(enc, corpus, xb, queries, qrels)
        by_seed = []
        for seed in SEEDS:
            t0 = time.perf_counter()
            by_seed.append(measure(texts, xb, lambda t: enc.encode(list(t), batch_size=64),
                                   seed=seed))
            seconds = time.perf_counter() - t0
        signals = by_seed[0]
        out[name] = {"split": split, "docs": len(texts), "queries": len(queries),
                     "real": real, "signals": signals, "by_seed": by_seed,
                     "seconds": round(seconds, 1), "held_out": (name, split) in HELD_OUT}
        path.write_text(json.dumps(out[name], indent=1))
        print(name, {k: real[k] for k in ("dense", "bm25", "w0.5", "w0.9")},
              {k: signals[k] for k in ("dense", "bm25", "dense_vs_bm25", "agreement", "ict")},
              f"{seconds:.0f} s", flush=True)
    return out


def interp(row: dict[str, Any], w: float) -> float:
    """Hybrid × BM25 at ``w``, interpolated linearly between grid points."""
    ys = row.get("_ys")
    if ys is None:
        ys = row["_ys"] = [row["real"][f"w{g}"] / max(row["real"]["bm25"], 1e-9) for g in GRID]
    i = min(max(bisect.bisect_right(GRID, w) - 1, 0), len(GRID) - 2)
    t = (w - GRID[i]) / (GRID[i + 1] - GRID[i])
    return float(ys[i] + t * (ys[i + 1] - ys[i]))


def variants(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The signals a mapping must hold for: each seed's, and each with its fusion gain moved
    by ±JITTER (about its spread between seeds)."""
    out = []
    for sig in row.get("by_seed", [row["signals"]]):
        out += [sig | {"fusion_gain": sig["fusion_gain"] + d} for d in (0.0, -JITTER, JITTER)]
    return out


def candidates() -> list[Mapping]:
    return [Mapping(float(a), float(b), lo, hi, c, bg, bw)
            for a in INTERCEPTS for b in SLOPES for c in GAINS for lo in LOWS for hi in HIGHS
            for bg, bw in BOOSTS]


def fit(rows: dict[str, dict[str, Any]], default_w: float) -> tuple[Mapping, float, float]:
    """The mapping with the best (worst, mean) over ``rows`` and :func:`variants` of their
    signals, where a collection's figure is the lower of hybrid × BM25 and hybrid ×
    (hybrid at the encoder's default weight) + SLACK: never below BM25, nor far below the
    default."""
    best: tuple[float, float] = (-1.0, -1.0)
    chosen = Mapping()
    floors = {n: interp(row, default_w) for n, row in rows.items()}
    sigs = {n: variants(row) for n, row in rows.items()}
    for m in candidates():
        worst, total, count = 9.0, 0.0, 0
        for n, row in rows.items():
            for sig in sigs[n]:
                h = interp(row, m.weight(sig))
                worst = min(worst, h, h / floors[n] + SLACK)
                total, count = total + h, count + 1
            if round(worst, 3) < best[0]:
                break  # cannot win: its mean over the rows seen so far must not count
        else:
            key = (round(worst, 3), total / count)
            if key > best:
                best, chosen = key, m
    return chosen, best[0], best[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=ROOT / "models/encoder-default")
    ap.add_argument("--dev", type=Path, default=ROOT / "var/dev")
    ap.add_argument("--devcoll", type=Path, default=ROOT / "var/devcoll")
    ap.add_argument("--cache", type=Path, default=ROOT / "var/calibration")
    ap.add_argument("--again", action="store_true", help="Recompute cached collections.")
    ap.add_argument("--write", action="store_true", help="Store the mapping with the model.")
    add_results_arg(ap)
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    table = collect(args)
    dev = {n: r for n, r in table.items() if not r["held_out"]}
    held = {n: r for n, r in table.items() if r["held_out"]}
    default_w = json.loads((args.model / RETRIEVAL_FILE).read_text())["dense_weight"]
    mapping, _, _ = fit(dev, default_w)
    loo = {n: fit({m: r for m, r in dev.items() if m != n}, default_w)[0] for n in dev}
    argv = shlex.join(["python", "bench/calibration.py", *sys.argv[1:]])
    lines = [f"\n## Per-collection hybrid calibration ({args.model.name}, "
             f"{time.strftime('%Y-%m-%d')})", "", f"`{argv}` ({stamp()})", "",
             "nDCG@10 × BM25 on each collection's judged queries (exact dense and BM25, 100 "
             "deep, fused as the stores fuse). Signals: the label-free pseudo-query figures "
             "(`index.hybrid.calibration.measure`: dense and BM25 gain at 10, their ratio), "
             "and the "
             "weight the mapping gives, fitted on the other dev collections (leave-one-out) "
             "and on all of them (`fit`).", "",
             "| collection | docs | queries | dense | bm25 | hybrid, default w | best w "
             "(hindsight) | signals (seed 0): pq dense/bm25, fusion gain | leave-one-out w → "
             "hybrid (seeds 0, 1, 2) | fitted w → hybrid (seeds 0, 1, 2) | calibration s |",
             "|---" * 10 + "|"]
    stats: dict[str, list[float]] = {k: [] for k in ("loo", "fit", "default", "best",
                                                      "loo_vs_default", "fit_vs_default")}
    for n, row in table.items():
        real, seeds = row["real"], row.get("by_seed", [row["signals"]])
        best_w = max(GRID, key=lambda w: real[f"w{w}"])
        by = loo.get(n, mapping)
        lw = [by.weight(sig) for sig in seeds]
        fw = [mapping.weight(sig) for sig in seeds]
        d = interp(row, default_w)
        if n in dev:
            stats["loo"] += [interp(row, w) for w in lw]
            stats["fit"] += [interp(row, w) for w in fw]
            stats["loo_vs_default"] += [interp(row, w) / d for w in lw]
            stats["fit_vs_default"] += [interp(row, w) / d for w in fw]
            stats["default"].append(d)
            stats["best"].append(interp(row, best_w))
        sig = seeds[0]
        lines.append(
            f"| {n}{' (held out)' if row['held_out'] else ''} | {row['docs']} | "
            f"{row['queries']} | {real['dense'] / real['bm25']:.3f}× | {real['bm25']:.3f} | "
            f"{d:.3f}× | {best_w} → {interp(row, best_w):.3f}× | "
            f"{sig['dense_vs_bm25']:.2f}, {sig['fusion_gain']:.3f} | "
            + ", ".join(f"{w:.2f} → {interp(row, w):.3f}×" for w in lw) + " | "
            + ", ".join(f"{w:.2f} → {interp(row, w):.3f}×" for w in fw)
            + f" | {row['seconds']} |")

    def line(k: str) -> str:
        return f"worst {min(stats[k]):.3f}×, mean {np.mean(stats[k]):.3f}×"

    lines += ["", f"Dev collections ({len(dev)}), × BM25: default weight {default_w}: "
              f"{line('default')}; calibrated, leave-one-out (every seed): {line('loo')}, "
              f"against the default worst {min(stats['loo_vs_default']):.3f}×; fitted on all "
              f"(every seed): {line('fit')}, against the default worst "
              f"{min(stats['fit_vs_default']):.3f}×; best weight in hindsight: {line('best')}.",
              f"Mapping fitted on all dev collections: {mapping}.", "",
              "Other forms, × BM25: RRF (k 60), LaPraDoR's product (BM25's top 100 re-scored "
              "by BM25 × ((1 + cos)/2)^p, p = 1 and 2), next to convex fusion at the "
              "shipped calibration (seed 0):", "",
              "| collection | rrf | product | product² | convex, calibrated |",
              "|---|---|---|---|---|"]
    for n, row in table.items():
        real = row["real"]
        if "product" in real:
            lines.append(f"| {n} | {real['rrf'] / real['bm25']:.3f}× | "
                         f"{real['product'] / real['bm25']:.3f}× | "
                         f"{real['product2'] / real['bm25']:.3f}× | "
                         f"{interp(row, mapping.weight(row['signals'])):.3f}× |")
    lines += [""]
    text = "\n".join(lines) + "\n"
    print(text)
    held_x = {n: round(interp(r, mapping.weight(r["signals"])), 3) for n, r in held.items()}
    if held:
        print("held out:", held_x)
    fig: dict[str, Any] = {"model": args.model.name, "dev_collections": len(dev),
                           "default_weight": default_w}
    for k in ("default", "loo", "fit", "best"):
        fig |= {f"{k}_worst_x_bm25": round(min(stats[k]), 3),
                f"{k}_mean_x_bm25": round(float(np.mean(stats[k])), 3)}
    fig |= {"loo_vs_default_worst": round(min(stats["loo_vs_default"]), 3),
            "fit_vs_default_worst": round(min(stats["fit_vs_default"]), 3),
            "mapping": str(mapping)} | {f"{n}_held_out_x_bm25": x for n, x in held_x.items()}
    record("calibration", argv, fig, section=text, results=args.results)
    if args.write:
        path = args.model / RETRIEVAL_FILE
        cfg = json.loads(path.read_text())
        cfg["calibration"] = {
            "mapping": dict(vars(mapping)),
            "fitted_on": sorted(dev), "worst_dev": round(min(stats["fit"]), 4),
            "mean_dev": round(float(np.mean(stats["fit"])), 4),
            "loo_worst": round(min(stats["loo"]), 4),
            "loo_mean": round(float(np.mean(stats["loo"])), 4),
            "command": "python bench/calibration.py --data DATA --write"}
        path.write_text(json.dumps(cfg, indent=2) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
