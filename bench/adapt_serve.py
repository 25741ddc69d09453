"""``qkv serve`` with the adapt job's training settings of bench/adapt.py's comparisons:
``BENCH_ADAPT_LEXICAL_SHARE``, ``BENCH_ADAPT_LR``, ``BENCH_ADAPT_BATCH``,
``BENCH_ADAPT_IMITATE`` (bm25 or hybrid) and ``BENCH_ADAPT_NETWORK=0`` (the token bag
alone) set :mod:`encoder.domain`'s constants before the server starts. The service itself
has no such knobs: these are the bench's.

    python bench/adapt_serve.py serve --store ... --model ...
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wiring import runtime  # noqa: E402

runtime.configure(serving=True)  # before torch loads, as qkv serve does
import encoder.domain as domain  # noqa: E402
from cli.app import app  # noqa: E402

KNOBS = {"BENCH_ADAPT_LEXICAL_SHARE": ("LEXICAL_SHARE", float), "BENCH_ADAPT_LR": ("LR", float),
         "BENCH_ADAPT_BATCH": ("BATCH", int), "BENCH_ADAPT_IMITATE": ("IMITATE", str),
         "BENCH_ADAPT_NETWORK": ("NETWORK", lambda v: v != "0")}

if __name__ == "__main__":
    for env, (name, kind) in KNOBS.items():
        if env in os.environ:
            setattr(domain, name, kind(os.environ[env]))
    app(prog_name="qkv")
