"""Scaling benchmark: how ingest and search through the API grow with the collection, per
backend, as a user meets them (``qkv index`` a JSONL, then ``qkv serve`` and HTTP).

Usage: python bench/scale.py --data ../shared/data [--sizes 10000,100000,1000000]
       [--stores lite,faiss,faiss-hnsw,server] [--queries 200] [--model DIR]

For each size N: N real texts (``bench/workload.py``'s list; past its end, marked copies)
as documents, and the Q texts after them as queries (never indexed). The encoder alone
encodes a sample of the documents (docs/s, its own batching). Then for each store, fresh:
``qkv index`` (docs/s, its ratio to the encoder alone, and its curve: docs/s over each fifth
of the rows, from the job's progress file), the store's disk size, then
``qkv serve`` on it and each query one request at a time: ``/v1/embeddings`` (the time to
embed the query) and search in ``dense``, ``bm25`` and ``hybrid`` mode (top 10): p50 and
p99, and the p50 over the embedding p50; then all of it again (``again``: whether the
first pass's tail was the store settling after the job or the search itself), and the
server's CPU in a quiet second before the first request. Recall@10 of dense is against
exact search, the ``faiss`` (flat) store's dense answers to the same queries (so
``faiss`` runs first), and the server's resident memory after the queries. Batched: the
same queries 32 at a time straight through the store (``VectorStore.search``), ms per
query. Prints a markdown section (with the CPU model and commit) and records it with the
figures, a row per store and size (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from api_load import QKV_CMD, Server  # noqa: E402
from ingest import run_sampled  # noqa: E402
from machine import add_results_arg, record, stamp  # noqa: E402
from workload import milvus_server, real_texts  # noqa: E402

VAR = ROOT / "var/bench/scale"
COLLECTION = "scale"
MODES = ("dense", "bm25", "hybrid")
ENCODER_SAMPLE = 20_000
BATCH = 32
STORES = {"lite": "{dir}/qkv.db", "faiss": "faiss://{dir}/faiss",
          "faiss-hnsw": "faiss+hnsw://{dir}/faiss", "server": "{server}"}


def texts_for(data: Path, n: int, queries: int) -> tuple[list[str], list[str]]:
    """N documents and Q queries: the benchmark list, then marked copies of it."""
    try:
        items = [t for _, t in real_texts(data, n + queries)]
    except SystemExit:  # fewer distinct texts than asked: copies marked by a number
        base = [t for _, t in real_texts(data, 400_000)]
        items = [base[i % len(base)] + ("" if i < len(base) else f" ({i // len(base) + 1})")
                 for i in range(n + queries)]
    return items[:n], items[n:]


def write_docs(texts: list[str]) -> Path:
    path = VAR / f"docs-{len(texts)}.jsonl"
    if not path.exists():
        with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as f:
            for i, t in enumerate(texts):
                f.write(json.dumps({"id": f"doc{i:07d}", "text": t}) + "\n")
        path.with_suffix(".tmp").replace(path)
    return path


def encoder_alone(model: str, texts: list[str]) -> float:
    code = ("import sys, json, time; import encoder; e = encoder.load(sys.argv[1]); "
            "t = json.load(open(sys.argv[2])); e.encode(t[:2048]); s = time.perf_counter(); "
            "e.encode(t); print(len(t) / (time.perf_counter() - s))")
    sample = VAR / "encoder-sample.json"
    sample.write_text(json.dumps(texts[:ENCODER_SAMPLE]))
    out = subprocess.run([sys.executable, "-c", code, model, str(sample)], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def index(docs: Path, store: str, model: str, state: Path) -> tuple[float, list[list[float]]]:
    """``qkv index`` into ``store``: its docs/s (from the job's summary line), and its ingest
    curve (:func:`curve`)."""
    shutil.rmtree(state, ignore_errors=True)
    cmd = [*QKV_CMD, "index", "--collection", COLLECTION, "--input", str(docs), "--store", store,
           "--model", model, "--state-dir", str(state), "--no-progress", "--timeout", "600",
           "--no-tune"]
    t0 = time.perf_counter()
    res, rss = run_sampled(cmd, state)  # bench/ingest.py's: runs it (rows written sampled
    # from the job's progress file), reads the job's summary line
    print(f"  {shlex.join(cmd[1:])}\n  -> {res['summary']} "
          f"(wall {time.perf_counter() - t0:.0f} s)", flush=True)
    return float(res["docs_s"]), curve(rss.samples)


def curve(samples: list[tuple[float, int, int]], parts: int = 5) -> list[list[float]]:
    """The ingest curve: [rows written, docs/s since the previous point] at each ``1/parts``
    of the rows, from (seconds, rows written, RSS) samples (the job's progress file, read
    every 0.25 s: rows count once the store acknowledged their batch). It starts at the
    first acknowledged batch: the start-up (loading the encoder, opening the store) and the
    first batch are the summary's, not the curve's."""
    written = [(t, r) for t, r, _ in samples if r > 0]
    if not written:
        return []
    last = written[-1][1]
    out: list[list[float]] = []
    start = written[0]
    for i in range(1, parts + 1):
        end = next((t, r) for t, r in written if r >= last * i // parts)
        if end[1] > start[1] and end[0] > start[0]:
            out.append([end[1], round((end[1] - start[1]) / (end[0] - start[0]))])
            start = end
    return out


def disk_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def measure(server: Server, queries: list[str], exact: dict[int, list[str]] | None,
            hybrid: bool) -> dict[str, Any]:
    """Each query: embedded, then searched in each mode, one request at a time; twice: the
    first pass right after the job (as a user who serves at once meets it), the second
    after it (``again``: the same requests on a store the first pass has warmed). The
    server's CPU seconds in a quiet second before the first pass say whether the store was
    still at work in the background."""
    client = httpx.Client(base_url=server.base, timeout=120)
    url = f"/v1/collections/{COLLECTION}/search"
    proc = psutil.Process(server.proc.pid)
    cpu0 = sum(proc.cpu_times()[:2])
    time.sleep(1.0)
    out: dict[str, Any] = {"quiet_cpu_s": round(sum(proc.cpu_times()[:2]) - cpu0, 2)}
    answers: dict[int, list[str]] = {}
    vectors = []
    for again in (False, True):
        times: dict[str, list[float]] = {m: [] for m in ("embed", *MODES)}
        for i, q in enumerate(queries):
            t0 = time.perf_counter()
            r = client.post("/v1/embeddings", json={"input": q})
            times["embed"].append(time.perf_counter() - t0)
            r.raise_for_status()
            if not again:
                vectors.append(r.json()["data"][0]["embedding"])
            for mode in MODES if hybrid else ("dense",):
                t0 = time.perf_counter()
                r = client.post(url, json={"query": q, "top_k": 10, "mode": mode})
                times[mode].append(time.perf_counter() - t0)
                r.raise_for_status()
                if mode == "dense" and not again:
                    answers[i] = [h["id"] for h in r.json()["hits"]]
        into = out.setdefault("again", {}) if again else out
        for name, ts in times.items():
            if ts:
                ms = 1000 * np.asarray(ts[5:] if len(ts) > 20 else ts)  # the first warm up
                into[name] = (float(np.percentile(ms, 50)), float(np.percentile(ms, 99)))
    out |= {"answers": answers, "vectors": np.asarray(vectors, np.float32)}
    if exact is not None:
        out["recall"] = float(np.mean([len(set(answers[i]) & set(exact[i][:10])) / 10
                                       for i in answers]))
    out["rss_mb"] = proc.memory_info().rss / 2**20
    return out


def batched(store: str, xq: np.ndarray, queries: list[str], hybrid: bool) -> dict[str, float]:
    """ms per query with ``BATCH`` queries a store call, per mode (in a child process: a
    Lite file is one process's at a time)."""
    np.save(VAR / "xq.npy", xq)
    (VAR / "xq.json").write_text(json.dumps(queries))
    code = f"""
import json, sys, time, numpy as np
from index import open_store
s = open_store(sys.argv[1], timeout=600)
xq, qs = np.load(sys.argv[2]), json.load(open(sys.argv[3]))
out = {{}}
for mode in {MODES if hybrid else ("dense",)!r}:
    s.search("{COLLECTION}", xq[:{BATCH}], 10, query_text=qs[:{BATCH}], mode=mode)
    t0 = time.perf_counter()
    for a in range(0, len(xq), {BATCH}):
        s.search("{COLLECTION}", xq[a:a+{BATCH}], 10, query_text=qs[a:a+{BATCH}], mode=mode)
    out[mode] = 1000 * (time.perf_counter() - t0) / len(xq)
s.close(); print(json.dumps(out))
"""
    res = subprocess.run([sys.executable, "-c", code, store, str(VAR / "xq.npy"),
                          str(VAR / "xq.json")], cwd=ROOT, check=True, capture_output=True,
                         text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_store(name: str, uri: str, docs: Path, n: int, queries: list[str], model: str,
              enc_rate: float, exact: dict[int, list[str]] | None) -> dict[str, Any]:
    where = VAR / f"{name}-{n}"
    if name != "server":
        shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True, exist_ok=True)
    print(f"{name} at {n:,} documents ({uri})", flush=True)
    rate, ingest_curve = index(docs, uri, model, where / "jobs")
    row: dict[str, Any] = {"store": name, "n": n, "ingest": rate, "ingest_x": rate / enc_rate,
                           "ingest_curve": ingest_curve,
                           "disk_mb": disk_mb(where) if name != "server" else None}
    hybrid = name != "server"  # Milvus 2.3.5 has no BM25
    server = Server(uri, model, {"QKV_AUTO_TUNE": "false"})
    try:
        row.update(measure(server, queries, exact, hybrid))
    finally:
        server.stop()
    row["batched"] = batched(uri, row["vectors"], queries, hybrid)
    print(f"  {json.dumps({k: v for k, v in row.items() if k not in ('answers', 'vectors')})}",
          flush=True)
    return row


def recall_label(row: dict[str, Any]) -> str:
    """Recall@10 as the table shows it: measured against the FAISS store's exact answers,
    "exact" for that store itself, "not measured" where no FAISS store ran before it."""
    if "recall" in row:
        return f"{row['recall']:.3f}"
    return "exact" if row["store"] == "faiss" else "not measured"


def report(rows: list[dict[str, Any]], enc: dict[int, float], argv: str) -> str:
    lines = [f"## Scaling: ingest and search through the API by collection size ({stamp()})",
             "", f"`{argv}`", "",
             "Latency: p50 / p99 ms of single requests right after the job; × = p50 over "
             "the p50 of embedding the query (`/v1/embeddings`); again: the same requests "
             "a second time; batched: ms a query, "
             f"{BATCH} queries a store call. Recall@10 of dense against exact search.", "",
             "| store | docs | ingest docs/s (× encoder) | embed p50 | dense p50/p99 (×) | "
             "BM25 p50/p99 | hybrid p50/p99 (×) | again: dense, hybrid p50/p99 | "
             "batched dense/BM25/hybrid | recall@10 | RSS MB | disk MB |", "|" + "---|" * 12]
    for r in rows:
        e = r["embed"][0]

        def lat(mode: str, times: bool = True, r: dict[str, Any] = r, e: float = e) -> str:
            if mode not in r:
                return "n/a"
            p50, p99 = r[mode]
            return f"{p50:.1f} / {p99:.1f}" + (f" ({p50 / e:.1f} ×)" if times else "")

        b, again = r["batched"], r.get("again", {})
        lines.append(
            f"| {r['store']} | {r['n']:,} | {r['ingest']:,.0f} ({r['ingest_x']:.2f} ×) | "
            f"{e:.1f} | {lat('dense')} | {lat('bm25', False)} | {lat('hybrid')} | "
            + ", ".join(f"{again[m][0]:.1f} / {again[m][1]:.1f}" for m in ("dense", "hybrid")
                        if m in again) + " | "
            + " / ".join(f"{b[m]:.1f}" if m in b else "n/a" for m in MODES) + " | "
            + recall_label(r) + f" | {r['rss_mb']:,.0f} | "
            + (f"{r['disk_mb']:,.0f}" if r["disk_mb"] is not None else "n/a") + " |")
    lines += ["", "The server's CPU in a quiet second before the first request: "
              + ", ".join(f"{r['store']} {r['n']:,}: {r['quiet_cpu_s']:.2f} s" for r in rows)]
    lines += ["", "Encoder alone (docs/s, on the first "
              f"{ENCODER_SAMPLE:,} documents): "
              + ", ".join(f"{n:,}: {v:,.0f}" for n, v in enc.items())]
    lines += ["", "Ingest curve (`qkv index`: rows written, and docs/s since the point "
              "before, from its first acknowledged batch; as the store acknowledged them):",
              ""]
    lines += [f"- {r['store']} {r['n']:,}: " + ", ".join(
        f"{rows:,}: {rate:,.0f}" for rows, rate in r["ingest_curve"]) for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--stores", default="faiss,lite,server")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--server-max", type=int, default=100_000,
                    help="largest size the Milvus server runs at (its ingest is the slowest)")
    ap.add_argument("--model", default="models/encoder-default")
    add_results_arg(ap)
    args = ap.parse_args()
    stores = args.stores.split(",")
    for s in stores:
        if s not in STORES:
            raise SystemExit(f"--stores: {s!r} is not one of {', '.join(STORES)}")
    VAR.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    enc: dict[int, float] = {}
    for n in [int(s) for s in args.sizes.split(",")]:
        docs_texts, queries = texts_for(args.data, n, args.queries)
        docs = write_docs(docs_texts)
        enc[n] = encoder_alone(args.model, docs_texts)
        print(f"{n:,} documents: encoder alone {enc[n]:,.0f} docs/s", flush=True)
        exact = None
        for name in stores:
            if name == "server" and n > args.server_max:
                continue
            if name == "server":
                with milvus_server(VAR / f"server-{n}") as (uri, _):
                    row = run_store(name, uri, docs, n, queries, args.model, enc[n], exact)
            else:
                uri = STORES[name].format(dir=VAR / f"{name}-{n}")
                row = run_store(name, uri, docs, n, queries, args.model, enc[n], exact)
                if name == "faiss":
                    exact = row["answers"]
            rows.append(row)
    command = shlex.join(["python", *sys.argv])
    section = report(rows, enc, command)
    print(section)
    for i, r in enumerate(rows):
        record("scale", command, figures(r, enc[r["n"]]), section=section,
               results=args.results, regenerate=i == len(rows) - 1)


def figures(r: dict[str, Any], enc_rate: float) -> dict[str, Any]:
    """A row of :func:`report`'s table, rounded as it prints it."""
    e = r["embed"][0]
    out: dict[str, Any] = {"store": r["store"], "docs": r["n"]}
    out |= {f"{m}_p50_x_embed": round(r[m][0] / e, 1) for m in ("dense", "hybrid") if m in r}
    out |= {"recall_at_10": round(r["recall"], 3) if "recall" in r else recall_label(r),
            "ingest_x_encoder": round(r["ingest_x"], 2), "ingest_docs_per_s": round(r["ingest"]),
            "embed_p50_ms": round(e, 1)}
    for m in (m for m in MODES if m in r):
        out |= {f"{m}_p50_ms": round(r[m][0], 1), f"{m}_p99_ms": round(r[m][1], 1)}
    for m, (p50, p99) in r.get("again", {}).items():
        out |= {f"again_{m}_p50_ms": round(p50, 1), f"again_{m}_p99_ms": round(p99, 1)}
    out["quiet_cpu_s"] = r["quiet_cpu_s"]
    out |= {f"batched_{m}_ms_per_query": round(r["batched"][m], 1) for m in MODES
            if m in r["batched"]}
    out |= {"rss_mb": round(r["rss_mb"]),
            "disk_mb": round(r["disk_mb"]) if r["disk_mb"] is not None else None,
            "encoder_alone_docs_per_s": round(enc_rate), "ingest_curve": r["ingest_curve"]}
    return out


if __name__ == "__main__":
    main()
