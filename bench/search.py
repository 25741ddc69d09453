"""Search benchmark: latency, throughput and recall@10 of MilvusStore on the Milvus 2.3.5
server and on Milvus Lite, over vectors the shipped encoder makes from real text.

Usage: python bench/search.py --data ../shared/data [--n 500000] [--queries 1000]
       [--model DIR] [--ef 64,128,256]

Encodes N + Q real texts (``bench/workload.py``): the first N are the base, the last Q
held-out texts are the queries. Vectors are cached under var/bench/ (per encoder
fingerprint, in chunks) so reruns skip encoding. Each store gets the N items through
``MilvusStore.upsert``, is flushed and waits for its index builds, then is measured at each
search ``ef``: single-query p50/p99 latency (Bounded consistency), batch-100 queries/s, and
recall@10 against exact FAISS (IndexFlatIP) for the same queries. Prints a markdown
section and records it with the figures, a row per store and ef (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from machine import add_results_arg, record
from workload import (
    CHUNK,
    ROOT,
    chunk_file,
    milvus_server,
    real_texts,
    vector_cache,
)

if TYPE_CHECKING:
    from index import EncoderInfo, MilvusStore

VAR = ROOT / "var/bench"
K = 10
COLLECTION = "bench_search"


def encode_child(data: Path, n: int, queries: int, model: str) -> None:
    """Encode the base and query texts into the cache; print the cache dir and encoder."""
    import encoder

    enc = encoder.load(model)
    cache = vector_cache(enc.fingerprint)
    texts = [t for _, t in real_texts(data, n + queries)]
    total = len(texts)
    todo = [s for s in range(0, total, CHUNK) if not chunk_file(cache, s, total).exists()]
    t0, done = time.perf_counter(), 0
    for start in todo:  # length-sorted batches inside each chunk (TextEncoder.encode)
        x = enc.encode(texts[start : start + CHUNK], batch_size=256)
        np.save(chunk_file(cache, start, total), x)
        done += len(x)
        print(f"encoded {start + len(x)}/{len(texts)} ({done / (time.perf_counter() - t0):.0f}"
              " texts/s)", file=sys.stderr, flush=True)
    meta = {"cache": str(cache), "encoder": {"name": enc.name, "fingerprint": enc.fingerprint,
                                             "dim": enc.dim}, "encoded": done}
    if done:
        meta["texts_s"] = done / (time.perf_counter() - t0)
    print(json.dumps(meta))


def split(total: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the held-out queries (evenly spaced, so every source is asked about;
    in random order) and of the base (all the others) in the list of ``total`` texts."""
    qpos = ((np.arange(queries) + 0.5) * total / queries).astype(np.int64)
    return np.setdiff1d(np.arange(total), qpos), np.random.default_rng(0).permutation(qpos)


def vectors(data: Path, n: int, queries: int, model: str) -> tuple[np.ndarray, dict[str, Any]]:
    cmd = [sys.executable, __file__, "--child", "--data", str(data), "--n", str(n),
           "--queries", str(queries), "--model", model]
    out = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    meta = json.loads(out.strip().splitlines()[-1])
    cache = Path(meta["cache"])
    total = n + queries
    x = np.concatenate([np.load(chunk_file(cache, s, total)) for s in range(0, total, CHUNK)])
    return x[: n + queries], meta


def load(store: MilvusStore, base: np.ndarray, x: np.ndarray, items: list[tuple[str, str]],
         info: EncoderInfo) -> float:
    """Create the collection and upsert the base (id = position in the list) in batches;
    returns seconds."""
    from index import Item

    store.drop(COLLECTION)
    store.create(COLLECTION, x.shape[1], info)
    t0 = time.perf_counter()
    for s in range(0, len(base), 5000):
        batch = [Item(f"t{i:07d}", x[i], items[i][1], None, {"source": items[i][0]})
                 for i in base[s : s + 5000].tolist()]
        store.upsert(COLLECTION, batch, info)
    return time.perf_counter() - t0


def wait_indexed(uri: str, n: int, lite: bool, timeout: float = 1800) -> float:
    """Flush, then wait until the index covers all ``n`` rows; returns seconds waited."""
    from pymilvus import MilvusClient

    token = ""
    if lite:  # this process's Lite port takes its own token only
        from index.milvus.lite.private import TOKEN as token
    client = MilvusClient(uri=uri, token=token, timeout=600)
    t0 = time.perf_counter()
    client.flush(COLLECTION, timeout=600)
    if lite:  # Lite builds segment indexes in a background thread; load() builds them now
        client.release_collection(COLLECTION)
        client.load_collection(COLLECTION, timeout=timeout)
    else:
        name = client.list_indexes(COLLECTION)[0]
        while time.perf_counter() - t0 < timeout:
            d = client.describe_index(COLLECTION, name)
            indexed = int(d.get("indexed_rows", 0))  # segments under 1024 rows stay unindexed
            if int(d.get("pending_index_rows", 0)) == 0 and (
                    indexed >= n or (d.get("state") == "Finished" and indexed >= 0.99 * n)):
                print(f"index: {d}", flush=True)
                break
            time.sleep(2)
        else:
            raise SystemExit(f"index not built after {timeout} s: {d}")
        time.sleep(5)  # let the query node take the indexed segments over
    client.close()
    return time.perf_counter() - t0


def measure(store: MilvusStore, xq: np.ndarray, I_exact: np.ndarray,
            budget_s: float) -> dict[str, float]:
    """Single-query latency, batch-100 queries/s and recall@K over the queries, each of the
    two loops stopping early once it has run ``budget_s`` (the queries are in random order,
    so a prefix is a fair sample; how many were run is reported)."""
    for i in range(min(10, len(xq))):  # warm-up
        store.search(COLLECTION, xq[i : i + 1], K, consistency="Bounded")
    lat, found = [], []
    end = time.perf_counter() + budget_s
    for i in range(len(xq)):
        t0 = time.perf_counter()
        hits = store.search(COLLECTION, xq[i : i + 1], K, consistency="Bounded")[0]
        lat.append(time.perf_counter() - t0)
        found.append({int(h.id[1:]) for h in hits})
        if t0 > end:
            break
    t0, done = time.perf_counter(), 0
    for s in range(0, len(xq), 100):
        done += len(store.search(COLLECTION, xq[s : s + 100], K, consistency="Bounded"))
        if time.perf_counter() - t0 > budget_s:
            break
    qps = done / (time.perf_counter() - t0)
    recall = np.mean([len(f & set(I_exact[i].tolist())) / K for i, f in enumerate(found)])
    ms = np.array(lat) * 1000
    return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)),
            "qps": qps, "recall": float(recall), "singles": len(lat), "batched": done}


def bench_store(uri: str, lite: bool, base: np.ndarray, x: np.ndarray, xq: np.ndarray,
                I_exact: np.ndarray, items: list[tuple[str, str]], info: EncoderInfo,
                efs: list[int], budget_s: float) -> dict[Any, Any]:
    from index import MilvusStore

    n = len(base)
    store = MilvusStore(uri, timeout=600)
    res: dict[Any, Any] = {"load_s": load(store, base, x, items, info)}
    print(f"{uri}: loaded {n} in {res['load_s']:.0f} s", flush=True)
    res["index_s"] = wait_indexed(uri, n, lite)
    print(f"{uri}: indexed after {res['index_s']:.0f} s more", flush=True)
    store.close()
    for ef in efs:
        store = MilvusStore(uri, timeout=60, ef=ef)
        res[ef] = measure(store, xq, I_exact, budget_s)
        print(f"{uri} ef={ef}: {res[ef]}", flush=True)
        store.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--n", type=int, default=500_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--model", default="models/encoder-default")
    ap.add_argument("--ef", default="64,128,256", help="search ef values (server)")
    ap.add_argument("--lite-ef", default="128", help="search ef values (Milvus Lite)")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="seconds at most per latency or throughput loop")
    add_results_arg(ap)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return encode_child(args.data, args.n, args.queries, args.model)
    argv = shlex.join(["python", "bench/search.py", *sys.argv[1:]])
    efs = [int(e) for e in args.ef.split(",")]
    lite_efs = [int(e) for e in args.lite_ef.split(",")]
    import faiss

    from index import EncoderInfo

    x, meta = vectors(args.data, args.n, args.queries, args.model)
    items = real_texts(args.data, args.n + args.queries)
    base, qpos = split(len(x), args.queries)
    xq = x[qpos]
    info = EncoderInfo.from_dict(meta["encoder"])
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x[base])
    _, I = index.search(xq, K)
    I_exact = base[I]  # positions in the list, as the stores' ids
    del index
    results = {}
    server_dir = VAR / "milvus-2.3.5-search"
    shutil.rmtree(server_dir, ignore_errors=True)
    with milvus_server(server_dir) as (uri, _):
        results["Milvus 2.3.5 server"] = bench_store(uri, False, base, x, xq, I_exact,
                                                     items, info, efs, args.budget)
    shutil.rmtree(server_dir, ignore_errors=True)
    lite = VAR / "search-lite.db"
    shutil.rmtree(lite, ignore_errors=True)
    results["Milvus Lite file"] = bench_store(str(lite), True, base, x, xq, I_exact, items,
                                              info, lite_efs, args.budget)
    section = report(args, argv, meta, results)
    print(section)
    rows = [{"store": name, "ef": ef, "p50_ms": round(res[ef]["p50"], 1),
             "p99_ms": round(res[ef]["p99"], 1), "batch100_queries_per_s": round(res[ef]["qps"]),
             "recall_at_10": round(res[ef]["recall"], 3),
             "queries_run_single": res[ef]["singles"], "queries_run_batched": res[ef]["batched"],
             "load_rows_per_s": round(args.n / res["load_s"]),
             "index_ready_s": round(res["index_s"]), "vectors": args.n,
             "queries": args.queries}
            for name, res in results.items() for ef in res if isinstance(ef, int)]
    for i, row in enumerate(rows):
        record("search", argv, row, section=section, results=args.results,
               regenerate=i == len(rows) - 1)


def report(args: argparse.Namespace, argv: str, meta: dict[str, Any],
           results: dict[str, Any]) -> str:
    enc = meta["encoder"]
    lines = [f"## Search ({time.strftime('%Y-%m-%d')}, {args.n:,} vectors, {args.queries} "
             f"held-out queries, {enc['name']} {enc['fingerprint']} dim {enc['dim']}, "
             f"{os.cpu_count()} CPU threads)", "", f"Command: `{argv}`", "",
             "Base and queries: real texts from the data dir (Reuters sentences, WordNet "
             "glosses and examples, Python-docs sentences, GCIDE definitions), the queries "
             "evenly spaced through the list and left out of the base; encoded by the encoder "
             f"above ({meta['encoded']:,} this run" + (f" at {meta['texts_s']:.0f} texts/s"
                                                       if meta["encoded"] else "") +
             f", {args.n + args.queries - meta['encoded']:,} from the vector cache). HNSW M=16, "
             "efConstruction=200 (MilvusStore defaults); single queries and batches through "
             "`MilvusStore.search` (k=10, Bounded consistency, id/text/value/metadata "
             f"returned), each loop stopped after {args.budget:.0f} s (queries run: singles / "
             "batched). Recall@10 is over the single queries, against exact FAISS "
             "IndexFlatIP on the same vectors.", "",
             "| store | search ef | p50 (ms) | p99 (ms) | batch-100 queries/s | recall@10 | "
             "queries run |", "|---|---|---|---|---|---|---|"]
    for name, res in results.items():
        for ef in (k for k in res if isinstance(k, int)):
            r = res[ef]
            default = " (default)" if ef == 128 else ""
            lines.append(f"| {name} | {ef}{default} | {r['p50']:.1f} | {r['p99']:.1f} | "
                         f"{r['qps']:.0f} | {r['recall']:.3f} | {r['singles']} / "
                         f"{r['batched']} |")
    lines += ["", "Load (upsert) and index wait: " + "; ".join(
        f"{name} {args.n / res['load_s']:.0f} rows/s, index ready {res['index_s']:.0f} s after"
        for name, res in results.items()) + "."]
    server = results["Milvus 2.3.5 server"]
    ok = [ef for ef in server if isinstance(ef, int) and server[ef]["recall"] >= 0.95
          and server[ef]["p99"] <= 20]
    verdict = (f"met at ef {', '.join(map(str, ok))}" if ok else "MISSED at every ef measured")
    lines += [f"Target on the server (recall@10 ≥ 0.95 with p99 ≤ 20 ms): {verdict}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
