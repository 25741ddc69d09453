"""Search as a user meets it: ``qkv serve`` on a fresh Milvus Lite file, collections created
and filled over HTTP, every query searched over HTTP in each mode.

Usage: python bench/search_path.py --data ../shared/data [--sets scifact,cranfield,...]
       [--big 100000] [--batch 256]

For each set (a BEIR folder under ``DATA/beir`` and its test queries, or ``PATH:SPLIT``):
``POST /v1/collections`` (the default: hybrid), the corpus upserted in requests of
``--batch`` documents (ingest docs/s, next to the encoder alone on the same documents in
this process), ``POST .../tune`` (the collection calibrates its hybrid from its own
documents, timed), then each query searched one request at a time in ``dense``, ``bm25``
and ``hybrid`` mode (top 10, default fields; hybrid as a user gets it, with the
collection's calibrated weight), hybrid with the encoder's default weight (the request's
``dense_weight``), and embedded by ``POST /v1/embeddings``. Each query's dense and BM25
lists 100 deep (two more requests) are fused here by :func:`index.hybrid.fusion.fuse` at every
weight of the calibration grid: the best weight in hindsight, what calibration leaves on
the table. Reported: nDCG@10 per mode next to bm25s (same analysis) on the same queries,
the spread of the weight each hybrid answer says its query was fused with
(``query_weight``), and p50/p99 latency per mode next to the p50 of embedding the query. With
``--big N`` the latency columns again on N documents (the ingest benchmark's texts) written
by ``qkv index`` into the same kind of file. Prints a markdown section and records it with
the figures, a row per set (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from api_load import QKV_CMD, VAR, Server  # noqa: E402
from machine import add_results_arg, record, stamp  # noqa: E402

from index.beir import load_beir, score_run  # noqa: E402
from index.hybrid.calibration import GRID  # noqa: E402
from index.hybrid.fusion import fuse  # noqa: E402
from index.store import Hit  # noqa: E402

MODES = ("dense", "bm25", "hybrid")


def bm25s_run(corpus: dict[str, str], queries: dict[str, str]) -> dict[str, dict[str, float]]:
    from encoder.evaluate import bm25_run

    return bm25_run(corpus, queries, k=10)


def encoder_alone(model: str, texts: list[str]) -> float:
    """Docs/s of ``TextEncoder.encode`` on these texts (default batches), in this process."""
    import encoder

    enc = encoder.load(model)
    enc.encode(texts[:64])
    t0 = time.perf_counter()
    enc.encode(texts)
    return len(texts) / (time.perf_counter() - t0)


def timed(client: httpx.Client, url: str, body: dict) -> tuple[float, dict]:  # type: ignore[type-arg]
    t0 = time.perf_counter()
    r = client.post(url, json=body)
    ms = (time.perf_counter() - t0) * 1e3
    r.raise_for_status()
    return ms, r.json()


def search_all(client: httpx.Client, name: str, queries: dict[str, str],
               default_w: float | None = None, hindsight: bool = False,
               served: list[float] | None = None,
               ) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, list[float]]]:
    """Per mode the run (query → doc → score) and the latencies; also ``embed``. With
    ``default_w``, also ``hybrid-default`` (hybrid at that weight); with ``hindsight``, a
    run ``w{w}`` per grid weight, fused here from 100-deep dense and BM25 lists. Each
    hybrid answer's ``query_weight`` (the weight that query was fused with) is appended to
    ``served`` when given."""
    runs: dict[str, dict[str, dict[str, float]]] = {}
    ms: dict[str, list[float]] = {m: [] for m in (*MODES, "embed")}
    url = f"/v1/collections/{name}/search"

    def add(method: str, qid: str, ids: list[str]) -> None:
        runs.setdefault(method, {})[qid] = {i: float(len(ids) - r) for r, i in enumerate(ids)}

    for qid, text in queries.items():
        t, _ = timed(client, "/v1/embeddings", {"input": text})
        ms["embed"].append(t)
        for mode in MODES:
            t, body = timed(client, url, {"query": text, "mode": mode, "top_k": 10})
            ms[mode].append(t)
            add(mode, qid, [h["id"] for h in body["hits"]])
            if mode == "hybrid" and served is not None and "query_weight" in body:
                served.append(body["query_weight"])
        if default_w is not None:
            _, body = timed(client, url, {"query": text, "mode": "hybrid", "top_k": 10,
                                          "dense_weight": default_w})
            add("hybrid-default", qid, [h["id"] for h in body["hits"]])
        if hindsight:
            sides = [[Hit(h["id"], h["score"], "", None, {}) for h in timed(
                client, url, {"query": text, "mode": m, "top_k": 100, "fields": []})[1]["hits"]]
                for m in ("dense", "bm25")]
            for w in GRID:
                add(f"w{w}", qid, [h.id for h in fuse(sides[0], sides[1], 10, "convex", w)])
    return runs, ms


def tuned(client: httpx.Client, name: str) -> dict:  # type: ignore[type-arg]
    """The collection's calibration from its documents, tuned now (after any tune the
    server started by itself while it was filled)."""
    url = f"/v1/collections/{name}/tune"
    while client.get(url).json().get("state") in ("queued", "running"):
        time.sleep(0.5)
    r = client.post(url, json={"wait": True})
    r.raise_for_status()
    return r.json()["calibration"]  # type: ignore[no-any-return]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sets", default="scifact,cranfield,multi30k-captions-val")
    ap.add_argument("--model", default="models/encoder-default")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--big", type=int, default=0, help="Also time searches on N documents.")
    ap.add_argument("--big-queries", type=int, default=200)
    add_results_arg(ap)
    args = ap.parse_args()
    db = VAR / "search-path" / "qkv.db"
    shutil.rmtree(db.parent, ignore_errors=True)
    db.parent.mkdir(parents=True)
    rows, lat_rows, all_queries = [], [], {}
    server = Server(str(db), args.model, {"QKV_STORE_TIMEOUT_S": "60"})
    try:
        with httpx.Client(base_url=server.base, timeout=120) as client:
            for spec in args.sets.split(","):
                folder, _, split = spec.partition(":")
                path = Path(folder) if split else args.data / "beir" / folder
                name = path.name
                corpus, queries, qrels = load_beir(path, split or "test")
                all_queries.update(queries)
                coll = "c_" + name.replace("-", "_")
                r = client.post("/v1/collections", json={"name": coll})
                r.raise_for_status()
                assert r.json()["hybrid"], r.text
                # the API refuses an empty text (422), as it should: a user leaves them out
                docs = [{"id": i, "text": t} for i, t in corpus.items() if t.strip()]
                t0 = time.perf_counter()
                for s in range(0, len(docs), args.batch):
                    client.post(f"/v1/collections/{coll}/documents",
                                json={"documents": docs[s:s + args.batch]}).raise_for_status()
                ingest = len(docs) / (time.perf_counter() - t0)
                time.sleep(1.5)  # what a user does between writing and searching, at least
                cal = tuned(client, coll)
                default_w = client.get("/v1/models").json()["data"][0]["dense_weight"]
                served: list[float] = []
                runs, ms = search_all(client, coll, queries, default_w, hindsight=True,
                                      served=served)
                nd = {m: score_run(run, qrels)["ndcg@10"] for m, run in runs.items()}
                nd["bm25s"] = score_run(bm25s_run(corpus, queries), qrels)["ndcg@10"]
                best = max(GRID, key=lambda w: nd[f"w{w}"])
                alone = encoder_alone(args.model, [d["text"] for d in docs])
                rows.append((name, len(docs), len(queries), nd, ingest, alone,
                             (cal["dense_weight"], default_w, best, cal["seconds"],
                              tuple(round(pct(served, q), 2) for q in (10, 50, 90)))))
                lat_rows.append((name, len(docs), ms))
                print(name, {m: nd[m] for m in (*MODES, "hybrid-default", "bm25s")},
                      f"w {cal['dense_weight']} ({cal['source']}, {cal['seconds']} s), "
                      f"best {best} → {nd[f'w{best}']}",
                      f"ingest {ingest:.0f}/s, encoder alone {alone:.0f}/s",
                      {m: round(pct(v, 50), 1) for m, v in ms.items()}, flush=True)
    finally:
        server.stop()
    if args.big:
        sys.path.insert(0, str(ROOT / "bench"))
        from ingest import write_docs

        docs_path = write_docs(args.data, args.big)
        state = VAR / "search-path" / "jobs"
        t0 = time.perf_counter()
        subprocess.run([*QKV_CMD, "index", "--collection", "big", "--input", str(docs_path),
                        "--store", str(db), "--model", args.model, "--state-dir", str(state),
                        "--no-progress", "--timeout", "60"], cwd=ROOT, check=True)
        index_s = time.perf_counter() - t0
        server = Server(str(db), args.model, {"QKV_STORE_TIMEOUT_S": "60"})
        try:
            with httpx.Client(base_url=server.base, timeout=120) as client:
                qs = dict(list(all_queries.items())[: args.big_queries])
                _, ms = search_all(client, "big", qs)
        finally:
            server.stop()
        lat_rows.append((f"{args.big:,} docs (qkv index, {index_s:.0f} s)", args.big, ms))
    argv = shlex.join(["python", "bench/search_path.py", *sys.argv[1:]])
    lines = [f"\n## Search on the user's path: HTTP, Milvus Lite, hybrid by default "
             f"({time.strftime('%Y-%m-%d')})", "", f"`{argv}` ({stamp()})", "",
             "nDCG@10 over HTTP (test queries), next to bm25s with the same analysis; hybrid "
             "with the encoder's default weight, self-calibrated (`POST .../tune`, no labels: "
             "what a user gets) and at the best weight in hindsight:", "",
             "| set | docs | queries | dense | bm25 | hybrid, default w | hybrid, calibrated "
             "(w) | best w in hindsight | bm25s | × bm25s: default / calibrated / best | "
             "calibration s (per 1,000 docs) | ingest docs/s (API) | ingest × encoder | "
             "query_weight served (10th / 50th / 90th) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, n, nq, nd, ingest, alone, (w, dw, best, secs, wq) in rows:
        b = nd["bm25s"]
        lines.append(f"| {name} | {n} | {nq} | {nd['dense']:.3f} | {nd['bm25']:.3f} | "
                     f"{nd['hybrid-default']:.3f} (w {dw}) | {nd['hybrid']:.3f} (w {w}) | "
                     f"{nd[f'w{best}']:.3f} (w {best}) | {b:.3f} | "
                     f"{nd['hybrid-default'] / b:.3f} / {nd['hybrid'] / b:.3f} / "
                     f"{nd[f'w{best}'] / b:.3f} | {secs:.1f} ({1000 * secs / n:.1f}) | "
                     f"{ingest:.0f} | {ingest / alone:.2f}× | "
                     f"{wq[0]:.2f} / {wq[1]:.2f} / {wq[2]:.2f} |")
    if rows:
        means = [np.mean([r[3][m] / r[3]["bm25s"] for r in rows])
                 for m in ("hybrid-default", "hybrid")]
        hind = np.mean([r[3][f"w{r[6][2]}"] / r[3]["bm25s"] for r in rows])
        worst = min(r[3]["hybrid"] / r[3]["bm25s"] for r in rows)
        lines.append(f"| mean | | | | | | | | | {means[0]:.3f} / {means[1]:.3f} / {hind:.3f} "
                     f"(calibrated worst {worst:.3f}) | | | |")
    lines += ["", "Latency of one request (ms), p50 / p99, and × the p50 of embedding the "
              "query (`POST /v1/embeddings`):", "",
              "| collection | embed p50 | dense | bm25 | hybrid | dense × embed | "
              "hybrid × embed |", "|---|---|---|---|---|---|---|"]
    for name, _, ms in lat_rows:
        e = pct(ms["embed"], 50)
        cells = [f"{pct(ms[m], 50):.1f} / {pct(ms[m], 99):.1f}" for m in MODES]
        lines.append(f"| {name} | {e:.1f} | " + " | ".join(cells) +
                     f" | {pct(ms['dense'], 50) / e:.1f}× | {pct(ms['hybrid'], 50) / e:.1f}× |")
    text = "\n".join(lines) + "\n"
    print(text)
    figs = figures(rows, lat_rows)
    for i, fig in enumerate(figs):
        record("search_path", argv, fig, section=text, results=args.results,
               regenerate=i == len(figs) - 1)


def figures(rows: list, lat_rows: list) -> list[dict[str, object]]:
    """A row per set (and one for ``--big``, and the means), rounded as printed."""
    out: list[dict[str, object]] = []
    for (name, n, nq, nd, ingest, alone, (w, dw, best, secs, wq)), (_, _, ms) in zip(
            rows, lat_rows, strict=False):
        b = nd["bm25s"]
        out.append({
            "set": name, "hybrid_calibrated_x_bm25s": round(nd["hybrid"] / b, 3),
            "hybrid_default_x_bm25s": round(nd["hybrid-default"] / b, 3),
            "hybrid_best_x_bm25s": round(nd[f"w{best}"] / b, 3),
            "dense_ndcg10": round(nd["dense"], 3), "bm25_ndcg10": round(nd["bm25"], 3),
            "hybrid_default_ndcg10": round(nd["hybrid-default"], 3), "default_w": dw,
            "hybrid_calibrated_ndcg10": round(nd["hybrid"], 3), "calibrated_w": w,
            "hybrid_best_ndcg10": round(nd[f"w{best}"], 3), "best_w": best,
            "bm25s_ndcg10": round(b, 3), "docs": n, "queries": nq,
            "calibration_s": round(secs, 1), "ingest_docs_per_s": round(ingest),
            "ingest_x_encoder": round(ingest / alone, 2), "query_weight_p10_p50_p90": list(wq),
            **latency(ms)})
    for name, n, ms in lat_rows[len(rows):]:  # --big
        out.append({"set": name, "docs": n, **latency(ms)})
    if rows:
        means = [float(np.mean([r[3][m] / r[3]["bm25s"] for r in rows]))
                 for m in ("hybrid-default", "hybrid")]
        hind = float(np.mean([r[3][f"w{r[6][2]}"] / r[3]["bm25s"] for r in rows]))
        out.append({"set": "mean", "hybrid_calibrated_x_bm25s": round(means[1], 3),
                    "hybrid_default_x_bm25s": round(means[0], 3),
                    "hybrid_best_x_bm25s": round(hind, 3), "calibrated_worst_x_bm25s": round(
                        min(r[3]["hybrid"] / r[3]["bm25s"] for r in rows), 3)})
    return out


def latency(ms: dict[str, list[float]]) -> dict[str, float]:
    e = pct(ms["embed"], 50)
    out = {"embed_p50_ms": round(e, 1)}
    for m in MODES:
        out |= {f"{m}_p50_ms": round(pct(ms[m], 50), 1), f"{m}_p99_ms": round(pct(ms[m], 99), 1)}
    return out | {"dense_p50_x_embed": round(pct(ms["dense"], 50) / e, 1),
                  "hybrid_p50_x_embed": round(pct(ms["hybrid"], 50) / e, 1)}


if __name__ == "__main__":
    main()
