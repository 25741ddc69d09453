"""Races between data and admin calls: 8 clients search, upsert, drop and re-create one
collection through ``qkv serve`` until 10,000 answers are in, then rounds of 8 concurrent
creates of one new name. Issue 44's targets: no answer >= 500, exactly one 201 per round.

Usage: python bench/races.py [--store lite|faiss] [--requests 10000] [--clients 8]
       [--rounds 20] [--model DIR] [--results DIR]

Prints the answers by status and a section, recorded with the figures (``bench/machine.py``).
``tests/api/test_races.py`` runs the same mix for 6 s.
"""

from __future__ import annotations

import argparse
import random
import shlex
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def one_request(c: httpx.Client, rnd: random.Random) -> httpx.Response:
    """One request of the mix (search 5 : upsert 5 : drop 1 : create 1) on collection
    ``race``; ``tests/api/test_races.py`` sends the same."""
    action = rnd.choices(("search", "upsert", "drop", "create"), (5, 5, 1, 1))[0]
    if action == "search":
        return c.post("/v1/collections/race/search", json={"query": "a dog", "top_k": 3})
    if action == "upsert":
        docs = [{"id": f"d{rnd.randrange(50)}", "text": f"a dog number {i}"}
                for i in range(rnd.randint(1, 8))]
        return c.post("/v1/collections/race/documents", json={"documents": docs})
    if action == "drop":
        return c.delete("/v1/collections/race")
    return c.post("/v1/collections", json={"name": "race"})


def _mixed(base: str, seed: int, statuses: Counter[int], samples: dict[int, str],
           left: list[int], lock: threading.Lock) -> None:
    rnd = random.Random(seed)
    with httpx.Client(base_url=base, timeout=60) as c:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            r = one_request(c, rnd)
            with lock:
                statuses[r.status_code] += 1
                if r.status_code >= 500:
                    samples.setdefault(r.status_code, r.text[:300])


def _creates(base: str, clients: int, name: str) -> list[int]:
    barrier, got = threading.Barrier(clients), []

    def create() -> None:
        with httpx.Client(base_url=base, timeout=60) as c:
            barrier.wait()
            got.append(c.post("/v1/collections", json={"name": name}).status_code)

    threads = [threading.Thread(target=create) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(got)


def run(store: str, model: str, requests: int, clients: int, rounds: int, log_dir: Path
        ) -> tuple[Counter[int], dict[int, str], float, int]:
    sys.path.insert(0, str(ROOT / "tests/api"))
    sys.path.insert(0, str(ROOT / "tests"))
    from uvicorn_server import UvicornServer

    server = UvicornServer(log_dir / "races-serve.log", args=["--store", store, "--model",
                                                               model],
                           env={"QKV_AUTO_TUNE": "false"})
    base = server.start()
    try:
        httpx.post(f"{base}/v1/collections", json={"name": "race"}, timeout=60)
        statuses: Counter[int] = Counter()
        samples: dict[int, str] = {}
        left, lock = [requests], threading.Lock()
        t0 = time.perf_counter()
        threads = [threading.Thread(target=_mixed, args=(base, i, statuses, samples, left,
                                                         lock)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
        exactly_one = sum(_creates(base, clients, f"once{i}") == [201] + [409] * (clients - 1)
                          for i in range(rounds))
    finally:
        server.stop()
    return statuses, samples, seconds, exactly_one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", choices=("lite", "faiss"), default="lite")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--model", default="models/encoder-default")
    sys.path.insert(0, str(ROOT / "bench"))
    from machine import add_results_arg, record, stamp

    add_results_arg(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "lite.db") if args.store == "lite" else f"faiss://{tmp}/f"
        statuses, samples, seconds, one = run(store, args.model, args.requests, args.clients,
                                              args.rounds, Path(tmp))
    five = sum(n for s, n in statuses.items() if s >= 500)
    line = (f"{args.store}: {sum(statuses.values()):,} mixed requests (search 5 : upsert 5 : "
            f"drop 1 : create 1) from {args.clients} clients in {seconds:.0f} s: **{five} "
            f"answers >= 500**; by status {dict(sorted(statuses.items()))}. Concurrent creates "
            f"of one name ({args.clients} at once): exactly one 201 in **{one} of "
            f"{args.rounds}** rounds.")
    print(line, *(f"{s}: {t}" for s, t in samples.items()), sep="\n")
    command = shlex.join(["python", *sys.argv])
    section = "\n".join([f"## Races: data and admin calls at once ({stamp()})", "",
                         f"`{command}`", "", line])
    record("races", command, {
        "store": args.store, "answers_ge_500": five, "exactly_one_201_rounds": one,
        "rounds": args.rounds, "requests": sum(statuses.values()), "clients": args.clients,
        "seconds": round(seconds), "answers": {str(k): v for k, v in sorted(statuses.items())}},
        section=section, results=args.results)


if __name__ == "__main__":
    main()
