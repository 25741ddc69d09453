"""The request path, this checkout against an earlier commit, side by side in one run.

Usage: python bench/request_path.py --against REF [--docs 2000] [--requests 200] [--rounds 3]

A refactor of the code a request passes through (issue 69 moved searches and writes from
the routes into ``wiring/collections.py``) must not slow it. This starts two ``qkv serve``
processes on the shipped encoder, each over its own new Milvus Lite file: one from this
checkout, one from ``REF`` (a git worktree under var/bench/request-path/). Both are filled
through the API with the same ``--docs`` chunks of the demo corpus (upserts of 64; that
time is the first figure), then, ``--rounds`` times, each server in turn (the order
alternating) answers ``--requests`` requests of each kind, one at a time: a dense search, a
hybrid search, a hybrid search of 4 words from 4 random texts (a query whose words the
collection mostly has only apart: its relevance asks the encoder how it pools, one more
pass), a batch of 4 searches, a get and an upsert of 8 documents. Only one server
has work at a time (the machine is shared and noisy: the arms take turns). Prints each
kind's p50 and p99 per arm and the ratio this/REF, and records them
(bench/results/request_path.jsonl).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
from api_load import VAR, Server
from machine import add_results_arg, record
from workload import ROOT

CORPUS = ROOT / "data/demo/python-docs.jsonl.gz"
MODEL = "models/encoder-default"
KINDS = ("dense", "hybrid", "unrelated", "batch", "get", "upsert")


def corpus(n: int) -> list[dict[str, str]]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(n), f, strict=False)]
    return [{"id": f"d{i}", "text": r["text"]} for i, r in enumerate(rows)]  # URL-safe ids


def worktree(ref: str) -> Path:
    """``ref`` checked out under var/ (made once; moved to ``ref`` when it exists)."""
    path = VAR / "request-path" / "tree"
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--force", "--detach", str(path), ref],
                       cwd=ROOT, check=True, capture_output=True)
    else:
        subprocess.run(["git", "checkout", "--detach", "--force", ref], cwd=path, check=True,
                       capture_output=True)
    return path


def fill(base: str, docs: list[dict[str, str]]) -> float:
    """Seconds to create the collection and upsert ``docs`` in requests of 64."""
    with httpx.Client(base_url=base, timeout=300) as c:
        t0 = time.perf_counter()
        c.post("/v1/collections", json={"name": "paths"}).raise_for_status()
        for i in range(0, len(docs), 64):
            c.post("/v1/collections/paths/documents",
                   json={"documents": docs[i:i + 64]}).raise_for_status()
        return time.perf_counter() - t0


def requests(kind: str, docs: list[dict[str, str]], rng: random.Random
             ) -> tuple[str, str, dict | None]:  # type: ignore[type-arg]
    words = " ".join(rng.choice(docs)["text"].split()[:6])
    if kind == "dense":
        return "POST", "/v1/collections/paths/search", {"query": words, "mode": "dense"}
    if kind == "hybrid":
        return "POST", "/v1/collections/paths/search", {"query": words, "mode": "hybrid"}
    if kind == "unrelated":  # a word of each of 4 texts: mostly found apart (scattered)
        unrelated = " ".join(rng.choice(rng.choice(docs)["text"].split()) for _ in range(4))
        return "POST", "/v1/collections/paths/search", {"query": unrelated, "mode": "hybrid"}
    if kind == "batch":
        return "POST", "/v1/collections/paths/search/batch", {"searches": [
            {"query": " ".join(rng.choice(docs)["text"].split()[:6])} for _ in range(4)]}
    if kind == "get":
        return "GET", f"/v1/collections/paths/documents/{rng.choice(docs)['id']}", None
    picked = rng.sample(docs, 8)
    return "POST", "/v1/collections/paths/documents", {"documents": picked}


def run(base: str, kind: str, docs: list[dict[str, str]], n: int, seed: int) -> list[float]:
    """Latencies (ms) of ``n`` requests of ``kind``, one at a time."""
    rng = random.Random(seed)
    out = []
    with httpx.Client(base_url=base, timeout=60) as c:
        for _ in range(n):
            method, path, body = requests(kind, docs, rng)
            t0 = time.perf_counter()
            r = c.request(method, path, json=body)
            out.append((time.perf_counter() - t0) * 1e3)
            r.raise_for_status()
    return out


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", required=True, help="The commit (or branch) to compare with.")
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=200, help="Per kind, per round, per arm.")
    ap.add_argument("--rounds", type=int, default=3)
    add_results_arg(ap)
    args = ap.parse_args()
    ref = subprocess.run(["git", "rev-parse", "--short", args.against], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    old_tree = worktree(ref)
    folder = VAR / "request-path" / "stores"  # beside the worktree, not in it
    for arm in ("this", "ref"):
        shutil.rmtree(folder / arm, ignore_errors=True)
        (folder / arm).mkdir(parents=True)
    env = {"QKV_AUTO_TUNE": "false", "QKV_STORE_TIMEOUT_S": "60"}
    docs = corpus(args.docs)
    servers = {"this": Server(str(folder / "this" / "q.db"), MODEL, env),
               "ref": Server(str(folder / "ref" / "q.db"), MODEL, env,
                             cmd=[sys.executable, "-m", "cli"], cwd=old_tree)}
    lat: dict[str, dict[str, list[float]]] = {a: {k: [] for k in KINDS} for a in servers}
    try:
        fills = {arm: round(fill(s.base, docs), 2) for arm, s in servers.items()}
        for s in servers.values():  # warm: the first searches pay for loading
            run(s.base, "hybrid", docs, 20, 0)
        for rnd in range(args.rounds):
            order = ["this", "ref"] if rnd % 2 == 0 else ["ref", "this"]
            for kind in KINDS:
                for arm in order:
                    lat[arm][kind] += run(servers[arm].base, kind, docs, args.requests, rnd)
    finally:
        for s in servers.values():
            s.stop()
    stats = {kind: {f"{q}_{arm}": pct(lat[arm][kind], x)
                    for q, x in (("p50", 0.5), ("p99", 0.99)) for arm in servers}
             for kind in KINDS}
    # the ratios first: the summary page shows a run's first six figures
    figures: dict[str, float | str | int] = {
        f"{kind}_p50_ratio": round(st["p50_this"] / st["p50_ref"], 3) for kind, st in stats.items()}
    figures.update({"fill_ratio": round(fills["this"] / fills["ref"], 3), "against": ref,
                    "docs": args.docs, "fill_s_this": fills["this"], "fill_s_ref": fills["ref"]})
    lines = [f"## The request path: this checkout against {ref}", "",
             f"{args.docs} demo chunks in each of two Milvus Lite files; {args.rounds} rounds "
             f"x {args.requests} requests of each kind per server, one at a time, the "
             "servers taking turns.", "",
             "| requests | p50 this (ms) | p50 ref (ms) | ratio | p99 this | p99 ref |",
             "|---|---|---|---|---|---|",
             f"| fill ({args.docs} docs, upserts of 64) | {fills['this']} s | "
             f"{fills['ref']} s | {figures['fill_ratio']:.3f} | | |"]
    for kind, st in stats.items():
        figures.update({f"{kind}_{name}": v for name, v in st.items()})
        lines.append(f"| {kind} | {st['p50_this']} | {st['p50_ref']} | "
                     f"{figures[f'{kind}_p50_ratio']:.3f} | {st['p99_this']} | "
                     f"{st['p99_ref']} |")
    section = "\n".join(lines)
    print(section)
    record("request_path", " ".join(["python", "bench/request_path.py", *sys.argv[1:]]),
           figures, section=section, results=args.results)


if __name__ == "__main__":
    main()
