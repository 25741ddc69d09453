"""``qkv index --engine ray`` against today's ``qkv index``, on the same docs and store.

Usage: python bench/ray_index.py --data ../shared/data [--n 20000] [--rounds 2]
       [--store lite|server] [--nodes]
       python bench/ray_index.py --data ../shared/data --big 1000000
                                 [--load upsert|bulk-import|both]

Writes N real docs (``bench/workload.py``) as JSONL under var/bench/ and, alternating the two
engines round by round (the machine is shared), indexes them into a fresh store each time:
the local engine (one single-threaded encoder per CPU thread) and Ray (one worker per CPU,
a local Ray started by the job). Reports documents/s of the whole command (Ray's start
included) and the ratio, the best round of each. ``--nodes`` also runs the job once on a
simulated two-node cluster (``ray.cluster_utils.Cluster``, one CPU per node, one worker on
each) and reports each worker's share and that every distinct id arrived once. ``--big N``
instead runs ``--engine ray`` once over N short docs (real texts, repeated with new ids past
those the data has) into a Milvus 2.3.5 server, sampling the peak RSS of the whole process
tree (driver, Ray's processes, its workers) and the peak use of ``/dev/shm`` (Ray's object
store). ``--load bulk-import`` makes that run write Parquet files and import them;
``--load both`` runs it once each way, each on a new server, and gives the ratio of their
documents/s. Records the figures (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from machine import add_results_arg, record, stamp
from workload import ROOT, milvus_server, real_texts

VAR = ROOT / "var/bench/ray"
MODEL = ROOT / "models/encoder-default"


def write_docs(data: Path, n: int) -> Path:
    path = ROOT / f"var/bench/ray-{n}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as f:
            for i, (source, text) in enumerate(real_texts(data, n)):
                f.write(json.dumps({"id": f"doc{i:07d}", "text": text, "source": source}) + "\n")
        os.replace(path.with_suffix(".tmp"), path)
    return path


def remove(path: Path) -> None:
    """A Milvus Lite store: a file, or (milvus-lite 3) a directory."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def run_index(docs: Path, store: str, state: Path, engine: str, extra: list[str]) -> float:
    """Seconds of one whole ``qkv index`` command (a fresh job)."""
    shutil.rmtree(state, ignore_errors=True)
    cmd = [sys.executable, "-c", "from cli.app import app; app()", "index", "--engine",
           engine, "--collection", f"bench_{engine}", "--input", str(docs), "--store", store,
           "--model", str(MODEL), "--state-dir", str(state), "--no-progress", "--no-tune",
           *extra]
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1"}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{engine} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds


def count(store: str, collection: str) -> int:
    from index import open_store

    s = open_store(store)
    try:
        return s.count(collection)
    finally:
        s.close()


def two_nodes(docs: Path, n: int, store: str) -> dict[str, object]:
    """The job on a simulated two-node cluster, one worker a node, driven in process."""
    import ray
    from ray.cluster_utils import Cluster

    from index import Fields, JobConfig
    from wiring.index_job import IndexJob, RayOptions
    from wiring.ray_indexing import index_with_ray

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    state = VAR / "nodes-state"
    shutil.rmtree(state, ignore_errors=True)
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        config = JobConfig(state_path=state / "nodes.progress.json",
                           rejects_path=state / "rejects.jsonl", fields=Fields(),
                           batch_size=500, retries=5, backoff_s=1.0, progress_bar=False)
        summary = index_with_ray(IndexJob(inputs=[docs], store=store, model=MODEL,
                                          collection="bench_nodes", timeout=30.0,
                                          engine="ray", ray=RayOptions(workers=2)), config)
    finally:
        ray.shutdown()
        cluster.shutdown()
    figures = json.loads((state / "nodes.ray.json").read_text())
    return {"nodes_written": summary.total_written, "nodes_count": count(store, "bench_nodes"),
            "nodes_distinct_ids": n, "nodes_worker_share": figures["workers"],
            "nodes_seconds": round(summary.seconds, 1)}


def tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def big(data: Path, n: int, loads: tuple[str, ...] = ("upsert",)) -> dict[str, object]:
    """``--engine ray`` once over ``n`` short docs into a Milvus 2.3.5 server, sampled; once
    for each of ``loads`` (upsert, bulk-import), each into its own new collection of the
    same server, one after the other."""
    path = ROOT / f"var/bench/ray-big-{n}.jsonl"
    if not path.exists():
        texts = [t for _, t in real_texts(data, min(n, 200_000))]
        with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(json.dumps({"id": f"b{i:08d}", "text": texts[i % len(texts)]}) + "\n")
        os.replace(path.with_suffix(".tmp"), path)
    figures: dict[str, object] = {"docs": n, "store": "server 2.3.5"}
    for load in loads:  # each on a new server: one still indexing the last run's rows
        # took a core from the next (on 2 cores, 410 against 450 documents/s)
        shutil.rmtree(VAR / "milvus-big/milvus/data", ignore_errors=True)  # not its bin/
        with milvus_server(VAR / "milvus-big") as (uri, _):
            tag = "" if loads == ("upsert",) else f"{load.replace('-', '_')}_"
            # the server on this machine reads the files where they are
            got = big_run(path, uri, load, VAR / "bulk-files")
            figures.update({f"{tag}{k}": v for k, v in got.items()})
    if len(loads) == 2:
        figures["bulk_import_x_upsert"] = round(
            float(figures["bulk_import_docs_per_s"]) / float(figures["upsert_docs_per_s"]), 3)
    return figures


def big_run(path: Path, uri: str, load: str, bulk_dir: Path) -> dict[str, object]:
    collection = f"bench_big_{load.replace('-', '_')}"
    state = VAR / f"state-big-{load}"
    shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(bulk_dir / collection, ignore_errors=True)
    extra = ["--load", load, "--bulk-dir", str(bulk_dir)] \
        if load == "bulk-import" else []
    cmd = [sys.executable, "-c", "from cli.app import app; app()", "index", "--engine",
           "ray", "--collection", collection, "--input", str(path), "--store", uri,
           "--model", str(MODEL), "--state-dir", str(state), "--no-progress", "--no-tune",
           *extra]
    shm0 = shutil.disk_usage("/dev/shm").used
    peak_rss = peak_shm = 0
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ, "RAY_DISABLE_USAGE_STATS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None:
        peak_rss = max(peak_rss, tree_rss(proc.pid))
        peak_shm = max(peak_shm, shutil.disk_usage("/dev/shm").used - shm0)
        time.sleep(0.5)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {proc.stderr.read()[-3000:]}"
                         if proc.stderr else "failed")
    written = count(uri, collection)
    n = sum(1 for _ in open(path, encoding="utf-8"))
    return {"written": written, "docs_per_s": round(n / seconds, 1),
            "seconds": round(seconds, 1), "peak_rss_mb_process_tree": round(peak_rss / 2**20),
            "peak_dev_shm_mb": round(peak_shm / 2**20)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--store", choices=("lite", "server"), default="lite")
    ap.add_argument("--nodes", action="store_true")
    ap.add_argument("--big", type=int, default=0, metavar="N")
    ap.add_argument("--load", choices=("upsert", "bulk-import", "both"), default="upsert",
                    help="with --big: how the rows reach the server (both: one run each)")
    add_results_arg(ap)
    args = ap.parse_args()
    if args.big:
        loads = ("upsert", "bulk-import") if args.load == "both" else (args.load,)
        figures = big(args.data, args.big, loads)
        section = "\n".join([f"## `qkv index --engine ray`, {args.big:,} docs ({stamp()})", "",
                             *(f"- {k}: {v}" for k, v in figures.items())])
        print(section)
        record("ray_index", " ".join(["python bench/ray_index.py", *sys.argv[1:]]), figures,
               section=section, results=args.results)
        return
    docs = write_docs(args.data, args.n)
    VAR.mkdir(parents=True, exist_ok=True)
    times: dict[str, list[float]] = {"local": [], "ray": []}
    uri = ""
    with ExitStack() as stack:
        if args.store == "server":
            uri, _ = stack.enter_context(milvus_server(VAR / "milvus"))
        rows: dict[str, int] = {}
        for r in range(args.rounds):
            for engine in (("local", "ray") if r % 2 == 0 else ("ray", "local")):
                store = uri if args.store == "server" else str(VAR / f"{engine}-{r}.db")
                if args.store == "server":
                    from index import open_store

                    s = open_store(uri)
                    if f"bench_{engine}" in s.list_collections():
                        s.drop(f"bench_{engine}")
                    s.close()
                else:
                    remove(Path(store))
                time.sleep(3)  # the last run's processes gone
                seconds = run_index(docs, store, VAR / f"state-{engine}", engine, [])
                # rows, not documents: a long document is stored as its passages
                rows[engine] = count(store, f"bench_{engine}")
                assert rows[engine] >= args.n and len(set(rows.values())) == 1, rows
                times[engine].append(seconds)
                print(f"round {r}: {engine} {args.n / seconds:.0f} docs/s ({seconds:.1f} s)")
        best = {e: args.n / min(t) for e, t in times.items()}
        figures: dict[str, object] = {
            "docs": args.n, "store": args.store, "local_docs_per_s": round(best["local"], 1),
            "ray_docs_per_s": round(best["ray"], 1),
            "ray_x_local": round(best["ray"] / best["local"], 3),
            "rounds_ray_x_local": [round(a / b, 3) for a, b in zip(times["local"], times["ray"],
                                                                   strict=True)]}
        if args.nodes:
            store = uri if args.store == "server" else str(VAR / "nodes.db")
            if args.store == "lite":
                remove(Path(store))
            figures.update(two_nodes(docs, args.n, store))
    section = "\n".join([f"## `qkv index --engine ray` against the local engine ({stamp()})",
                         "", *(f"- {k}: {v}" for k, v in figures.items())])
    print(section)
    record("ray_index", " ".join(["python bench/ray_index.py", *sys.argv[1:]]), figures,
           section=section, results=args.results)


if __name__ == "__main__":
    main()
