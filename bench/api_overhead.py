"""What the HTTP stack costs the event loop a request, without the network or the encoder.

Usage: python bench/api_overhead.py --data ../shared/data [--requests 2000] [--rounds 8]

The app (``api.app.create_app``: its middleware, routing, validation, tokenizing, the
batcher's hand-over and the JSON answer) runs in this process on a Milvus Lite file under
var/bench with the shipped encoder, whose forward is replaced by one that returns zeros: the
encoder's own cost is bench/encode_profile.py's. ASGI calls go straight to the app from 32
concurrent tasks on uvloop, as uvicorn makes them (no sockets: wrk and the kernel are
bench/api_load.py's). The figure is the main thread's CPU time a request (``thread_time``),
which on a real server is the event loop's: what bounds requests/s when the encoder is fast.

Routes: ``GET /health`` and ``POST /v1/embeddings`` (one real sentence each, bench/workload's
sentences). ``/v1/embeddings`` runs in rounds alternating between the heap as the service
keeps it (frozen at startup, ``wiring.memory.freeze_heap``) and thawed (``gc.unfreeze``, as
before): its ratio is the garbage collector's share, side by side; and one full collection
of the thawed heap is timed. Prints a markdown section and records it with the figures
(``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from machine import add_results_arg, record, stamp
from workload import ROOT, real_texts

VAR = ROOT / "var/bench"
CONCURRENCY = 32


async def call(app: Any, method: str, path: str, body: bytes = b"") -> None:
    """One request straight into the ASGI app; asserts a 200."""
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80),
             "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    await app(scope, receive, send)
    if sent[0]["status"] != 200:
        raise SystemExit(f"{method} {path}: {sent[0]['status']} {sent[1:]}")


async def cpu_per_request(make: Callable[[int], Any], n: int) -> float:
    """Microseconds of this thread's CPU a request, ``n`` requests ``CONCURRENCY`` at once."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        async with gate:
            await make(i)

    c0 = time.thread_time()
    await asyncio.gather(*(one(i) for i in range(n)))
    return 1e6 * (time.thread_time() - c0) / n


async def measure(texts: list[str], requests: int, rounds: int) -> dict[str, Any]:
    import numpy as np

    from api.app import create_app
    from api.settings import Settings
    from wiring import memory

    db = VAR / "api-overhead.db"
    shutil.rmtree(db, ignore_errors=True)
    app = create_app(Settings(store=str(db), model=ROOT / "models/encoder-default"))
    bodies = [orjson.dumps({"input": t, "truncate": True}) for t in texts]
    async with app.router.lifespan_context(app):
        svc = app.state.service
        dim = svc.encoder.dim
        svc.batcher.encode_ids = lambda ids: np.zeros((len(ids), dim), np.float32)
        frozen_at_start = gc.get_freeze_count()

        def embed(i: int) -> Any:
            return call(app, "POST", "/v1/embeddings", bodies[i % len(bodies)])

        def health(i: int) -> Any:
            return call(app, "GET", "/health")

        await cpu_per_request(embed, 500)  # warm-up
        await cpu_per_request(health, 500)
        health_us = [await cpu_per_request(health, requests) for _ in range(rounds)]
        memory.thaw_heap()
        t0 = time.perf_counter()
        gc.collect()  # one full collection of the heap as it was before the freeze
        full_ms = 1e3 * (time.perf_counter() - t0)
        us: dict[str, list[float]] = {"frozen": [], "thawed": []}
        for r in range(rounds):
            for mode in ("frozen", "thawed") if r % 2 == 0 else ("thawed", "frozen"):
                if mode == "frozen":
                    memory.freeze_heap()
                else:
                    memory.thaw_heap()
                us[mode].append(await cpu_per_request(embed, requests))
        memory.freeze_heap()  # as the service left it, for its shutdown
    frozen, thawed = us["frozen"], us["thawed"]
    return {"health_us": round(statistics.median(health_us), 1),
            "embeddings_frozen_us": round(statistics.median(frozen), 1),
            "embeddings_thawed_us": round(statistics.median(thawed), 1),
            "thawed_over_frozen": round(sum(thawed) / sum(frozen), 3),
            "full_collection_ms": round(full_ms, 1),
            "frozen_objects": frozen_at_start, "requests": requests, "rounds": rounds,
            "concurrency": CONCURRENCY,
            "frozen_rounds_us": [round(x) for x in frozen],
            "thawed_rounds_us": [round(x) for x in thawed]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="../shared/data")
    ap.add_argument("--requests", type=int, default=2000, help="requests a round")
    ap.add_argument("--rounds", type=int, default=8, help="rounds of each")
    add_results_arg(ap)
    args = ap.parse_args()
    VAR.mkdir(parents=True, exist_ok=True)
    texts = [t for _, t in real_texts(args.data, 4096)]
    import uvloop

    from wiring import runtime

    runtime.configure()
    f = uvloop.run(measure(texts, args.requests, args.rounds))
    section = f"""## Event-loop CPU a request, in process (bench/api_overhead.py)

{stamp()}. The app in this process, the encoder's forward stubbed, {CONCURRENCY} requests at
once straight into ASGI; main-thread CPU a request, median of {args.rounds} rounds of
{args.requests}.

| route | CPU a request |
|---|---|
| GET /health | {f['health_us']:.0f} µs |
| POST /v1/embeddings, heap frozen at startup (as served) | {f['embeddings_frozen_us']:.0f} µs |
| POST /v1/embeddings, heap thawed (before the freeze) | {f['embeddings_thawed_us']:.0f} µs |

Thawed over frozen, sum of the alternating rounds: **{f['thawed_over_frozen']:.2f} ×**
({f['frozen_objects']:,} objects frozen at startup; one full collection of them, thawed,
took {f['full_collection_ms']:.0f} ms, the GIL held).
"""
    print(section)
    command = "python bench/api_overhead.py " + shlex.join(sys.argv[1:])
    record("api_overhead", command, f, section=section, results=args.results)


if __name__ == "__main__":
    main()
