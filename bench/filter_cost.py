"""What a large metadata filter costs a search on Milvus Lite (issue 68's filter limits).

Usage: python bench/filter_cost.py [--rows 2000] [--dim 32] [--sizes 10,256,1024] [--repeats 5]

A dense collection of ``--rows`` random unit vectors (``--dim``) with ``{"k": i}`` metadata
in a new Lite file; then searches (top 10, Session consistency) with an ``in`` filter of
``--sizes`` values (1,024: the most a filter may make, ``index.filters.MAX_FILTER_TERMS``;
``in`` is written as an ``or`` of equalities), ``--repeats`` times each, and each filter
also through Lite's own row-by-row evaluation, which converts every column the rows have
(vectors too) and not only those the filter reads (:mod:`index.milvus.lite.filters`), in
turns. Prints the median seconds per search and records them
(bench/results/filter_cost.jsonl).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machine import add_results_arg, record  # noqa: E402

from index import EncoderInfo, Item, open_store, parse_filter  # noqa: E402
from index.filters import MAX_FILTER_TERMS  # noqa: E402

SIZES = (10, 256, MAX_FILTER_TERMS)


@contextmanager
def evaluation(ours: bool) -> Iterator[None]:
    """Filters evaluated the installed way (``ours``), or by Lite's own evaluate_python."""
    from milvus_lite.search.filter.eval import python_backend

    from index.milvus.lite import filters as lite_filters

    installed = python_backend.evaluate_python
    if not ours:
        lite_filters.bind(lite_filters.ORIGINAL.get("evaluate_python", installed))
    try:
        yield
    finally:
        lite_filters.bind(installed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="the in filters' sizes, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    add_results_arg(ap)
    args = ap.parse_args()
    folder = ROOT / "var/bench/filter-cost"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    info = EncoderInfo("random", "none", args.dim)
    store = open_store(str(folder / "q.db"))
    try:
        store.create("f", args.dim, info, hybrid=False)
        x = np.random.default_rng(0).standard_normal((args.rows, args.dim)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        for start in range(0, args.rows, 10_000):
            store.upsert("f", [Item(f"d{i}", x[i], "t", None, {"k": i})
                               for i in range(start, min(args.rows, start + 10_000))], info)
        store.count("f")  # strong: every row visible before the timings
        figures: dict[str, float | int] = {"rows": args.rows, "dim": args.dim}
        sizes = [int(v) for v in args.sizes.split(",")]
        for n in sizes:
            filt = parse_filter({"key": "k", "op": "in", "value": list(range(n))})
            times: dict[bool, list[float]] = {True: [], False: []}
            for r in range(args.repeats):
                for ours in (True, False):
                    with evaluation(ours):
                        t0 = time.perf_counter()
                        store.search("f", x[r:r + 1], 10, filt, info)
                        times[ours].append(time.perf_counter() - t0)
            figures[f"in_{n}_s"] = round(statistics.median(times[True]), 3)
            figures[f"in_{n}_s_lite_own"] = round(statistics.median(times[False]), 3)
    finally:
        store.close()
    lines = ["## A large filter's cost on Milvus Lite", "",
             f"{args.rows} rows of {args.dim} dimensions, dense top 10, median of "
             f"{args.repeats} searches.", "",
             "| filter | s a search | with Lite's own row-by-row evaluation |", "|---|---|---|",
             *(f"| `in` of {n} values | {figures[f'in_{n}_s']} | "
               f"{figures[f'in_{n}_s_lite_own']} |" for n in sizes)]
    section = "\n".join(lines)
    print(section)
    record("filter_cost", " ".join(["python", "bench/filter_cost.py", *sys.argv[1:]]),
           figures, section=section, results=args.results)


if __name__ == "__main__":
    main()
