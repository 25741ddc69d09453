"""First start and second start of the service as ``make run`` starts it, timed until the
demo is usable, and until its token memory is built.

Usage: python bench/first_start.py [--runs 2] [--no-vectors]

Each run starts ``qkv serve`` with ``make run``'s demo options on a fresh Milvus Lite file
under ``var/bench/first-start/``, and times (from launching the process) until both demo
collections answer over HTTP: a search of ``docs`` and a generate of ``tm-en-fr`` both
return 200 with results; and until ``/ready`` says both are filled (the service fills them
in the background). Then it stops the server and starts it again on the same file
(the second start). ``--no-vectors`` hides the shipped demo vectors
(``data/demo/*.vectors.npz``) from the first start by pointing the server at copies of the
corpora without them, so a first start that has to encode is measured in the same run.
Prints a markdown section and records it with the figures, a row per start
(``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
from machine import add_results_arg, record
from workload import ROOT, free_port, stop_tree

VAR = ROOT / "var/bench/first-start"
QKV = str(Path(sys.executable).with_name("qkv"))
DEMO = ROOT / "data/demo"
CORPUS, TM = "python-docs.jsonl.gz", "multi30k-en-fr.jsonl.gz"


def usable(base: str) -> bool:
    """Both demo collections answer: a search of docs, a generate of tm-en-fr."""
    try:
        s = httpx.post(f"{base}/v1/collections/docs/search", timeout=30,
                       json={"query": "how do I read a JSON file", "top_k": 3})
        g = httpx.post(f"{base}/v1/collections/tm-en-fr/generate", timeout=60,
                       json={"query": "A man is riding a bike.", "top_k": 4})
    except httpx.HTTPError:
        return False
    return (s.status_code == 200 and bool(s.json()["hits"]) and g.status_code == 200
            and bool(g.json()["text"]))


def filled(base: str) -> tuple[bool, bool]:
    """(every demo collection is filled, and the translation memory's token memory is
    built): ``/ready``'s ``seeding`` entries complete."""
    try:
        r = httpx.get(f"{base}/ready", timeout=5)
    except httpx.HTTPError:
        return False, False
    if r.status_code != 200:
        return False, False
    seeding = r.json().get("seeding") or []
    return (all(p["state"] == "complete" for p in seeding if "kind" not in p),
            all(p["state"] == "complete" for p in seeding))


def start(store: Path, demo_dir: Path) -> tuple[float, float, float]:
    """Seconds from launching ``qkv serve`` until the demo is usable, until its
    collections are filled, and until the token memory is built (or read); the server is
    stopped afterwards."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [QKV, "serve", "--port", str(port), "--store", str(store),
           "--model", "models/encoder-default", "--demo", str(demo_dir / CORPUS),
           "--demo-tm", str(demo_dir / TM), "--decoder", "tm-en-fr=models/decoder-en-fr",
           "--demo-token-memory", str(store.with_suffix(".knn")), "--log-level", "warning"]
    log = open(VAR / f"serve-{port}.log", "w")  # noqa: SIM115
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "TQDM_DISABLE": "1"})
    answered = collections = None
    try:
        while time.perf_counter() - t0 < 1200:
            if proc.poll() is not None:
                raise SystemExit(f"server exited {proc.returncode}; see {log.name}")
            if answered is None and usable(base):
                answered = time.perf_counter() - t0
            if answered is not None:
                done, tokens = filled(base)
                if done and collections is None:
                    collections = time.perf_counter() - t0
                if tokens and collections is not None:
                    return answered, collections, time.perf_counter() - t0
            time.sleep(0.1)
        raise SystemExit(f"not usable and filled after 1200 s; see {log.name}")
    finally:
        stop_tree(proc)
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="first + second start pairs")
    ap.add_argument("--no-vectors", action="store_true",
                    help="also time first starts that encode the corpora")
    add_results_arg(ap)
    args = ap.parse_args()
    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir(parents=True)
    bare = VAR / "demo-without-vectors"
    bare.mkdir()
    for name in (CORPUS, TM):
        shutil.copy(DEMO / name, bare / name)
    setups = [("shipped vectors", DEMO)] + ([("encoding", bare)] if args.no_vectors else [])
    rows, figures = [], []
    for label, demo_dir in setups:
        for run in range(args.runs):
            store = VAR / f"{label.replace(' ', '-')}-{run}.db"
            first, first_filled, first_tokens = start(store, demo_dir)
            second, _, second_tokens = start(store, demo_dir)
            print(f"{label} run {run}: first {first:.1f} s (filled {first_filled:.1f} s, "
                  f"token memory {first_tokens:.1f} s), second {second:.1f} s (token memory "
                  f"{second_tokens:.1f} s)", flush=True)
            rows.append(f"| {label} | {run} | {first:.1f} | {first_filled:.1f} | "
                        f"{first_tokens:.1f} | {second:.1f} | {second_tokens:.1f} | "
                        f"{first / second:.2f} |")
            figures.append({
                "demo_vectors": label, "run": run, "first_start_s": round(first, 1),
                "filled_s": round(first_filled, 1), "token_memory_built_s": round(first_tokens, 1),
                "second_start_s": round(second, 1), "token_memory_read_s": round(second_tokens, 1),
                "first_x_second": round(first / second, 2)})
    command = f"python bench/first_start.py --runs {args.runs}" + (
        " --no-vectors" if args.no_vectors else "")
    section = "\n".join([
        f"## First start until the demo answers ({time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} CPUs, {platform.machine()})",
        "",
        f"Command: `{command}`. Seconds from launching `qkv serve` "
        "with `make run`'s demo options on a fresh Lite file until a search of `docs` and a "
        "generate of `tm-en-fr` both answer 200 (*first start*), and until `/ready` says "
        "both are filled (*filled*; meanwhile their answers carry `seeding`, and come from "
        "the documents written so far), and until the translation memory's token memory is "
        "built from it (`--demo-token-memory`; generate uses it from then on); the second "
        "start reuses the file and reads the token memory.",
        "",
        "| demo vectors | run | first start (s) | filled (s) | token memory built (s) | "
        "second start (s) | token memory read (s) | first / second |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ])
    print(section)
    for i, fig in enumerate(figures):
        record("first_start", command, fig, section=section, results=args.results,
               regenerate=i == len(figures) - 1)


if __name__ == "__main__":
    main()
