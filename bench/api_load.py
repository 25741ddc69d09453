"""API load benchmark: 32 concurrent clients against a real ``qkv serve`` process.

Usage: python bench/api_load.py --data ../shared/data [--seconds 30] [--clients 32]
       [--search-store lite|server|both|none]

In one run, on the same real sentences (``bench/workload.py``):
(a) offline: ``TextEncoder.encode(sentences, batch_size=64)`` in a child process: the
    sentences/s the service is measured against;
(b) ``POST /v1/embeddings``, one sentence per request, with dynamic batching (the defaults)
    and with it turned off (``QKV_BATCH_MAX_SIZE=1``);
(c) ``POST /v1/collections/bench_ingest/search`` (a text query, top_k 10) on the 100,000
    docs of the ingest benchmark, in Milvus Lite and/or a Milvus 2.3.5 server (indexed
    with ``qkv index`` first when missing).
Each load runs ``--seconds`` after a short warm-up, with ``--clients`` httpx async clients
on keep-alive connections in this process. The server's RSS is sampled, its CPU time and
its ``/metrics`` (encoder batches and encoder time) read before and after, to show where
the time goes. Prints a markdown section and appends it to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import orjson
import psutil
import uvloop
from workload import (
    ROOT,
    RssSampler,
    append_results,
    free_port,
    milvus_server,
    real_texts,
    stop_tree,
)

VAR = ROOT / "var/bench"
QKV = str(Path(sys.executable).with_name("qkv"))
N_SENTENCES = 20_000
WARMUP_S = 3.0


def offline_child(path: Path, model: str) -> None:
    """(a): encode the sentences with batch 64, as an offline job would."""
    from wiring import runtime

    runtime.configure()
    import encoder

    texts = json.loads(path.read_text())
    enc = encoder.load(model)
    enc.encode(texts[:512])
    t0 = time.perf_counter()
    enc.encode(texts, batch_size=64)
    seconds = time.perf_counter() - t0
    print(json.dumps({"sentences_s": len(texts) / seconds, "n": len(texts)}))


@dataclass
class Load:
    """What one load run measured."""

    name: str
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds

    def pct(self, q: float) -> float:
        return float(np.percentile(self.latencies, q) * 1e3) if self.latencies else 0.0


async def _drive(url: str, bodies: list[bytes], clients: int, seconds: float,
                 load: Load | None, method: str = "POST") -> None:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Content-Type": "application/json"}
    async with httpx.AsyncClient(limits=limits, timeout=60.0, headers=headers) as http:
        deadline = time.perf_counter() + seconds

        async def worker(i: int) -> None:
            j = i
            while time.perf_counter() < deadline:
                body = bodies[j % len(bodies)]
                j += clients
                t0 = time.perf_counter()
                try:
                    r = await (http.post(url, content=body) if method == "POST"
                               else http.get(url))
                    ok = r.status_code == 200
                    key = str(r.status_code)
                except httpx.HTTPError as e:
                    ok, key = False, type(e).__name__
                if load is not None:
                    if ok:
                        load.latencies.append(time.perf_counter() - t0)
                    else:
                        load.errors[key] = load.errors.get(key, 0) + 1

        await asyncio.gather(*(worker(i) for i in range(clients)))


def scrape(base: str) -> dict[str, float]:
    """The encoder's counters from /metrics."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    out = {}
    for name in ("qkv_encoder_batch_texts_sum", "qkv_encoder_batch_texts_count",
                 "qkv_encoder_batch_seconds_sum"):
        m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


class Server:
    """``qkv serve`` in a child process on a free port."""

    def __init__(self, store: str, model: str, env: dict[str, str]) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.cmd = [QKV, "serve", "--port", str(self.port), "--store", store, "--model", model,
                    "--log-level", "warning"]
        self.env = {**os.environ, **env}
        self.log = open(VAR / f"api-server-{self.port}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(f"{self.base}/ready", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"server not ready after 300 s; see {self.log.name}")

    def stop(self) -> None:
        stop_tree(self.proc)
        self.log.close()


def run_load(server: Server, name: str, path: str, requests: list[dict], clients: int,
             seconds: float, method: str = "POST") -> Load:
    """The clients send pre-serialised bodies on uvloop: the client's own CPU per request
    is part of what the 2 cores pay, so it is kept as small as httpx allows."""
    url = server.base + path
    bodies = [orjson.dumps(r) for r in requests]
    uvloop.run(_drive(url, bodies, clients, WARMUP_S, None, method))
    load = Load(name)
    proc = psutil.Process(server.proc.pid)
    before, cpu0, me0 = scrape(server.base), proc.cpu_times(), psutil.Process().cpu_times()
    with RssSampler(server.proc.pid) as rss:
        t0 = time.perf_counter()
        uvloop.run(_drive(url, bodies, clients, seconds, load, method))
        load.seconds = time.perf_counter() - t0
    after, cpu1, me1 = scrape(server.base), proc.cpu_times(), psutil.Process().cpu_times()
    load.peak_rss_mb = rss.peak_mb
    load.server_cpu_s = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    load.client_cpu_s = (me1.user + me1.system) - (me0.user + me0.system)
    load.metrics = {k: after[k] - before[k] for k in after}
    print(f"{name}: {load.rps:.0f} req/s, p50 {load.pct(50):.1f} ms, p99 {load.pct(99):.1f} ms, "
          f"errors {load.errors}, RSS {load.peak_rss_mb:.0f} MB", flush=True)
    return load


def ensure_collection(store: str, model: str, docs: Path) -> str:
    """``bench_ingest`` with the ingest benchmark's 100,000 docs in ``store``. The check runs
    in a child process: Milvus Lite keeps its file locked for as long as the process that
    opened it lives."""
    check = ("import sys; from index import open_store; s = open_store(sys.argv[1], "
             "timeout=900); ok = 'bench_ingest' in s.list_collections() and "
             "s.count('bench_ingest') >= 100_000; print(int(ok))")
    out = subprocess.run([sys.executable, "-c", check, store], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    if out.strip().endswith("1"):
        return "existing"
    state = VAR / f"api-jobs-{abs(hash(store)) % 10**6}"
    shutil.rmtree(state, ignore_errors=True)
    cmd = [QKV, "index", "--collection", "bench_ingest", "--input", str(docs), "--store", store,
           "--model", model, "--state-dir", str(state), "--no-progress", "--timeout", "60"]
    subprocess.run(cmd, cwd=ROOT, check=True)
    return "indexed now"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--model", default="models/encoder-default")
    ap.add_argument("--search-store", choices=("lite", "server", "both", "none"), default="both")
    ap.add_argument("--results", type=Path, default=ROOT / "bench/RESULTS.md")
    ap.add_argument("--child", choices=("offline",), help=argparse.SUPPRESS)
    ap.add_argument("--texts", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "offline":
        return offline_child(args.texts, args.model)
    if args.data is None:
        ap.error("--data is required")
    argv = shlex.join(["python", "bench/api_load.py", *sys.argv[1:]])
    VAR.mkdir(parents=True, exist_ok=True)
    sentences = [t for _, t in real_texts(args.data, N_SENTENCES)]
    texts_path = VAR / "api-sentences.json"
    texts_path.write_text(json.dumps(sentences[:8192]))
    out = subprocess.run([sys.executable, __file__, "--child", "offline", "--texts",
                          str(texts_path), "--model", args.model], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    offline = json.loads(out.strip().splitlines()[-1])
    print(f"offline encode, batch 64: {offline['sentences_s']:.0f} sentences/s", flush=True)

    # truncate: a few real sentences exceed the encoder's 256 tokens (OpenAI's default, which
    # we keep, answers 422 for those)
    bodies = [{"input": s, "truncate": True} for s in sentences]
    loads: dict[str, Load] = {}
    embed_db = VAR / "api-embed.db"
    for key, env in (("embeddings", {}), ("embeddings, batching off", {"QKV_BATCH_MAX_SIZE": "1"})):
        shutil.rmtree(embed_db, ignore_errors=True)
        server = Server(str(embed_db.relative_to(ROOT)), args.model, env)
        try:
            loads[key] = run_load(server, key, "/v1/embeddings", bodies, args.clients,
                                  args.seconds)
            if key == "embeddings":  # HTTP alone, same server and clients: the ceiling
                loads["HTTP only: GET /v1/models"] = run_load(
                    server, "HTTP only", "/v1/models", [{}], args.clients, args.seconds,
                    method="GET")
        finally:
            server.stop()

    search_bodies = [{"query": s, "top_k": 10} for s in reversed(sentences)]
    docs = VAR / "ingest-100000.jsonl"
    how: dict[str, str] = {}
    if args.search_store in ("lite", "both"):
        if not docs.exists():
            raise SystemExit(f"{docs} missing: run bench/ingest.py first (it writes the docs)")
        store = str((VAR / "ingest-lite.db").relative_to(ROOT))
        how["lite"] = ensure_collection(store, args.model, docs)
        server = Server(store, args.model, {"QKV_STORE_TIMEOUT_S": "60"})
        try:
            loads["search, Milvus Lite"] = run_load(server, "search, Milvus Lite",
                                                    "/v1/collections/bench_ingest/search",
                                                    search_bodies, args.clients, args.seconds)
        finally:
            server.stop()
    if args.search_store in ("server", "both"):
        server_dir = VAR / "milvus-2.3.5-api"
        shutil.rmtree(server_dir, ignore_errors=True)
        with milvus_server(server_dir) as (uri, _):
            how["server"] = ensure_collection(uri, args.model, docs)
            server = Server(uri, args.model, {"QKV_STORE_TIMEOUT_S": "60"})
            try:
                loads["search, Milvus 2.3.5 server"] = run_load(
                    server, "search, Milvus 2.3.5 server", "/v1/collections/bench_ingest/search",
                    search_bodies, args.clients, args.seconds)
            finally:
                server.stop()
        shutil.rmtree(server_dir, ignore_errors=True)
    append_results(report(args, argv, offline, loads))


def report(args: argparse.Namespace, argv: str, offline: dict, loads: dict[str, Load]) -> str:
    lines = [f"## API load ({time.strftime('%Y-%m-%d')}, {args.clients} clients, "
             f"{args.seconds:.0f} s each, {os.cpu_count()} CPU threads, localhost)", "",
             f"Command: `{argv}`", "",
             f"Offline `TextEncoder.encode(sentences, batch_size=64)` on {offline['n']:,} of "
             f"the same sentences: **{offline['sentences_s']:.0f} sentences/s**.", "",
             "| endpoint | requests/s | p50 ms | p99 ms | errors | server peak RSS (MB) | "
             "mean encoder batch | encoder busy | server CPU ms/req | client CPU ms/req |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, ld in loads.items():
        m = ld.metrics
        batches = m.get("qkv_encoder_batch_texts_count", 0)
        mean_batch = m["qkv_encoder_batch_texts_sum"] / batches if batches else 0
        busy = m.get("qkv_encoder_batch_seconds_sum", 0) / ld.seconds
        n = max(len(ld.latencies), 1)
        lines.append(
            f"| {name} | {ld.rps:.0f} | {ld.pct(50):.1f} | {ld.pct(99):.1f} | "
            f"{sum(ld.errors.values()) or 0}{' ' + str(ld.errors) if ld.errors else ''} | "
            f"{ld.peak_rss_mb:.0f} | {mean_batch:.1f} | {busy:.0%} | "
            f"{ld.server_cpu_s / n * 1e3:.2f} | {ld.client_cpu_s / n * 1e3:.2f} |")
    on, off = loads.get("embeddings"), loads.get("embeddings, batching off")
    if on and off:
        r1, r2 = on.rps / offline["sentences_s"], on.rps / off.rps
        lines += ["", f"`/v1/embeddings` with dynamic batching: {on.rps:.0f} sentences/s = "
                  f"**{r1:.2f} × offline** (target ≥ 0.5: {'met' if r1 >= 0.5 else 'MISSED'}), "
                  f"**{r2:.1f} × batching off** (target ≥ 3: {'met' if r2 >= 3 else 'MISSED'}); "
                  f"errors: {sum(on.errors.values())} and {sum(off.errors.values())}."]
    peak = max((ld.peak_rss_mb for ld in loads.values()), default=0)
    lines += [f"Serving process peak RSS over all runs: {peak:.0f} MB (target ≤ 1536 MB: "
              f"{'met' if peak <= 1536 else 'MISSED'}).",
              "",
              "Where the time goes: *encoder busy* is the encoder's own time (from "
              "`qkv_encoder_batch_seconds`) over the wall time; server CPU per request counts "
              "all of the server's threads (HTTP, JSON, tokenizing, encoder, store client); "
              "the load clients run in the benchmark's process on the same 2 cores, and their "
              "CPU per request is the last column. `GET /v1/models` (auth dependency, a small "
              "JSON body, no encoder, no store) on the same server with the same clients is "
              "what HTTP alone allows here."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
