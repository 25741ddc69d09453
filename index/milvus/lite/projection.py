"""Lite's projection of a hit's record (``milvus_lite.engine.projection.project_record``)
without its scans of the schema for a record that has no dynamic field.

Lite projects every hit of a search through ``project_record``: it gathers the record's
dynamic fields (a set of the schema's names made anew, a pass over the record, a pass over
the schema), then looks each output field up in the schema's fields again. A hybrid search
asks each side for 100 hits: at 1,000,000 documents that was 0.8 of the 5.8 s of 300
hybrid searches under cProfile (Intel Xeon). qkv's collections have no dynamic field, so
their records never hold one: for such a record this gives Lite's result from the
schema's names, kept per schema; any other record (a ``$meta`` or a name outside the
schema) goes to Lite's own. ``tests/index/test_lite_speed.py`` holds the two equal. The
store's hybrid search of 10 at 1,000,000 documents: p50 14.05, 13.93, 13.58 ms with Lite's,
13.98, 13.43, 13.18 with this (300 queries, runs taken in turns, a /tmp script, Intel Xeon);
a dense search of 10 projects 10 hits and moved within the noise (2.93-2.99 ms both).
"""

from __future__ import annotations

from typing import Any

ORIGINAL: dict[str, Any] = {}  # Lite's project_record, set by speed.install
_INTERNAL = frozenset({"_seq", "_partition"})
_schemas: dict[int, tuple[Any, frozenset[str], frozenset[str]]] = {}


def _names(schema: Any) -> tuple[frozenset[str], frozenset[str]]:
    """The schema's field names (with Lite's internal ones) and its primary keys'."""
    got = _schemas.get(id(schema))
    if got is None or got[0] is not schema:  # held, so an id is never another's
        if len(_schemas) > 256:
            _schemas.clear()
        names = frozenset(f.name for f in schema.fields)
        got = (schema, names | _INTERNAL, frozenset(f.name for f in schema.fields
                                                    if f.is_primary))
        _schemas[id(schema)] = got
    return got[1], got[2]


def project_record(record: dict[str, Any], schema: Any, plan: Any) -> dict[str, Any]:
    """``project_record``: Lite's own for a record with a dynamic field or ``$meta``."""
    known, primary = _names(schema)
    for key in record:
        if key not in known:  # "$meta" or a dynamic field
            return ORIGINAL["project_record"](record, schema, plan)
    result: dict[str, Any] = {}
    search = plan.api_kind == "search"
    for name in plan.response_schema_fields:
        if search and name in primary:
            continue
        if name in record:
            result[name] = record[name]
    if not search:
        pk_name = next(f.name for f in schema.fields if f.is_primary)
        if pk_name in record:
            result[pk_name] = record[pk_name]
    result.pop("$meta", None)
    return result
