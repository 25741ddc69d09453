"""``qkv serve`` and ``qkv index`` on each device of a machine, the GPU against the CPU path of
the same machine (issue 43, item 4: serving and indexing on CUDA, end to end).

Usage: python bench/serve_device.py [--devices cpu,cuda] [--n 4096] [--docs 20000] [--record]

Texts: sentences of the committed Python-docs demo corpus (``bench/encode_gpu.py``'s), so the
script needs no data directory and runs on a lent GPU machine as the checkout travels (with
the service's packages carried as wheels: ``bench/gpu_carry.sh``). For each device, in
turn, in fresh processes with ``QKV_DEVICE`` set (the CPU path is the service's default
there, whichever backend its self-timing picks):

* ``serve``: ``qkv serve`` on a new Milvus Lite file; ``POST /v1/embeddings`` of the texts
  in requests of 32 and of 256 (sentences/s, one client, then four at once), and of one
  sentence (p50 and p95 of 200 sequential requests after 20 warm-ups); ``/v1/models`` says
  which backend ran. The vectors of the first 256 texts are kept: the lowest cosine of
  each device's to the first device's is the quality bound (issue 43: ≥ 0.999).
* ``index``: ``qkv index`` of ``--docs`` sentences as documents into a new Lite file
  (``--no-tune``), wall time of the whole command, model load included: documents/s.

Prints a JSON line per device and the ratios of each to the first; ``--record`` adds them
to ``bench/results/serve_device.jsonl``.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from api_load import QKV_CMD, VAR, Server  # noqa: E402
from encode_gpu import sentences  # noqa: E402

BATCHES = (32, 256)
CLIENTS = 4
LATENCY_CALLS, WARMUPS = 200, 20
COSINE_TEXTS = 256


def embed(client: httpx.Client, texts: list[str]) -> np.ndarray:
    r = client.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64",
                                              "truncate": True})
    r.raise_for_status()
    rows = [base64.b64decode(d["embedding"]) for d in r.json()["data"]]
    return np.frombuffer(b"".join(rows), "<f4").reshape(len(rows), -1)


def throughput(base: str, texts: list[str], batch: int, clients: int) -> float:
    """Sentences/s of ``texts`` sent in requests of ``batch``, by ``clients`` threads at
    once, each with its own connection and every ``clients``-th request."""
    chunks = [texts[i:i + batch] for i in range(0, len(texts), batch)]

    def send(mine: list[list[str]]) -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            for chunk in mine:
                embed(client, chunk)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, [chunks[i::clients] for i in range(clients)]))
    return len(texts) / (time.perf_counter() - t0)


def serve(device: str, model: str, texts: list[str]) -> tuple[dict[str, Any], np.ndarray]:
    store = VAR / f"serve-device-{device.replace(':', '-')}.db"
    shutil.rmtree(store, ignore_errors=True)  # a Milvus Lite store is a folder
    server = Server(str(store), model, {"QKV_DEVICE": device})
    try:
        with httpx.Client(base_url=server.base, timeout=120) as client:
            card = client.get("/v1/models").json()["data"][0]
            vectors = embed(client, texts[:COSINE_TEXTS])
            fig: dict[str, Any] = {"backend": card.get("backend"),
                                   "backend_why": card.get("backend_why")}
            for batch in BATCHES:
                throughput(server.base, texts[:batch * 2], batch, 1)  # warm-up
                fig[f"serve_b{batch}_per_s"] = round(throughput(server.base, texts, batch, 1))
                fig[f"serve_b{batch}_x{CLIENTS}_per_s"] = round(
                    throughput(server.base, texts, batch, CLIENTS))
            times = []
            for i in range(WARMUPS + LATENCY_CALLS):
                t0 = time.perf_counter()
                embed(client, [texts[i % len(texts)]])
                if i >= WARMUPS:
                    times.append((time.perf_counter() - t0) * 1e3)
            fig["serve_b1_p50_ms"] = round(statistics.median(times), 2)
            fig["serve_b1_p95_ms"] = round(float(np.percentile(times, 95)), 2)
    finally:
        server.stop()
    return fig, vectors


def index(device: str, model: str, docs: list[str]) -> dict[str, Any]:
    tag = device.replace(":", "-")
    store, path = VAR / f"index-device-{tag}.db", VAR / "index-device-docs.jsonl"
    shutil.rmtree(store, ignore_errors=True)
    path.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n"
                            for i, t in enumerate(docs)))
    cmd = [*QKV_CMD, "index", "--collection", "bench_device", "--input", str(path),
           "--store", str(store), "--model", model, "--device", device, "--no-tune",
           "--no-progress", "--restart", "--state-dir", str(VAR / f"index-device-{tag}")]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    return {"index_docs": len(docs), "index_s": round(wall, 1),
            "index_docs_per_s": round(len(docs) / wall)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models/encoder-default"))
    ap.add_argument("--devices", default=None, help="comma-separated; default cpu, and cuda "
                    "where torch sees one")
    ap.add_argument("--n", type=int, default=4096, help="texts for the serving figures")
    ap.add_argument("--docs", type=int, default=20_000, help="documents indexed")
    ap.add_argument("--record", action="store_true",
                    help="also record the figures (bench/results/serve_device.jsonl)")
    from machine import add_results_arg, record

    add_results_arg(ap)
    args = ap.parse_args()
    import torch

    devices = (args.devices.split(",") if args.devices else
               ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    VAR.mkdir(parents=True, exist_ok=True)
    texts = sentences(args.n)
    pool = sentences(args.docs)  # repeated (under new ids) if the corpus has fewer
    docs = (pool * (args.docs // max(len(pool), 1) + 1))[:args.docs]
    rows: dict[str, dict[str, Any]] = {}
    first: np.ndarray | None = None
    for device in devices:
        fig, vectors = serve(device, args.model, texts)
        first = vectors if first is None else first
        fig["min_cosine_to_first"] = round(float((vectors * first).sum(axis=1).min()), 5)
        fig |= index(device, args.model, docs)
        if device.startswith("cuda"):
            fig["device_name"] = torch.cuda.get_device_name()
        rows[device] = fig
        print(json.dumps({"device": device, **fig}), flush=True)
    figures: dict[str, Any] = {"texts": len(texts), "devices": devices, **{
        f"{d}_{k}": v for d, fig in rows.items() for k, v in fig.items()}}
    for d in devices[1:]:
        for k, v in rows[d].items():
            if k.endswith("_per_s") and rows[devices[0]].get(k):
                figures[f"{d}_x_{devices[0]}_{k[:-len('_per_s')]}"] = round(
                    v / rows[devices[0]][k], 2)
    print(json.dumps(figures))
    if args.record:
        record("serve_device", "python bench/serve_device.py " + " ".join(sys.argv[1:]),
               figures, results=args.results)


if __name__ == "__main__":
    main()
