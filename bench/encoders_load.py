"""Serving several encoders at once (issue 38): memory and throughput of one service with
three encoders against the same service with one.

Usage: python bench/encoders_load.py --data ../shared/data [--seconds 20] [--clients 16]
       [--rounds 1]

Two derived encoders are written into the service's encoders directory (the shipped one
renamed, its weights scaled by 1.01: another fingerprint, the same cost). One server, wrk
runs of ``POST /v1/embeddings`` (one sentence a request, real texts): A, every request for
the default encoder; then one B run not counted, requests cycling over the three encoders
(each has its own batcher, so a batch holds one encoder's texts), which loads the two
derived ones; then B, A (the machine drifts). With ``--rounds N``, N B runs each followed
by an A run (A B' B A B ... A, B' the loading run): the machine here drifts
by ±6 % between runs of one kind, so one round cannot tell a few per cent apart. Reported:
each B's requests/s against the mean of the A runs either side of it (the median of those
ratios over the rounds), and the server's RSS with one encoder
loaded against three, next to what the two extra encoders' weights take in memory. Prints a
markdown section and records it with the figures (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from api_load import VAR, Server, run_load  # noqa: E402
from machine import add_results_arg, record, stamp  # noqa: E402
from workload import real_texts  # noqa: E402


def derive(model: Path, root: Path, name: str) -> int:
    """The shipped encoder as ``name`` under ``root``; returns its weights' bytes (fp32)."""
    import torch

    import encoder
    from wiring.components import write_card

    enc = encoder.load(model, device="cpu", backend="torch")
    enc.model.config = type(enc.model.config)(**{**enc.model.config.to_dict(), "name": name})
    with torch.no_grad():
        for p in enc.model.parameters():
            p.mul_(1.01)
    enc.save(root / name, enc.meta)
    write_card(root / name, {"name": name, "base": "qkv-encoder-default", "collection": None,
                             "created": 0, "dim": enc.dim, "dims": list(enc.dims)})
    return sum(p.numel() * 4 for p in enc.model.parameters())


def rss_mb(server: Server) -> float:
    proc = psutil.Process(server.proc.pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--model", default="models/encoder-default")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1,
                    help="three-encoder runs, each between two one-encoder runs")
    add_results_arg(ap)
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    home = VAR / "encoders-load"
    shutil.rmtree(home, ignore_errors=True)
    (home / "encoders").mkdir(parents=True)
    names = ["qkv-encoder-default", "derived-1", "derived-2"]
    weights = sum(derive(ROOT / args.model, home / "encoders", n) for n in names[1:])
    texts = [t for _, t in real_texts(args.data, 3000)]
    one = [{"input": t} for t in texts]
    mixed = [{"input": t, "model": names[i % 3]} for i, t in enumerate(texts)]
    server = Server(str(home / "qkv.db"), args.model, {"QKV_ENCODERS_LOADED": "3"})
    try:
        ones = [run_load(server, "one encoder", "/v1/embeddings", one, args.clients,
                         args.seconds)]
        rss_one = rss_mb(server)
        # the first mixed requests load the two derived encoders (checkpoint, int8 ranges,
        # sessions), a once-a-process cost: that run is shown but not counted, so each
        # round times the same thing, three encoders already loaded
        first = run_load(server, "three encoders, loading two (not counted)",
                         "/v1/embeddings", mixed, args.clients, args.seconds)
        threes = []
        for _ in range(args.rounds):
            threes.append(run_load(server, "three encoders", "/v1/embeddings", mixed,
                                   args.clients, args.seconds))
            rss_three = rss_mb(server)
            ones.append(run_load(server, "one encoder again", "/v1/embeddings", one,
                                 args.clients, args.seconds))
    finally:
        server.stop()
    ratios = [b.rps / ((ones[r].rps + ones[r + 1].rps) / 2) for r, b in enumerate(threes)]
    ratio = float(statistics.median(ratios))
    extra = weights / 2**20
    command = shlex.join(["python", "bench/encoders_load.py", *sys.argv[1:]])
    lines = [f"## Three encoders in one service ({stamp()})", "", f"`{command}`", "",
             f"`POST /v1/embeddings`, one sentence a request, {args.clients} wrk connections, "
             f"{args.seconds:.0f} s each.", "",
             "| run | requests/s | p50 ms | p99 ms | errors |", "|---|---|---|---|---|"]
    runs = [ones[0], first] + [x for pair in zip(threes, ones[1:], strict=True) for x in pair]
    for load in runs:
        lines.append(f"| {load.name} | {load.rps:.0f} | {load.p50:.1f} | {load.p99:.1f} | "
                     f"{load.errors or 0} |")
    each = (f" (the median of {', '.join(f'{x:.3f}' for x in ratios)})"
            if len(ratios) > 1 else "")
    lines += ["", f"Three encoders: **{ratio:.3f} ×** the requests/s of one (against the mean "
              f"of the runs before and after){each}. RSS with one loaded {rss_one:.0f} MB, "
              f"with three {rss_three:.0f} MB: **{rss_three / (rss_one + extra):.3f} ×** one "
              f"plus the two extra encoders' fp32 weights ({extra:.0f} MB)."]
    section = "\n".join(lines)
    print(section)
    fig: dict[str, object] = {
        "three_x_one_req_per_s": round(ratio, 3), "rounds": args.rounds,
        "three_x_one_each": [round(x, 3) for x in ratios],
        "rss_three_x_one_plus_weights": round(rss_three / (rss_one + extra), 3),
        "rss_one_mb": round(rss_one), "rss_three_mb": round(rss_three),
        "extra_weights_mb": round(extra), "clients": args.clients, "seconds": args.seconds}
    for key, load in (("one", ones[0]), ("three", threes[-1]), ("one_again", ones[-1])):
        fig |= {f"{key}_req_per_s": round(load.rps), f"{key}_p50_ms": round(load.p50, 1),
                f"{key}_p99_ms": round(load.p99, 1), f"{key}_errors": sum(load.errors.values())}
    fig["loading_run_req_per_s"] = round(first.rps)
    record("encoders_load", command, fig, section=section, results=args.results)


if __name__ == "__main__":
    main()
