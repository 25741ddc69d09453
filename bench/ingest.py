"""Ingest benchmark: the whole ``qkv index`` job vs the encoder alone, on the same docs.

Usage: python bench/ingest.py --data ../shared/data [--n 100000] [--model DIR]
       [--rss-rows 1000000] [--rss-store server|lite|both]

Writes N real docs (``bench/workload.py``) as JSONL under var/bench/, then in one run:
(a) the encoder alone encodes them (its own batching), and on a sample the way the job
calls it, to show where the job's time goes; (b) ``qkv index`` indexes
them into a fresh Milvus Lite file; (c) the same into a fresh Milvus 2.3.5 server. Each runs
in its own process, sampled for RSS. With ``--rss-rows`` it also runs ``qkv index`` (real
encoding) over a JSONL of that many rows, to check that the job's memory stays flat.
Prints a markdown section and records it with the figures (``bench/machine.py``).
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

from machine import add_results_arg, record
from workload import (
    CHUNK,
    ROOT,
    RssSampler,
    chunk_file,
    milvus_server,
    real_texts,
    vector_cache,
)

VAR = ROOT / "var/bench"
BATCH = 2048  # qkv index's default --batch-size
SAMPLE = 16384  # docs for the diagnosis of the encoder's speed in the job's calls
COLLECTION = "bench_ingest"


def write_docs(data: Path, n: int) -> Path:
    path = VAR / f"ingest-{n}.jsonl"
    if not path.exists():
        with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as f:
            for i, (source, text) in enumerate(real_texts(data, n)):
                f.write(json.dumps({"id": f"doc{i:07d}", "text": text, "source": source}) + "\n")
        os.replace(path.with_suffix(".tmp"), path)
    return path


def encode_child(docs: Path, model: str) -> None:
    """(a) The encoder alone: ``TextEncoder.encode`` over all the docs with its defaults
    (length-sorted batches of 64). Then, on the first ``SAMPLE`` docs, the encoder called
    once per job batch of ``BATCH`` docs on one multi-threaded encoder, and on one
    single-threaded encoder per CPU thread as ``qkv index`` runs it: where the job's time
    goes. The docs are the first texts of bench/search.py's list, so their vectors are
    cached for it."""
    import numpy as np

    import encoder

    texts = [json.loads(line)["text"] for line in open(docs, encoding="utf-8")]
    enc = encoder.load(model)
    enc.encode(texts[:BATCH])  # warm-up
    t0 = time.perf_counter()
    x = enc.encode(texts)
    seconds = time.perf_counter() - t0
    cache = vector_cache(enc.fingerprint)
    for start in range(0, len(x) - CHUNK + 1, CHUNK):
        path = chunk_file(cache, start, start + CHUNK)
        if not path.exists():
            np.save(path, x[start : start + CHUNK])
    del x
    from concurrent.futures import ThreadPoolExecutor

    import torch

    sample, diagnosis = texts[:SAMPLE], {}
    calls = [sample[i : i + BATCH] for i in range(0, len(sample), BATCH)]
    threads = torch.get_num_threads()
    for key, workers in (("one call", 0), ("per batch", 1), ("per batch, workers", threads)):
        if workers > 1:
            torch.set_num_threads(1)  # what qkv index does on a CPU
        t0 = time.perf_counter()
        if workers == 0:
            enc.encode(sample)
        else:
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(enc.encode, calls))
        diagnosis[key] = len(sample) / (time.perf_counter() - t0)
        torch.set_num_threads(threads)
    print(json.dumps({"seconds": seconds, "docs_s": len(texts) / seconds,
                      "diagnosis": diagnosis, "sample": len(sample),
                      "encoder": f"{enc.name} {enc.fingerprint} dim {enc.dim}"}))


def written_so_far(state_dir: Path) -> int:
    for p in state_dir.glob("*.progress.json"):
        try:
            return int(json.loads(p.read_text())["written"])
        except (OSError, ValueError, KeyError):
            return 0
    return 0


def run_sampled(cmd: list[str], state_dir: Path | None = None) -> tuple[dict, RssSampler]:
    """Run ``cmd``, sampling its RSS (and rows written, from the job's progress file)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    progress = (lambda: written_so_far(state_dir)) if state_dir else (lambda: 0)
    with RssSampler(proc.pid, progress) as rss:
        out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} exited {proc.returncode}:\n{out}")
    lines = out.strip().splitlines()
    # the job's summary line ("read R, ..."), before what follows it (calibration, aliases)
    last = next((x for x in lines if x.startswith("read ")), lines[-1])
    if last.startswith("{"):
        return json.loads(last), rss
    # qkv index's summary: "read R, written W, rejected 0, other shards 0, S s, D docs/s ..."
    parts = [p.strip() for p in last.split(",")]
    seconds = float(parts[4].split()[0])
    written = int(parts[1].split()[1])
    return {"seconds": seconds, "written": written, "docs_s": written / seconds,
            "summary": last}, rss


def qkv_index(docs: Path, store: str, model: str, tag: str,
              collection: str = COLLECTION) -> tuple[dict, RssSampler, str]:
    state = VAR / f"jobs-{tag}"
    shutil.rmtree(state, ignore_errors=True)
    cmd = [str(Path(sys.executable).with_name("qkv")), "index", "--collection", collection,
           "--input", str(docs.relative_to(ROOT)), "--store", store, "--model", model,
           "--batch-size", str(BATCH), "--state-dir", str(state.relative_to(ROOT)),
           "--no-progress", "--timeout", "60"]
    res, rss = run_sampled(cmd, state)
    print(f"job -> {store}: {res['summary']}", flush=True)
    from index import open_store

    vector_store = open_store(store, timeout=900)  # Lite may build its HNSW on load
    res["count"] = vector_store.count(collection)
    vector_store.close()
    return res, rss, shlex.join(["qkv", *cmd[1:]])


def rss_input(docs: Path, rows: int) -> Path:
    """``rows`` rows with distinct ids, cycling the real docs' texts."""
    path = VAR / f"rss-{rows}.jsonl"
    if not path.exists():
        lines = open(docs, encoding="utf-8").read().splitlines()
        with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as f:
            for i in range(rows):
                row = json.loads(lines[i % len(lines)])
                f.write(json.dumps({**row, "id": f"row{i:08d}"}) + "\n")
        os.replace(path.with_suffix(".tmp"), path)
    return path


def rss_run(docs: Path, rows: int, store: str, model: str) -> tuple[dict, RssSampler, str]:
    """``qkv index`` (real encoding) over ``rows`` rows: the memory-flat check."""
    return qkv_index(rss_input(docs, rows), store, model, "rss", collection="bench_rss")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--model", default="models/encoder-default")
    ap.add_argument("--rss-rows", type=int, default=0, help="memory-flat check size (0: skip)")
    ap.add_argument("--rss-store", choices=("server", "lite", "both"), default="server",
                    help="where the memory-flat check writes")
    add_results_arg(ap)
    ap.add_argument("--child", choices=("encode",), help=argparse.SUPPRESS)
    ap.add_argument("--docs", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "encode":
        return encode_child(args.docs, args.model)
    if args.data is None:
        ap.error("--data is required")
    argv = shlex.join(["python", "bench/ingest.py", *sys.argv[1:]])
    VAR.mkdir(parents=True, exist_ok=True)
    docs = write_docs(args.data, args.n)
    runs: dict[str, tuple[dict, RssSampler]] = {}
    runs["enc"] = run_sampled([sys.executable, __file__, "--child", "encode", "--docs",
                               str(docs), "--model", args.model])
    print(f"encoder alone: {runs['enc'][0]['docs_s']:.1f} docs/s", flush=True)
    lite = VAR / "ingest-lite.db"
    shutil.rmtree(lite, ignore_errors=True)
    res, rss, lite_cmd = qkv_index(docs, str(lite.relative_to(ROOT)), args.model, "lite")
    runs["lite"] = res, rss
    server_dir = VAR / "milvus-2.3.5-ingest"
    shutil.rmtree(server_dir, ignore_errors=True)
    with milvus_server(server_dir) as (uri, _):
        res, rss, server_cmd = qkv_index(docs, uri, args.model, "server")
        runs["server"] = res, rss
        if args.rss_rows and args.rss_store in ("server", "both"):
            res, rss, _ = rss_run(docs, args.rss_rows, uri, args.model)
            runs["rss server"] = res, rss
            print(f"memory-flat check -> server: {rss.peak_mb:.0f} MB", flush=True)
    shutil.rmtree(server_dir, ignore_errors=True)
    if args.rss_rows and args.rss_store in ("lite", "both"):
        rss_db = VAR / "rss-lite.db"
        shutil.rmtree(rss_db, ignore_errors=True)
        res, rss, _ = rss_run(docs, args.rss_rows, str(rss_db.relative_to(ROOT)), args.model)
        runs["rss lite"] = res, rss
    section = report(args, argv, runs, lite_cmd, server_cmd)
    print(section)
    record("ingest", argv, figures(args, runs), section=section, results=args.results)


def figures(args: argparse.Namespace, runs: dict[str, tuple[dict, RssSampler]]) -> dict:
    """The headline figures of :func:`report`, rounded as it prints them."""
    enc = runs["enc"][0]
    out = {"docs": args.n, "encoder": enc["encoder"]}
    for key in ("enc", "lite", "server"):
        res, rss = runs[key]
        name = "encoder_alone" if key == "enc" else key
        out[f"{name}_docs_per_s"] = round(res["docs_s"], 1)
        if key != "enc":
            out[f"{name}_x_encoder"] = round(res["docs_s"] / enc["docs_s"], 2)
        out[f"{name}_peak_rss_mb"] = round(rss.peak_mb)
    diag = enc["diagnosis"]
    out |= {"sample_one_call_docs_per_s": round(diag["one call"]),
            "sample_per_batch_docs_per_s": round(diag["per batch"]),
            "sample_per_batch_workers_docs_per_s": round(diag["per batch, workers"])}
    for key in ("rss server", "rss lite"):
        if key in runs:
            res, rss = runs[key]
            name = key.replace(" ", "_check_")
            out |= {f"{name}_rows": args.rss_rows, f"{name}_docs_per_s": round(res["docs_s"]),
                    f"{name}_peak_rss_mb": round(rss.peak_mb)}
    return out


def report(args: argparse.Namespace, argv: str, runs: dict[str, tuple[dict, RssSampler]],
           lite_cmd: str, server_cmd: str) -> str:
    enc = runs["enc"][0]
    names = {"enc": "encoder alone (`TextEncoder.encode(docs)`, sorted batches of 64)",
             "lite": "`qkv index` → Milvus Lite file",
             "server": "`qkv index` → Milvus 2.3.5 server"}
    lines = [f"## Ingest ({time.strftime('%Y-%m-%d')}, {args.n:,} docs, {enc['encoder']}, "
             f"{os.cpu_count()} CPU threads)", "", f"Command: `{argv}`", "",
             "| run | docs/s | job / encoder-only | peak RSS (MB) | rows in store |",
             "|---|---|---|---|---|"]
    for key, name in names.items():
        res, rss = runs[key]
        lines.append(f"| {name} | {res['docs_s']:.1f} | {res['docs_s'] / enc['docs_s']:.2f} | "
                     f"{rss.peak_mb:.0f} | {res.get('count', '–')} |")
    lines += ["", "Target job ≥ 0.85 × encoder-only: " + "; ".join(
        f"{k} {runs[k][0]['docs_s'] / enc['docs_s']:.2f} "
        f"({'met' if runs[k][0]['docs_s'] >= 0.85 * enc['docs_s'] else 'MISSED'})"
        for k in ("lite", "server")) + ". Docs/s of the jobs are their own summary lines "
        "(clock from the first read to the end of the store's close, which seals the last "
        "rows and in Lite builds the segments' graphs: counted since 3088650, before it the "
        "close was not; model load excluded, as for the encoder alone). Milvus Lite runs "
        "inside the job's process, so its RSS is the job's.",
        f"Job commands: `{lite_cmd}`; `{server_cmd}` (a fresh server on a free port).", ""]
    diag = enc["diagnosis"]
    whole = diag["one call"]
    lines += [f"Where the job's time goes: the encoder alone on the first {enc['sample']:,} docs, "
              "called in different ways (docs/s):", "",
              "| calls | docs/s | vs one call |", "|---|---|---|",
              f"| one call, `batch_size=64` (as above) | {whole:.0f} | 1.00 |"]
    for key, name in (("per batch", f"one call per {BATCH} docs, one multi-threaded encoder"),
                      ("per batch, workers", f"one call per {BATCH} docs, one single-threaded "
                       "encoder per CPU thread (**how `qkv index` runs it**)")):
        lines.append(f"| {name} | {diag[key]:.0f} | {diag[key] / whole:.2f} |")
    job_calls = diag["per batch, workers"]
    lines += ["", "Against the encoder called as the job calls it, the jobs run at " + ", ".join(
        f"{k} {runs[k][0]['docs_s'] / job_calls:.2f}" for k in ("lite", "server")) + "×.", ""]
    lines += [f"RSS by rows written, {k}: " + ", ".join(
        f"{r:,}: {mb:.0f} MB" for r, mb in runs[k][1].curve()) + "." for k in ("lite", "server")]
    for key in ("rss server", "rss lite"):
        if key not in runs:
            continue
        res, rss = runs[key]
        where = "the Milvus 2.3.5 server" if key == "rss server" else "a Milvus Lite file"
        curve = ", ".join(f"{r:,}: {mb:.0f} MB" for r, mb in rss.curve())
        lines += ["", f"Memory-flat check: `qkv index` (real encoding, same arguments) over "
                  f"{args.rss_rows:,} rows (the docs above cycled, distinct ids) into {where}: "
                  f"{res['written']:,} written at {res['docs_s']:.0f} docs/s, "
                  f"{res.get('count', '?')} rows in the store.",
                  f"Peak RSS **{rss.peak_mb:.0f} MB** (target < 2048 MB: "
                  f"{'met' if rss.peak_mb < 2048 else 'MISSED'}). RSS by rows written: {curve}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
