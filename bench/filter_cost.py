"""What a large metadata filter costs a search on Milvus Lite (issue 68's filter limits).

Usage: python bench/filter_cost.py [--rows 2000] [--repeats 5]

A dense collection of ``--rows`` random unit vectors (dim 32) with ``{"k": i}`` metadata in
a new Lite file; then searches (top 10, Session consistency) with an ``in`` filter of 10,
256 and 1,024 values (1,024: the most a filter may make, ``index.filters.MAX_FILTER_TERMS``;
``in`` is written as an ``or`` of equalities), ``--repeats`` times each. Prints the median
seconds per search and records them (bench/results/filter_cost.jsonl).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machine import add_results_arg, record  # noqa: E402

from index import EncoderInfo, Item, open_store, parse_filter  # noqa: E402
from index.filters import MAX_FILTER_TERMS  # noqa: E402

SIZES = (10, 256, MAX_FILTER_TERMS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    add_results_arg(ap)
    args = ap.parse_args()
    folder = ROOT / "var/bench/filter-cost"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    info = EncoderInfo("random", "none", 32)
    store = open_store(str(folder / "q.db"))
    try:
        store.create("f", 32, info, hybrid=False)
        x = np.random.default_rng(0).standard_normal((args.rows, 32)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        store.upsert("f", [Item(f"d{i}", x[i], "t", None, {"k": i}) for i in range(args.rows)],
                     info)
        store.count("f")  # strong: every row visible before the timings
        figures: dict[str, float | int] = {"rows": args.rows}
        for n in SIZES:
            filt = parse_filter({"key": "k", "op": "in", "value": list(range(n))})
            times = []
            for r in range(args.repeats):
                t0 = time.perf_counter()
                store.search("f", x[r:r + 1], 10, filt, info)
                times.append(time.perf_counter() - t0)
            figures[f"in_{n}_s"] = round(statistics.median(times), 3)
    finally:
        store.close()
    lines = ["## A large filter's cost on Milvus Lite", "",
             f"{args.rows} rows, dense top 10, median of {args.repeats} searches.", "",
             "| filter | s a search |", "|---|---|",
             *(f"| `in` of {n} values | {figures[f'in_{n}_s']} |" for n in SIZES)]
    section = "\n".join(lines)
    print(section)
    record("filter_cost", " ".join(["python", "bench/filter_cost.py", *sys.argv[1:]]),
           figures, section=section, results=args.results)


if __name__ == "__main__":
    main()
