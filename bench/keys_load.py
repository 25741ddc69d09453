"""API keys under load (issue 39's targets), with wrk against real ``qkv serve`` processes
on the same real sentences as ``bench/api_load.py``:

(a) the cost of key checks: ``POST /v1/embeddings`` (one sentence a request, 32
    connections) on a server without keys and on one whose keys file holds 1,000 keys,
    the client sending one of them; in the order A B B A A B ..., the ratio of the sums;
(b) limits: a ``quiet`` key's p99 at 4 connections alone, then again while a ``noisy`` key
    limited to 20 requests/s sends from 32 more connections (its 429s counted).

Usage: python bench/keys_load.py --data ../shared/data [--seconds 20]
Needs ``wrk`` (Debian: apt-get install wrk). Prints a markdown section and records it with
the figures (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
from api_load import QKV, VAR, Server  # noqa: F401 (QKV: the server's command)
from machine import add_results_arg, record, stamp
from workload import ROOT, real_texts

WRK_LUA = """
local bodies = {}
for line in io.lines(os.getenv("BODIES")) do bodies[#bodies + 1] = line end
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if os.getenv("AUTH") ~= "" then wrk.headers["Authorization"] = "Bearer " .. os.getenv("AUTH") end
request = function()
  i = i + 1
  return wrk.format(nil, nil, nil, bodies[(i % #bodies) + 1])
end
done = function(summary, latency, requests)
  io.write(string.format('{"requests": %d, "duration_us": %d, "status": %d, "p50_us": %d, ' ..
    '"p99_us": %d}\\n', summary.requests, summary.duration, summary.errors.status,
    latency:percentile(50), latency:percentile(99)))
end
"""


def wrk(url: str, bodies: Path, auth: str, clients: int, seconds: float) -> dict[str, float]:
    script = VAR / "keys-load.lua"
    script.write_text(WRK_LUA)
    out = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{seconds:.0f}s", "--timeout",
                          "30s", "-s", str(script), url],
                         env={**os.environ, "BODIES": str(bodies), "AUTH": auth},
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    secs = r["duration_us"] / 1e6
    return {"rps": (r["requests"] - r["status"]) / secs, "non2xx": r["status"] / secs,
            "p50": r["p50_us"] / 1e3, "p99": r["p99_us"] / 1e3}


def keys_file(path: Path, n: int, named: dict[str, dict]) -> dict[str, str]:  # type: ignore[type-arg]
    from api.keys import new_key, write_keys

    keys, secrets = {}, {}
    for i in range(n):
        spec = named.get(str(i), {"scope": "read"})
        key, secret = new_key(**spec)
        keys[key.id], secrets[str(i)] = key, secret
    write_keys(path, keys)
    return secrets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--model", default="models/encoder-default")
    ap.add_argument("--rounds", type=int, default=3, help="A B pairs of part (a)")
    ap.add_argument("--parts", default="checks,limits")
    add_results_arg(ap)
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: install it (Debian: apt-get install wrk)")
    VAR.mkdir(parents=True, exist_ok=True)
    sentences = [t for _, t in real_texts(args.data, 4000)]
    bodies = VAR / "keys-bodies.jsonl"
    bodies.write_bytes(b"".join(orjson.dumps({"input": s, "truncate": True}) + b"\n"
                                for s in sentences))
    store = VAR / "keys-load" / "qkv.db"
    shutil.rmtree(store.parent, ignore_errors=True)
    store.parent.mkdir(parents=True)
    kf = VAR / "keys-load" / "keys.jsonl"
    secrets = keys_file(kf, 1000, {"0": {"scope": "read"}, "1": {"scope": "read", "rps": 20}})
    rel = str(store.relative_to(ROOT))
    lines: list[str] = []
    fig: dict[str, object] = {}

    # (a) without keys and with 1,000, alternated
    runs: dict[str, list[dict[str, float]]] = {"open": [], "keys": []}
    pair = (("open", {"QKV_KEYS_FILE": str(VAR / "none.jsonl")}, ""),
            ("keys", {"QKV_KEYS_FILE": str(kf)}, secrets["0"]))
    for i in range(args.rounds if "checks" in args.parts else 0):
        for name, env, auth in pair if i % 2 == 0 else pair[::-1]:  # A B, B A, A B, ...
            server = Server(rel, args.model, env)
            try:
                wrk(server.base + "/v1/embeddings", bodies, auth, 32, 3)  # warm-up
                runs[name].append(wrk(server.base + "/v1/embeddings", bodies, auth, 32,
                                      args.seconds))
                print(name, runs[name][-1], flush=True)
            finally:
                server.stop()
    if runs["open"]:
        total = {k: sum(r["rps"] for r in v) for k, v in runs.items()}
        each = {k: ", ".join(f"{r['rps']:.0f}" for r in v) for k, v in runs.items()}
        lines.append(f"- **Key checks**: /v1/embeddings, 32 connections, {args.seconds:.0f} s "
                     f"× {args.rounds} each, in the order A B B A ...: no keys "
                     f"{each['open']} req/s; 1,000 keys in the file {each['keys']} req/s: **"
                     f"{total['keys'] / total['open']:.3f} ×** (target ≥ 0.95).")
        fig |= {"keys_x_no_keys": round(total["keys"] / total["open"], 3),
                "no_keys_req_per_s": [round(r["rps"]) for r in runs["open"]],
                "keys_1000_req_per_s": [round(r["rps"]) for r in runs["keys"]]}
    if "limits" not in args.parts:
        return _write(lines, fig, args.results)

    # (b) a quiet key alone, then beside a noisy one over its limit
    server = Server(rel, args.model, {"QKV_KEYS_FILE": str(kf)})
    try:
        url = server.base + "/v1/embeddings"
        wrk(url, bodies, secrets["0"], 4, 3)
        alone = wrk(url, bodies, secrets["0"], 4, args.seconds)
        noisy: dict[str, float] = {}
        t = threading.Thread(target=lambda: noisy.update(
            wrk(url, bodies, secrets["1"], 32, args.seconds + 4)))
        t.start()
        time.sleep(2)
        beside = wrk(url, bodies, secrets["0"], 4, args.seconds)
        t.join()
    finally:
        server.stop()
    lines.append(f"- **Limits**: the quiet key (4 connections) alone: p50 {alone['p50']:.1f} "
                 f"ms, p99 {alone['p99']:.1f} ms, {alone['rps']:.0f} req/s; beside a key "
                 f"limited to 20 req/s sending from 32 connections ({noisy['rps']:.0f} "
                 f"served/s, {noisy['non2xx']:.0f} answered 429/s): p50 {beside['p50']:.1f} "
                 f"ms, p99 {beside['p99']:.1f} ms, {beside['rps']:.0f} req/s: p99 "
                 f"**{beside['p99'] / alone['p99']:.2f} ×** unloaded (target ≤ 1.5).")
    fig |= {"quiet_p99_x_unloaded": round(beside["p99"] / alone["p99"], 2),
            "quiet_alone_p50_ms": round(alone["p50"], 1),
            "quiet_alone_p99_ms": round(alone["p99"], 1),
            "quiet_alone_req_per_s": round(alone["rps"]),
            "quiet_beside_p50_ms": round(beside["p50"], 1),
            "quiet_beside_p99_ms": round(beside["p99"], 1),
            "quiet_beside_req_per_s": round(beside["rps"]),
            "noisy_served_per_s": round(noisy["rps"]), "noisy_429_per_s": round(noisy["non2xx"])}
    _write(lines, fig, args.results)


def _write(lines: list[str], fig: dict[str, object], results: Path | None) -> None:
    command = shlex.join(["python", "bench/keys_load.py", *sys.argv[1:]])
    section = "\n".join([f"## API keys under load ({stamp()})", "", f"`{command}`", "", *lines])
    print(section)
    record("keys_load", command, fig, section=section, results=results)


if __name__ == "__main__":
    main()
