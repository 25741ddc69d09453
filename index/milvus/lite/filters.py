"""Lite's row-by-row filter evaluation without converting the columns the filter never reads.

Milvus Lite evaluates a filter on a JSON path (qkv's metadata filters: ``metadata["lang"]
== "en"``, ``exists metadata["_qkv_p"]``) row by row in Python
(``milvus_lite.search.filter.eval.python_backend.evaluate_python``), and first turns the
segment's whole table into Python dicts (``to_pylist``): every row's vector too, 256
floats each. Counting a passage collection's documents (:func:`index.passages.count_filter`,
``not (exists metadata["_qkv_p"])``) took 4.3-4.7 s at 100,000 rows, most of it building
those floats (AMD EPYC, AVX2, ``bench/ingest.py``'s collection; a /tmp script): the
calibration at a bulk job's close counts them. :func:`evaluate_python` hands Lite's own the
columns the expression names (its field references, and ``$meta`` for a dynamic field),
which is all a row's evaluation can read: the same mask, 0.74-1.2 s there. A dense search
of 10 with a metadata filter (``{"key": "lang", "op": "eq", "value": "en"}``) on the same
collection: 4.8-6.4 s a search with Lite's, 0.66-0.79 s with this (runs in turns, the
machine busy with a test run, a /tmp script).
``tests/index/test_lite_speed.py`` holds the two equal on every kind of expression.
"""

from __future__ import annotations

import dataclasses
from typing import Any

ORIGINAL: dict[str, Any] = {}  # Lite's evaluate_python, set by speed.install


def _columns(node: Any, out: set[str]) -> None:
    from milvus_lite.search.filter.ast import FieldRef, MetaAccess

    if isinstance(node, FieldRef):
        out.add(node.name)
    elif isinstance(node, MetaAccess):
        out.add("$meta")
    elif dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            _columns(getattr(node, f.name), out)
    elif isinstance(node, tuple | list):
        for x in node:
            _columns(x, out)


def columns(ast: Any) -> frozenset[str]:
    """The columns an expression's evaluation reads."""
    out: set[str] = set()
    _columns(ast, out)
    return frozenset(out)


def evaluate_python(compiled: Any, data: Any) -> Any:
    """Lite's ``evaluate_python`` on the columns of ``data`` that ``compiled`` reads (all of
    them where it reads none: a table of no columns has no rows)."""
    need = columns(compiled.ast)
    keep = [c for c in data.column_names if c in need]
    if keep and len(keep) < len(data.column_names):
        data = data.select(keep)
    return ORIGINAL["evaluate_python"](compiled, data)
