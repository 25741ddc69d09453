"""Long documents through the API: collections with passages (the default) against one row a
document, on long-document sets made from dev data, judged by document.

Usage: python bench/long_documents.py --data ../shared/data
       [--sets scifact-dev,medquad-dev,wikiqa,manpages] [--docs 200] [--join 10]
       [--sizes 200] [--overlap 32] [--queries 150]

Each set is a dev retrieval set (``encoder.devsets``, ``bench/devcollections.py``) whose
passages are joined ``--join`` at a time, separated by blank lines, into long documents
(each judged passage in one of them, the rest filled with other passages of the set, in a
random order): a query is relevant to the document holding its relevant passage. Up to
``--docs`` documents, ``--queries`` judged queries. Each set is written over HTTP (the app
in process on a Milvus Lite file, 8 documents a request) into a hybrid collection with
``chunking: false`` (one row a document, cut at the encoder's 256 tokens) and one with
passages of each ``--sizes`` tokens; then every query is searched in dense, bm25 and
hybrid mode. Prints nDCG@10 ÷ the one-row collection's BM25 (BM25 of whole documents),
ingest (documents/s, passages a document, and passages/s against the encoder alone on the
same passages), and p50 latency of dense and hybrid searches against embedding the query
(``POST /v1/embeddings``), side by side in one run; records it (``bench/machine.py``). The
latencies are timed once the store settled: a first, separately reported dense pass runs
right after the writes, while the store seals and indexes them.
"""

from __future__ import annotations

import argparse
import random
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from machine import add_results_arg, record, stamp  # noqa: E402

VAR = ROOT / "var" / "bench" / "long-documents"
DEV = ("scifact-dev", "medquad-dev")
MODES = ("dense", "bm25", "hybrid")


def folder_of(data: Path, name: str) -> Path:
    from devcollections import write_dev_collections

    from encoder.devsets import write_dev_sets

    if name in DEV:
        if not (VAR / "sets" / name).is_dir():
            write_dev_sets(data, VAR / "sets")
        return VAR / "sets" / name
    return write_dev_collections(data, VAR / "sets", [name])[name]


def joined(folder: Path, docs: int, join: int, queries: int, seed: int = 0
           ) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """(long document id → text, query id → text, qrels by long document)."""
    from index.beir import load_beir

    corpus, qs, qrels = load_beir(folder, "dev")
    rng = random.Random(seed)
    picked = sorted(qrels)
    rng.shuffle(picked)
    picked = picked[:queries]
    judged = list(dict.fromkeys(d for q in picked for d in qrels[q] if d in corpus))
    judged = judged[:docs]  # at most one judged passage a document
    others = [d for d in corpus if d not in set(judged)]
    rng.shuffle(others)
    need = docs * join - len(judged)
    pool = judged + others[:max(0, need)]
    rng.shuffle(pool)
    n_docs = len(pool) // join
    where: dict[str, str] = {}
    texts: dict[str, str] = {}
    for g in range(n_docs):
        members = pool[g * join:(g + 1) * join]
        did = f"doc{g:05d}"
        texts[did] = "\n\n".join(corpus[m] for m in members)
        for m in members:
            where[m] = did
    out_q, out_rel = {}, {}
    for q in picked:
        rel = {where[d]: 1 for d in qrels[q] if d in where}
        if rel:
            out_q[q], out_rel[q] = qs[q], rel
    return texts, out_q, out_rel


def run_set(client: Any, name: str, texts: dict[str, str], queries: dict[str, str],
            qrels: dict[str, dict[str, int]], configs: list[tuple[str, dict[str, Any]]]
            ) -> dict[str, Any]:
    from index.beir import score_run

    out: dict[str, Any] = {"docs": len(texts), "queries": len(queries),
                           "words_per_doc": round(statistics.mean(len(t.split())
                                                                  for t in texts.values()))}
    ids = sorted(texts)
    for label, body in configs:
        coll = f"ld_{name.replace('-', '_')}_{label}"
        client.delete(f"/v1/collections/{coll}")
        r = client.post("/v1/collections", json={"name": coll, "hybrid": True, **body})
        assert r.status_code == 201, r.text
        t0 = time.perf_counter()
        for a in range(0, len(ids), 8):
            docs = [{"id": i, "text": texts[i]} for i in ids[a:a + 8]]
            r = client.post(f"/v1/collections/{coll}/documents", json={"documents": docs})
            assert r.status_code == 200, r.text
        ingest_s = time.perf_counter() - t0
        fig: dict[str, Any] = {"ingest_docs_per_s": round(len(ids) / ingest_s, 2)}

        def timed(mode: str, coll: str = coll
                  ) -> tuple[dict[str, dict[str, float]], list[float]]:
            run: dict[str, dict[str, float]] = {}
            lat = []
            for qid, q in queries.items():
                t = time.perf_counter()
                r = client.post(f"/v1/collections/{coll}/search",
                                json={"query": q, "top_k": 10, "mode": mode,
                                      "fields": []})
                lat.append(time.perf_counter() - t)
                assert r.status_code == 200, r.text
                run[qid] = {h["id"]: float(h["score"]) for h in r.json()["hits"]}
            return run, lat

        # The first pass runs while the store seals and indexes what was just written (a
        # second of quiet, then Lite's background index build): kept apart as
        # ``first_pass_p50_ms``; the latencies are the second pass's, settled.
        first = statistics.median(timed(MODES[0])[1])
        fig["first_pass_p50_ms"] = round(1e3 * first, 2)
        for mode in MODES:
            run, lat = timed(mode)
            fig[mode] = score_run(run, qrels)["ndcg@10"]
            fig[f"{mode}_p50_ms"] = round(1e3 * statistics.median(lat), 2)
            if body.get("chunking", True) and mode != "bm25":
                fig.update(aggregations(client, coll, mode, queries, qrels))
        lat = []
        for q in queries.values():
            t = time.perf_counter()
            r = client.post("/v1/embeddings", json={"input": q})
            lat.append(time.perf_counter() - t)
        fig["embed_p50_ms"] = round(1e3 * statistics.median(lat), 2)
        out[label] = fig
        client.delete(f"/v1/collections/{coll}")
    return out


AGGREGATIONS = {  # a document's score from its passages' scores, best first
    "max": lambda s: s[0],
    "max+0.1*2nd": lambda s: s[0] + 0.1 * (s[1] if len(s) > 1 else 0.0),
    "mean_top2": lambda s: sum(s[:2]) / 2 if len(s) > 1 else s[0] / 2,
}


def aggregations(client: Any, coll: str, mode: str, queries: dict[str, str],
                 qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """nDCG@10 of other ways to score a document from its passages (the service takes the
    best one's: ``max``), from the top 100 passages (``group_by_document: false``)."""
    from index.beir import score_run

    runs: dict[str, dict[str, dict[str, float]]] = {k: {} for k in AGGREGATIONS}
    for qid, q in queries.items():
        r = client.post(f"/v1/collections/{coll}/search",
                        json={"query": q, "top_k": 100, "mode": mode, "fields": [],
                              "group_by_document": False})
        assert r.status_code == 200, r.text
        per: dict[str, list[float]] = {}
        for h in r.json()["hits"]:
            per.setdefault(h["id"], []).append(float(h["score"]))
        for name, agg in AGGREGATIONS.items():
            runs[name][qid] = {d: agg(s) for d, s in per.items()}
    return {f"{mode}_agg_{name}": score_run(run, qrels)["ndcg@10"]
            for name, run in runs.items()}


def flat_rows(results: dict[str, Any], configs: list[str]) -> list[dict[str, Any]]:
    """A row a set and configuration: its nDCG@10 ÷ the set's BM25 of whole documents by
    mode first, then the rest of its figures."""
    rows = []
    for n, r in results.items():
        base = r["one_row"]["bm25"]
        for c in configs:
            f = r[c]
            row: dict[str, Any] = {"set": n, "config": c}
            row.update({f"{m}_x_bm25": round(f[m] / base, 3) if base else None
                        for m in MODES})
            row.update({k: v for k, v in f.items() if k not in MODES})
            row.update({"docs": r["docs"], "queries": r["queries"],
                        "words_per_doc": r["words_per_doc"]})
            rows.append(row)
    return rows


def encoder_rate(svc: Any, texts: dict[str, str], size: int, overlap: int,
                 pack: int | None) -> dict[str, float]:
    """Passages a document, and the encoder's own passages/s on them (no store, no HTTP):
    all of them in one call on every core, as ``encoder.encode`` runs them offline. (The
    service runs each of its batches on one core, a batch a core: its encoder's calls are
    set to one thread, which until 2026-11-29 this baseline ran on too.)"""
    from index.passages import Settings, split, token_counter

    enc = svc.collections.encoders.default.encoder
    count = token_counter(enc.tokenizer)
    s = Settings.sized(size, overlap, pack)
    parts = [p.embed for t in texts.values() for p in split(t, s, count)]
    served_threads = enc._call_threads
    enc.set_call_threads(None)  # every core (torch's thread count)
    try:
        enc.encode(parts[:8], batch_size=64)  # its session for that many threads, built
        t0 = time.perf_counter()
        enc.encode(parts, batch_size=64)
        seconds = time.perf_counter() - t0
    finally:
        enc.set_call_threads(served_threads)
    return {"passages_per_doc": round(len(parts) / len(texts), 2),
            "encoder_passages_per_s": round(len(parts) / seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="../shared/data")
    ap.add_argument("--sets", default="scifact-dev,medquad-dev,wikiqa,manpages")
    ap.add_argument("--docs", type=int, default=200, help="long documents a set")
    ap.add_argument("--join", type=int, default=10, help="passages joined into a document")
    ap.add_argument("--queries", type=int, default=150, help="judged queries a set")
    ap.add_argument("--sizes", default="200", help="passage sizes (tokens) to compare")
    ap.add_argument("--overlap", type=int, default=32)
    ap.add_argument("--packs", default="", help="passage packings (tokens) to compare at the "
                    "last size, besides the default")
    add_results_arg(ap)
    args = ap.parse_args()
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.settings import Settings as ApiSettings

    sizes = [int(x) for x in args.sizes.split(",") if x]
    configs: list[tuple[str, dict[str, Any]]] = [("one_row", {"chunking": False})]
    configs += [(f"p{s}", {"passage_tokens": s, "passage_overlap": args.overlap})
                for s in sizes]
    configs += [(f"p{sizes[-1]}k{k}", {"passage_tokens": sizes[-1], "passage_overlap":
                                       args.overlap, "passage_pack": int(k)})
                for k in args.packs.split(",") if k]
    db = VAR / "store.db"
    shutil.rmtree(db, ignore_errors=True)
    db.parent.mkdir(parents=True, exist_ok=True)
    app = create_app(ApiSettings(store=str(db), model=ROOT / "models/encoder-default"))
    results: dict[str, Any] = {}
    with TestClient(app) as client:
        svc = app.state.service
        for name in [n for n in args.sets.split(",") if n]:
            texts, queries, qrels = joined(folder_of(args.data, name), args.docs, args.join,
                                           args.queries)
            res = run_set(client, name, texts, queries, qrels, configs)
            for label, body in configs[1:]:
                res[label].update(encoder_rate(svc, texts, body["passage_tokens"],
                                               args.overlap, body.get("passage_pack")))
                f = res[label]
                f["ingest_vs_encoder"] = round(f["ingest_docs_per_s"] * f["passages_per_doc"]
                                               / f["encoder_passages_per_s"], 3)
            results[name] = res
            print(name, res, flush=True)
    base = {n: r["one_row"]["bm25"] for n, r in results.items()}
    lines = [f"Long documents ({args.join} dev passages joined, judged by document; "
             f"{stamp()}): nDCG@10 ÷ BM25 of whole documents", "",
             "| set | BM25 | " + " | ".join(f"{c} {m}" for c, _ in configs for m in MODES)
             + " |", "|---|---|" + "---|" * (len(configs) * len(MODES))]
    ratios: dict[str, dict[str, float]] = {}
    for n, r in results.items():
        cells = []
        for c, _ in configs:
            for m in MODES:
                x = r[c][m] / base[n] if base[n] else 0.0
                ratios.setdefault(f"{c}_{m}", {})[n] = round(x, 3)
                cells.append(f"{x:.2f}")
        lines.append(f"| {n} | {base[n]:.3f} | " + " | ".join(cells) + " |")
    means = {k: round(statistics.mean(v.values()), 3) for k, v in ratios.items()}
    lines.append("| mean | | " + " | ".join(f"{means[f'{c}_{m}']:.2f}" for c, _ in configs
                                            for m in MODES) + " |")
    lines += ["", "| set | config | docs/s | passages/doc | ingest ÷ encoder | dense p50 ms | "
              "hybrid p50 ms | embed p50 ms | dense p50 ms right after the writes |",
              "|---|---|---|---|---|---|---|---|---|"]
    for n, r in results.items():
        for c, _ in configs:
            f = r[c]
            lines.append(f"| {n} | {c} | {f['ingest_docs_per_s']} | "
                         f"{f.get('passages_per_doc', 1)} | {f.get('ingest_vs_encoder', '')} | "
                         f"{f['dense_p50_ms']} | {f['hybrid_p50_ms']} | {f['embed_p50_ms']} | "
                         f"{f['first_pass_p50_ms']} |")
    aggs = [k for k in next(iter(results.values()))[configs[-1][0]] if "_agg_" in k]
    lines += ["", f"Scoring a document from its passages ({configs[-1][0]}, top 100 passages; "
              "the service: max), nDCG@10 ÷ BM25 of whole documents:", "",
              "| set | " + " | ".join(aggs) + " |", "|---|" + "---|" * len(aggs)]
    for n, r in results.items():
        f = r[configs[-1][0]]
        lines.append(f"| {n} | " + " | ".join(f"{f[a] / base[n]:.3f}" for a in aggs) + " |")
    text = "\n".join(lines)
    print(text)
    cmd = "python bench/long_documents.py " + shlex.join(sys.argv[1:])
    for i, row in enumerate(flat_rows(results, [c for c, _ in configs])):
        record("long_documents", cmd, row, section=text, results=args.results,
               regenerate=i == len(results) * len(configs) - 1)


if __name__ == "__main__":
    main()
