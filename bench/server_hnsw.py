"""How many links a node (HNSW's ``M``) a Milvus server's index needs for the shipped
encoder's vectors: recall@10 against exact search and the latency of one search, at several
``ef``, for each ``M``, side by side on one server.

Usage: python bench/server_hnsw.py --data ../shared/data [--n 100000] [--m 16,32]
       [--ef 64,128,256] [--model DIR]

N real short texts (``bench/workload.py``) are the documents, the next 200 the queries (not
documents: a query equal to a document finds itself, the easy case). Each ``M`` gets its own
collection on one Milvus 2.3.5 server (``stack``), written through ``MilvusStore`` (its
create path, efConstruction 200), flushed, and searched once the index covers every row and
the collection is loaded again (``MilvusStore.settle``, what a restore into a server does).
Prints a markdown section and records it (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from machine import add_results_arg, record, stamp  # noqa: E402
from workload import milvus_server, real_texts  # noqa: E402

QUERIES = 200


def main() -> None:
    import encoder
    from index import Item, MilvusStore

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--m", default="16,32")
    ap.add_argument("--ef", default="64,128,256")
    ap.add_argument("--model", default="models/encoder-default")
    add_results_arg(ap)
    args = ap.parse_args()
    argv = shlex.join(["python", "bench/server_hnsw.py", *sys.argv[1:]])
    ms, efs = [int(m) for m in args.m.split(",")], [int(e) for e in args.ef.split(",")]
    texts = [t for _, t in real_texts(args.data, args.n + QUERIES)]
    enc = encoder.load(args.model)
    xb = np.asarray(enc.encode(texts[:args.n]), dtype=np.float32)
    xq = np.asarray(enc.encode(texts[args.n:]), dtype=np.float32)
    exact = [set(row) for row in np.argsort(-(xq @ xb.T), axis=1)[:, :10].tolist()]
    work = ROOT / "var/bench/server_hnsw"
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, float]] = []
    with milvus_server(work / f"server-{time.time_ns()}") as (uri, _pid):
        for m in ms:
            store = MilvusStore(uri, timeout=600, hnsw_m=m)
            name = f"hnsw_m{m}"
            store.create(name, xb.shape[1])
            t0 = time.perf_counter()
            for s in range(0, args.n, 5000):
                store.upsert(name, [Item(id=f"d{i:07d}", vector=xb[i], text=texts[i])
                                    for i in range(s, min(args.n, s + 5000))])
            written = time.perf_counter() - t0
            t0 = time.perf_counter()
            assert store.settle(name, timeout=900), f"{name}: not indexed in 900 s"
            indexed = time.perf_counter() - t0
            for ef in efs:
                store.ef = ef
                lat, found = [], []
                for i in range(QUERIES):
                    t = time.perf_counter()
                    hits = store.search(name, xq[i:i + 1], 10, mode="dense",
                                        consistency="Bounded")[0]
                    lat.append(time.perf_counter() - t)
                    found.append(len({int(h.id[1:]) for h in hits} & exact[i]) / 10)
                rows.append({"M": m, "ef": ef, "recall@10": round(float(np.mean(found)), 4),
                             "p50_ms": round(statistics.median(lat) * 1000, 2),
                             "write_s": round(written, 1), "index_s": round(indexed, 1)})
                print(rows[-1], flush=True)
            store.drop(name)
            store.close()
    lines = [f"HNSW's M on a Milvus 2.3.5 server ({stamp()}): {args.n:,} real short texts, "
             f"{QUERIES} held-out queries, recall@10 against exact search, p50 of one "
             "search through `MilvusStore`.", "",
             "| M | ef | recall@10 | p50 ms | write s | until indexed s |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['M']} | {r['ef']} | {r['recall@10']:.4f} | {r['p50_ms']:.2f} | "
              f"{r['write_s']:.1f} | {r['index_s']:.1f} |" for r in rows]
    text = "\n".join(lines)
    print(text)
    figures = {f"recall@10_m{r['M']}_ef{r['ef']}": r["recall@10"] for r in rows}
    figures.update({f"p50_ms_m{r['M']}_ef{r['ef']}": r["p50_ms"] for r in rows})
    figures["docs"] = args.n
    record("server_hnsw", argv, figures, section=text, results=args.results)


if __name__ == "__main__":
    main()
