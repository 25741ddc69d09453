"""Backup and restore against re-indexing from the source (issue 72).

Usage: python bench/backup.py --data ../shared/data [--n 100000] [--model DIR] [--server]
       [--server-ef 256]

On N real short documents (``bench/workload.py``, the ingest benchmark's): ``qkv index``
builds a Milvus Lite file from the JSONL (the re-indexing a user without a backup would
run); then, each as its own process, ``qkv backup`` of that file, ``qkv restore`` into a
fresh Lite file, and into FAISS (and with ``--server`` into a Milvus 2.3.5 server) with the
stored vectors. Then it checks what came back: every row's id, text, metadata and vector
against the source, and the dense top 10 of 200 queries (recall@10 against the source's;
on the server once more after its index is built, at the default ``ef`` and at each of
``--server-ef``, ``QKV_SEARCH_EF``).
Prints a markdown section and records it with the figures (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest import COLLECTION, VAR, qkv_index, write_docs  # noqa: E402
from machine import add_results_arg, record, stamp  # noqa: E402
from workload import milvus_server  # noqa: E402

QUERIES = 200


def qkv(*args: str) -> tuple[float, str]:
    """Run ``qkv ARGS`` in its own process: (seconds, stdout)."""
    t0 = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).with_name("qkv")), *args], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"qkv {shlex.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    print(done.stdout.strip(), flush=True)
    return seconds, done.stdout


def release(uri: str) -> None:
    """Stop the Milvus Lite server this process runs for the file ``uri`` (closing a store
    leaves it running, for the process's other stores)."""
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(ROOT / uri))


def compare(source: Any, target: Any, name: str, n: int, xq: np.ndarray) -> dict[str, float]:
    """Rows equal to the source's (id, text, metadata, vector), and dense recall@10."""
    ids = [f"doc{i:07d}" for i in range(n)]
    same = 0
    for start in range(0, n, 2000):
        want = {it.id: it for it in source.get(COLLECTION, ids[start:start + 2000])}
        for it in target.get(name, ids[start:start + 2000]):
            w = want.get(it.id)
            same += bool(w is not None and w.text == it.text and w.metadata == it.metadata
                         and np.allclose(w.vector, it.vector, atol=1e-6))
    want_hits = source.search(COLLECTION, xq, 10, mode="dense", consistency="Strong")
    got_hits = target.search(name, xq, 10, mode="dense", consistency="Strong")
    recall = np.mean([len({h.id for h in a} & {h.id for h in b}) / 10
                      for a, b in zip(want_hits, got_hits, strict=True)])
    exact = np.mean([[h.id for h in a] == [h.id for h in b]
                     for a, b in zip(want_hits, got_hits, strict=True)])
    return {"rows_equal": same / n, "recall@10": float(recall), "top10_identical": float(exact)}


def main() -> None:
    import encoder
    from index import open_store

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--model", default="models/encoder-default")
    ap.add_argument("--server", action="store_true", help="Also restore into a Milvus 2.3.5 "
                    "server (PyPI milvus).")
    ap.add_argument("--server-ef", default="256", help="search ef values (QKV_SEARCH_EF) the "
                    "server's recall is measured at too, once indexed")
    add_results_arg(ap)
    args = ap.parse_args()
    VAR.mkdir(parents=True, exist_ok=True)
    docs = write_docs(args.data, args.n)
    work = VAR / "backup"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    src = str((work / "src.db").relative_to(ROOT))
    t0 = time.perf_counter()
    qkv_index(docs, src, args.model, "backup")  # the whole job, as the restores: wall time
    reindex_s = time.perf_counter() - t0
    release(src)  # counted in this process: let the qkv processes open it
    backup_s, _ = qkv("backup", "--store", src, "--to", str(work / "b"), "--collection",
                      COLLECTION)
    targets = {"lite": str(work / "dst.db"), "faiss": f"faiss://{work / 'faiss'}"}
    server = None
    if args.server:
        server = milvus_server(work / "server")
        targets["milvus-2.3.5"] = server.__enter__()[0]
    restored: dict[str, float] = {}
    checks: dict[str, dict[str, float]] = {}
    enc = encoder.load(args.model)
    rng = np.random.default_rng(0)
    source = open_store(src, timeout=900)
    picked = rng.choice(args.n, QUERIES, replace=False)
    texts = [it.text for it in source.get(COLLECTION, [f"doc{i:07d}" for i in picked])]
    xq = enc.encode(texts)
    source.close()
    release(src)
    try:
        for tag, uri in targets.items():
            seconds, out = qkv("restore", str(work / "b"), "--store", uri, "--model",
                               args.model)
            assert re.search(r"stored vectors", out), out
            restored[tag] = seconds
            source, target = open_store(src, timeout=900), open_store(uri, timeout=900)
            checks[tag] = compare(source, target, COLLECTION, args.n, xq)
            if tag.startswith("milvus"):  # its HNSW is built in the background: again after
                t = time.perf_counter()
                settled = cast(Any, target).settle(COLLECTION, timeout=900)  # MilvusStore.settle
                assert settled, f"{tag}: not indexed in 900 s"  # a restore settled it already
                waited = time.perf_counter() - t
                checks[f"{tag}, indexed ({waited:.0f} s later)"] = compare(
                    source, target, COLLECTION, args.n, xq)
                for ef in [int(e) for e in args.server_ef.split(",") if e]:
                    wider = open_store(uri, timeout=900, ef=ef)
                    checks[f"{tag}, indexed, ef {ef}"] = compare(source, wider, COLLECTION,
                                                                 args.n, xq)
                    wider.close()
            source.close()
            target.close()
            release(src)
            if "://" not in uri:
                release(uri)
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    n = args.n
    figures: dict[str, Any] = {
        "docs": n, "backup_docs_per_s": round(n / backup_s),
        "restore_lite_docs_per_s": round(n / restored["lite"]),
        "reindex_over_restore_lite": round(reindex_s / restored["lite"], 2),
        "reindex_docs_per_s": round(n / reindex_s),
        **{f"restore_{t}_docs_per_s": round(n / s) for t, s in restored.items()},
        **{f"{t.split(' (')[0]}_{k}": round(v, 4) for t, c in checks.items()
           for k, v in c.items()}}
    argv = shlex.join(["python", "bench/backup.py", *sys.argv[1:]])
    lines = [f"\n## Backup and restore against re-indexing ({time.strftime('%Y-%m-%d')})", "",
             f"`{argv}` ({stamp()})", "",
             f"{n:,} short real documents, each step its own `qkv` process (start-up "
             "included).", "",
             "| step | seconds | docs/s |", "|---|---|---|",
             f"| `qkv index` from the JSONL (re-indexing: encode, write, tune) | "
             f"{reindex_s:.1f} | {n / reindex_s:,.0f} |",
             f"| `qkv backup` of the Lite file | {backup_s:.1f} | {n / backup_s:,.0f} |"]
    lines += [f"| `qkv restore` into {t}, stored vectors | {s:.1f} | {n / s:,.0f} |"
              for t, s in restored.items()]
    lines += ["", "| restored into | rows equal to the source's | dense recall@10 (200 "
              "queries) | top 10 identical |", "|---|---|---|---|"]
    lines += [f"| {t} | {c['rows_equal']:.4f} | {c['recall@10']:.4f} | "
              f"{c['top10_identical']:.3f} |" for t, c in checks.items()]
    lines += ["", f"Restoring into Lite is {reindex_s / restored['lite']:.1f}× faster than "
              "re-indexing from the source."]
    text = "\n".join(lines)
    print(text)
    record("backup", argv, figures, section=text, results=args.results)


if __name__ == "__main__":
    main()
