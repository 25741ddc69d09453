"""Adapting the encoder to a collection, as a user does it: ``qkv serve`` on a fresh Milvus
Lite file, each collection filled over HTTP and calibrated, then ``POST .../adapt`` (its
documents only, no labels) while a client keeps searching it; its queries are scored before
and after, next to bm25s on the same queries.

Usage: python bench/adapt.py --data ../shared/data [--sets cranfield,var/devcoll/jargon:dev]
       [--budget 540] [--force]

For each set (a BEIR folder under ``DATA/beir`` with its test queries, or ``PATH:SPLIT``):
nDCG@10 of dense and (calibrated) hybrid before and after, each × bm25s; the job's phase,
wall time and what its label-free check measured (probe MRR@10 of the base and adapted
encoders and BM25 on held-back documents); searches that failed during the job; and the
adapted encoder's STS-B dev Spearman against the base's (forgetting). Prints a markdown
section and records it with the figures, a row per set (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from api_load import VAR, Server  # noqa: E402
from machine import add_results_arg, record, stamp  # noqa: E402
from search_path import bm25s_run, tuned  # noqa: E402

from index.beir import load_beir, score_run  # noqa: E402


def ndcg(client: httpx.Client, coll: str, queries: dict[str, str],
         qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    out = {}
    for mode in ("dense", "hybrid"):
        run = {}
        for qid, text in queries.items():
            r = client.post(f"/v1/collections/{coll}/search",
                            json={"query": text, "mode": mode, "top_k": 10, "fields": []})
            r.raise_for_status()
            ids = [h["id"] for h in r.json()["hits"]]
            run[qid] = {i: float(len(ids) - k) for k, i in enumerate(ids)}
        out[mode] = score_run(run, qrels)["ndcg@10"]
    return out


def sts(model: Path, data: Path) -> float:
    import encoder
    from encoder.evaluate import evaluate_sts

    path = data / "sts/stsbenchmark/sts-dev.csv"
    return float(evaluate_sts(encoder.load(model), path)["spearman"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sets", default="cranfield,multi30k-captions-val")
    ap.add_argument("--model", default="models/encoder-default")
    ap.add_argument("--budget", type=float, default=540.0,
                    help="the whole job's seconds (qkv adapt --budget)")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--lexical-share", type=float, default=None,
                    help="The BM25-imitation pairs' share of the adaptation's batches "
                    "(default encoder.domain.LEXICAL_SHARE).")
    ap.add_argument("--imitate", choices=("bm25", "hybrid"), default=None,
                    help="What the lexical pairs imitate: BM25's ranking or hybrid search's "
                    "(BM25 fused with the base encoder; default encoder.domain.IMITATE).")
    ap.add_argument("--lr", type=float, default=None,
                    help="The network's peak learning rate (default encoder.domain.LR).")
    ap.add_argument("--batch", type=int, default=None,
                    help="Pairs a training step (default encoder.domain.BATCH; above its "
                    "GRAD_CHUNK, gradient caching).")
    ap.add_argument("--bag-only", action="store_true",
                    help="Adapt the token bag's table alone, the network as it is.")
    add_results_arg(ap)
    args = ap.parse_args()
    db = VAR / "adapt-bench" / "qkv.db"
    shutil.rmtree(db.parent, ignore_errors=True)
    db.parent.mkdir(parents=True)
    rows = []
    base_sts = sts(ROOT / args.model, args.data)
    env = {"QKV_STORE_TIMEOUT_S": "60", "QKV_AUTO_TUNE": "false"}
    knobs = {"BENCH_ADAPT_LEXICAL_SHARE": args.lexical_share, "BENCH_ADAPT_LR": args.lr,
             "BENCH_ADAPT_BATCH": args.batch, "BENCH_ADAPT_IMITATE": args.imitate,
             "BENCH_ADAPT_NETWORK": "0" if args.bag_only else None}
    env.update({k: str(v) for k, v in knobs.items() if v is not None})
    server = Server(str(db), args.model, env,  # the knobs above: bench/adapt_serve.py
                    cmd=[sys.executable, str(ROOT / "bench" / "adapt_serve.py")])
    try:
        with httpx.Client(base_url=server.base, timeout=3600) as client:
            for spec in args.sets.split(","):
                folder, _, split = spec.partition(":")
                path = Path(folder) if split else args.data / "beir" / folder
                corpus, queries, qrels = load_beir(path, split or "test")
                coll = "a_" + path.name.replace("-", "_")
                client.post("/v1/collections", json={"name": coll}).raise_for_status()
                docs = [{"id": i, "text": t} for i, t in corpus.items() if t.strip()]
                for s in range(0, len(docs), 256):
                    client.post(f"/v1/collections/{coll}/documents",
                                json={"documents": docs[s:s + 256]}).raise_for_status()
                tuned(client, coll)
                bm = score_run(bm25s_run(corpus, queries), qrels)["ndcg@10"]
                before = ndcg(client, coll, queries, qrels)
                stop, failed, done = threading.Event(), [0], [0]

                def search(coll: str = coll, stop: threading.Event = stop,
                           failed: list[int] = failed, done: list[int] = done) -> None:
                    with httpx.Client(base_url=server.base, timeout=60) as c:
                        while not stop.is_set():
                            r = c.post(f"/v1/collections/{coll}/search",
                                       json={"query": "the first result", "top_k": 5})
                            done[0] += 1
                            failed[0] += r.status_code != 200
                            time.sleep(0.2)

                t = threading.Thread(target=search)
                t.start()
                t0 = time.perf_counter()
                try:
                    r = client.post(f"/v1/collections/{coll}/adapt",
                                    json={"budget_s": args.budget, "force": args.force,
                                          "wait": True})
                finally:
                    stop.set()
                    t.join()
                seconds = time.perf_counter() - t0
                r.raise_for_status()
                job = r.json()
                after = ndcg(client, coll, queries, qrels) if job["phase"] == "done" else before
                enc_sts = (sts(db.parent / "encoders" / job["encoder"], args.data)
                           if job["phase"] == "done" else None)
                rep = job.get("report") or {}
                rows.append((path.name, len(docs), len(queries), bm, before, after, job["phase"],
                             seconds, rep, failed[0], done[0], enc_sts))
                print(path.name, job["phase"], f"{seconds:.0f} s", "bm25s", round(bm, 4),
                      "before", before, "after", after, "probe", rep.get("probe_base"),
                      rep.get("probe_adapted"), rep.get("probe_bm25"), "steps",
                      rep.get("steps"), f"failed {failed[0]}/{done[0]}", "sts", enc_sts,
                      flush=True)
    finally:
        server.stop()
    argv = shlex.join(["python", "bench/adapt.py", *sys.argv[1:]])
    lines = [f"## Adapting the encoder to a collection ({stamp()})", "", f"`{argv}`", "",
             f"Each × bm25s (nDCG@10). STS-B dev Spearman of the base encoder: {base_sts:.4f}.",
             "", "| set | docs | queries | dense before → after | hybrid before → after | "
             "job | wall | probe MRR base → adapted (BM25) | steps | failed searches | "
             "STS-B dev |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, nd, nq, bm, b, a, phase, secs, rep, f, n, st in rows:
        lines.append(
            f"| {name} | {nd:,} | {nq} | {b['dense'] / bm:.3f} → {a['dense'] / bm:.3f} × | "
            f"{b['hybrid'] / bm:.3f} → {a['hybrid'] / bm:.3f} × | {phase} | {secs:.0f} s | "
            f"{rep.get('probe_base')} → {rep.get('probe_adapted')} ({rep.get('probe_bm25')}) | "
            f"{rep.get('steps')} | {f} of {n} | {st if st is None else round(st, 4)} |")
    section = "\n".join(lines)
    print(section)
    for i, (name, nd, nq, bm, b, a, phase, secs, rep, f, n, st) in enumerate(rows):
        record("adapt", argv, {
            "set": name, "job": phase, "dense_before_x_bm25s": round(b["dense"] / bm, 3),
            "dense_after_x_bm25s": round(a["dense"] / bm, 3),
            "hybrid_before_x_bm25s": round(b["hybrid"] / bm, 3),
            "hybrid_after_x_bm25s": round(a["hybrid"] / bm, 3),
            "probe_mrr10_base": rep.get("probe_base"),
            "probe_mrr10_adapted": rep.get("probe_adapted"),
            "probe_mrr10_bm25": rep.get("probe_bm25"), "steps": rep.get("steps"),
            "wall_s": round(secs), "docs": nd, "queries": nq, "failed_searches": f,
            "searches": n, "sts_b_dev_spearman": st if st is None else round(st, 4),
            "base_sts_b_dev_spearman": round(base_sts, 4)},
            section=section, results=args.results, regenerate=i == len(rows) - 1)


if __name__ == "__main__":
    main()
