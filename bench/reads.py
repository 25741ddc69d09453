"""Reads of a big collection on the default Lite store: from Lite's engine in this process
against the same calls through gRPC, side by side (issue 73: what a calibration, a
collection's count, the document list and an export read before they answer).

Usage: python bench/reads.py [--store var/bench/ingest-lite.db] [--collection bench_ingest]
       [--model models/encoder-default] [--rounds 3]

Needs the collection ``bench/ingest.py`` writes (100,000 documents of ``bench/workload.py``,
indexed by ``qkv index``: a collection with passages). Each read is what the service calls:

* *count*: ``count`` of every row; *documents*: ``count`` with the passage filter (a
  collection's document count, ``GET /v1/collections/{name}``);
* *sample*: ``sample`` of 3,000 rows (the start of every label-free calibration);
* *document ids*: the first 1,000 document ids (``ids`` with the passage filter: the
  document list's first page); *every key*: the sorted list an export or backup pages through;
* *calibration*: the whole label-free calibration (``wiring.calibrating.calibrate``, as
  ``qkv tune`` and the end of ``qkv index`` run it; it stores its result, the same each time).

Each is timed ``--rounds`` times, alternating the engine's direct answers
(:mod:`index.milvus.lite.direct`) and gRPC's (the direct path switched off as the tests switch
it off), and the medians printed with their ratio, then recorded (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from machine import add_results_arg, record, stamp  # noqa: E402

from index.milvus.lite import direct as lite_direct  # noqa: E402


def main() -> None:
    from index import open_store
    from index.hybrid.calibration import POOL, model_mapping
    from index.hybrid.fusion import model_dense_weight
    from index.passages import count_filter
    from wiring.calibrating import calibrate, embed_at
    from wiring.components import load_encoder

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="var/bench/ingest-lite.db")
    ap.add_argument("--collection", default="bench_ingest")
    ap.add_argument("--model", type=Path, default=ROOT / "models/encoder-default")
    ap.add_argument("--rounds", type=int, default=3)
    add_results_arg(ap)
    args = ap.parse_args()
    store = open_store(args.store, timeout=900)
    name = args.collection
    if name not in store.list_collections():
        sys.exit(f"no collection {name!r} in {args.store}: run bench/ingest.py first")
    info = store.describe(name)
    heads = count_filter() if info.passages else None
    enc = load_encoder(args.model)
    embed = embed_at(enc.encode, info.dim)
    mapping, default = model_mapping(args.model), model_dense_weight(args.model)
    reads: dict[str, Callable[[], Any]] = {
        "count": lambda: store.count(name),
        "documents": lambda: store.count(name, None, heads),
        "sample": lambda: len(store.sample(name, POOL)[0]),
        "document ids": lambda: len(store.ids(name, None, 1000, heads)),
        "every key": lambda: len(store.ids(name, None, 2**62)),
        "calibration": lambda: calibrate(store, name, embed, mapping, default).dense_weight,
    }
    engine_lookup = lite_direct.collection
    times: dict[str, dict[str, list[float]]] = {r: {"direct": [], "grpc": []} for r in reads}
    answers: dict[str, dict[str, Any]] = {r: {} for r in reads}
    try:
        for _ in range(args.rounds):
            for way in ("direct", "grpc"):
                setattr(lite_direct, "collection",  # noqa: B010 (gRPC: no engine)
                        engine_lookup if way == "direct" else lambda uri, n: None)
                for read, call in reads.items():
                    t0 = time.perf_counter()
                    got = call()
                    times[read][way].append(time.perf_counter() - t0)
                    if answers[read].setdefault("direct", got) != got:
                        sys.exit(f"{read}: {way} answered {got!r}, the engine directly "
                                 f"{answers[read]['direct']!r}")
    finally:
        setattr(lite_direct, "collection", engine_lookup)  # noqa: B010
        store.close()
    argv = shlex.join(["python", "bench/reads.py", *sys.argv[1:]])
    lines = [f"\n## Reads of {name} on Lite, direct against gRPC ({time.strftime('%Y-%m-%d')})",
             "", f"`{argv}` ({stamp()})", "",
             f"Median of {args.rounds} rounds each, alternating. The answers are the same both "
             "ways (checked each round).", "",
             "| read | answer | direct s | gRPC s | gRPC / direct |", "|---|---|---|---|---|"]
    figures: dict[str, Any] = {"collection": name, "rounds": args.rounds}
    for read in reads:
        d, g = (statistics.median(times[read][w]) for w in ("direct", "grpc"))
        key = read.replace(" ", "_")
        figures |= {f"{key}_direct_s": round(d, 3), f"{key}_grpc_s": round(g, 3),
                    f"{key}_speedup": round(g / d, 1)}
        lines.append(f"| {read} | {answers[read]['direct']} | {d:.3f} | {g:.3f} | "
                     f"{g / d:.1f} × |")
    text = "\n".join(lines)
    print(text)
    record("reads", argv, figures, section=text, results=args.results)


if __name__ == "__main__":
    main()
