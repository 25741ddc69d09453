"""Lite's row-by-row filter evaluation on a JSON path, done in Arrow where it can be, and
otherwise without converting the columns the filter never reads.

Milvus Lite evaluates a filter on a JSON path (qkv's metadata filters: ``metadata["lang"]
== "en"``, ``exists metadata["_qkv_p"]``) row by row in Python
(``milvus_lite.search.filter.eval.python_backend.evaluate_python``), and first turns the
segment's whole table into Python dicts (``to_pylist``): every row's vector too, 256
floats each. Counting a passage collection's documents (:func:`index.passages.count_filter`,
``not (exists metadata["_qkv_p"])``) took 3.0-4.7 s at 100,000 rows: the calibration at a
bulk job's close counts them.

:func:`evaluate_python` does two things instead:

* an expression on one JSON field's top-level keys (and schema fields) is evaluated in
  Arrow, as Lite's hybrid backend evaluates a dynamic field's keys: each row's JSON parsed
  once, as the row-by-row path parses it, each key read a column of its values (or of its
  presence, for ``exists``), the expression's paths read from those columns. A key whose
  values have more than one type (Arrow refuses the column), or anything Arrow has no
  kernel for, falls through to:
* Lite's own, given only the columns the expression names (its field references, and
  ``$meta`` for a dynamic field), which is all a row's evaluation can read.

The masks are Lite's own (``tests/index/test_lite_speed.py`` compares them on every kind of
expression, on keys of one type and of many). On ``bench/ingest.py``'s 100,000 documents
(AMD EPYC, AVX2; a /tmp script, runs in turns): the count 0.48-0.70 s against 3.0-3.6 s.
``python bench/filter_cost.py --rows 100000 --dim 256 --sizes 1,10`` (recorded at 6e7e107,
each filter both ways in turns): a dense search with one equality 0.49 s against 3.75 s,
with an ``in`` of 10 values 0.38 s against 9.74 s (column selection alone, the step before:
0.87 and 6.76 s); ``python bench/filter_cost.py`` (2,000 rows of 32 dimensions): an ``in`` of
1,024 values 0.28 s against 5.46 s.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

ORIGINAL: dict[str, Any] = {}  # Lite's evaluate_python, set by speed.install


def bind(evaluate: Any) -> None:
    """Make ``evaluate`` Lite's ``evaluate_python``: its filter dispatcher's name and its
    module's (the hybrid backend's fallback imports it from there when it runs)."""
    from milvus_lite.search.filter import eval as filter_eval
    from milvus_lite.search.filter.eval import python_backend

    filter_eval.evaluate_python = python_backend.evaluate_python = evaluate


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


_KEY_COLUMN = "__qkv_json__{}_{}"  # a JSON key's value ("value") or presence ("present")


def _key(node: Any) -> tuple[str, str] | None:
    """(F, key) of ``F["key"]``: a JSON field's top-level key; else None."""
    from milvus_lite.search.filter import ast as A

    if isinstance(node, A.PathAccess) and isinstance(node.base, A.FieldRef) \
            and len(node.path) == 1 and isinstance(node.path[0], str):
        return node.base.name, node.path[0]
    return None


def _on_keys(node: Any, found: set[str], keys: set[tuple[str, str]]) -> Any:
    """``node`` with each ``F["key"]`` (a JSON field's top-level key) read from a column of
    its own: ``F["key"]`` from the key's values, ``exists F["key"]`` from its presence
    (``found`` collects each F, ``keys`` each (how, key)); None where ``node`` has anything
    else that only the row-by-row path evaluates (a deeper path, an index, a dynamic
    field, text_match, array and geometry functions)."""
    from milvus_lite.search.filter import ast as A

    for how, inner in (("present", node.field if isinstance(node, A.IsNullOp) else None),
                       ("value", node)):
        got = _key(inner)
        if got is not None:
            found.add(got[0])
            keys.add((how, got[1]))
            column = A.FieldRef(_KEY_COLUMN.format(how, got[1]), node.pos)
            return dataclasses.replace(node, field=column) if how == "present" else column
    if isinstance(node, A.PathAccess | A.MetaAccess | A.TextMatchOp | A.GeometryOp
                  | A.GeometryIsValidOp | A.GeometryDWithinOp | A.ArrayContainsOp
                  | A.ArrayLengthOp):
        return None
    if isinstance(node, A.FieldRef | type) or not dataclasses.is_dataclass(node):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, tuple):
            items = [_on_keys(x, found, keys) if dataclasses.is_dataclass(x) else x
                     for x in value]
            if any(x is None for x in items):
                return None
            changes[f.name] = tuple(items)
        elif dataclasses.is_dataclass(value):
            new = _on_keys(value, found, keys)
            if new is None:
                return None
            changes[f.name] = new
    return dataclasses.replace(node, **changes)  # type: ignore[type-var]


def _key_columns(column: Any, keys: set[tuple[str, str]]) -> dict[str, Any]:
    """The columns :func:`_on_keys` reads, from the JSON strings of ``column``: each row
    parsed once, as Lite's row-by-row path parses it (not JSON, not an object: no keys). A
    key's values of more than one type raise ``pa.ArrowInvalid`` (evaluated row by row
    then); its presence is true or null (a null value is absent, as there)."""
    import pyarrow as pa

    parsed = []
    for s in column.to_pylist():
        if isinstance(s, str):
            try:
                s = json.loads(s)
            except (json.JSONDecodeError, TypeError, ValueError):
                s = None
        parsed.append(s if isinstance(s, dict) else None)
    out = {}
    for how, key in sorted(keys):
        values = [None if d is None else d.get(key) for d in parsed]
        out[_KEY_COLUMN.format(how, key)] = (
            pa.array(values) if how == "value"
            else pa.array([None if v is None else True for v in values], type=pa.bool_()))
    return out


def evaluate_python(compiled: Any, data: Any) -> Any:
    """Lite's ``evaluate_python`` on the columns of ``data`` that ``compiled`` reads (all of
    them where it reads none: a table of no columns has no rows); an expression on one JSON
    field's top-level keys in Arrow instead, each key's values of one type a column (see the
    module docstring)."""
    found: set[str] = set()
    keys: set[tuple[str, str]] = set()
    ast = _on_keys(compiled.ast, found, keys)
    if ast is not None and len(found) == 1 and (field := found.pop()) in data.column_names:
        import pyarrow as pa
        from milvus_lite.search.filter.eval.arrow_backend import evaluate_arrow

        try:  # as Lite's hybrid backend does for a dynamic field's keys
            made = _key_columns(data.column(field), keys)
            need = columns(ast)
            keep = [c for c in data.column_names if c in need]
            table = pa.Table.from_arrays([*(data.column(c) for c in keep), *made.values()],
                                         names=[*keep, *made])
            return evaluate_arrow(dataclasses.replace(compiled, ast=ast, backend="arrow"),
                                  table)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
                NotImplementedError, KeyError):
            pass  # mixed types, or what Arrow has no kernel for: row by row
    need = columns(compiled.ast)
    keep = [c for c in data.column_names if c in need]
    if keep and len(keep) < len(data.column_names):
        data = data.select(keep)
    return ORIGINAL["evaluate_python"](compiled, data)
