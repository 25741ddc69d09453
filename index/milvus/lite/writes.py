"""Milvus Lite 3.x's write path without its per-value Python loops.

Restoring 100,000 rows into a Lite file (``bench/backup.py``) spent about a third of its time
in two loops over Python values (a py-spy profile of ``qkv restore``, Intel Xeon, 2 cores):

- ``validate_record`` checks each element of each row's float vector with ``isinstance``
  (256 checks a row, 12 % of the restore);
- ``MemTable._build_data_table`` builds a flushed segment's table cell by cell, converting
  every value of every column to Python (``.as_py()``, the vectors' floats one by one) and
  back to Arrow (16 %).

Here the vector check is one pass in C over the element types, and the segment table is
taken from the memtable's Arrow batches (``take``) without leaving Arrow. Both give what
Lite's own give: a vector of plain ints and floats of the right length passes either
check, anything else goes to Lite's own loop for its error; the table is equal, column for
column (``tests/index/test_lite_writes.py``). Installed and checked against the installed
source with the search paths (:mod:`index.milvus.lite.speed`).

A third loop is a hash a byte: each term of a hybrid collection's BM25 text is mapped to
its id by FNV-1a in Python (``term_to_id``), on every write and for every term again.
:func:`term_to_id` remembers each term's id (the same function of the same bytes). The
CPU of the store's upserts into a hybrid collection, in turns with Lite's own (a throwaway
script, random vectors, AVX2-only AMD EPYC): SciFact's 5,183 abstracts 1.41 against
1.78 s; ``bench/ingest.py``'s first 50,000 documents, most of them short, 2.89 against
3.01 s.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

ORIGINAL: dict[str, Callable[..., Any]] = {}  # set by index.milvus.lite.speed.install
# Terms whose ids are remembered (a few MB of strings and ints); the memory starts again
# when full: a corpus's most frequent terms are back in it at once
TERM_IDS_MAX = 1 << 17
_term_ids: dict[str, int] = {}
_PLAIN = frozenset((int, float))  # what Lite's loop accepts: int or float, not bool
# Set while Lite's own validate_record runs on a record whose vector was checked here
_VECTOR_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "qkv_lite_vector_checked", default=False)


def term_to_id(term: str) -> int:
    """Lite's ``analyzer.hash.term_to_id`` of ``term``, remembered (see the module's
    docstring)."""
    got = _term_ids.get(term)
    if got is None:
        if len(_term_ids) >= TERM_IDS_MAX:
            _term_ids.clear()
        got = _term_ids[term] = ORIGINAL["term_to_id"](term)
    return got


def validate_record(record: dict, schema: Any, default_properties: dict | None = None) -> None:
    """Lite's ``validate_record``, its float vector checked here when it is a list of plain
    ints and floats of the schema's dimension (what Lite's per-element loop accepts) or a
    float32 numpy vector of that dimension (what the store's direct upserts pass, see
    ``MilvusStore.upsert``; only an in-process caller can pass one: the gRPC server's
    records hold lists); the rest of the record, and any other vector, checked by Lite's
    own."""
    field = ORIGINAL["find_float_vector"](schema) if isinstance(record, dict) else None
    value = record.get(field.name) if field is not None else None
    if (type(value) is list and len(value) == field.dim
            and _PLAIN.issuperset(map(type, value))) or (
            type(value) is np.ndarray and value.dtype == np.float32 and value.ndim == 1
            and len(value) == field.dim):
        token = _VECTOR_CHECKED.set(True)
        try:
            ORIGINAL["validate_record"](record, schema, default_properties=default_properties)
        finally:
            _VECTOR_CHECKED.reset(token)
    else:
        ORIGINAL["validate_record"](record, schema, default_properties=default_properties)


def find_float_vector(schema: Any) -> Any:
    """Lite's ``_find_float_vector`` (only ``validate_record`` calls it), None while the
    record's vector is already checked (:func:`validate_record`): Lite's own check is then
    skipped, and its per-field loop skips float vectors anyway."""
    return None if _VECTOR_CHECKED.get() else ORIGINAL["find_float_vector"](schema)


def build_data_table(self: Any, rows: list[tuple[int, int]]) -> pa.Table:
    """``MemTable._build_data_table``: the rows ``(batch, row)`` of the memtable's insert
    batches, in that order, as a table of its data schema; taken in Arrow."""
    schema: pa.Schema = self._data_schema
    if not rows:
        return ORIGINAL["build_data_table"](self, rows)
    try:
        return _taken(self._insert_batches, rows, schema)
    except (pa.ArrowException, KeyError):  # batches of other schemas: Lite's own says so
        return ORIGINAL["build_data_table"](self, rows)


def _taken(batches: list[pa.RecordBatch], rows: list[tuple[int, int]], schema: pa.Schema
           ) -> pa.Table:
    where = np.asarray(rows, dtype=np.int64)
    used = np.unique(where[:, 0])
    starts = np.zeros(int(used.max()) + 1, dtype=np.int64)
    parts, total = [], 0
    for b in used.tolist():
        batch = batches[b]
        starts[b] = total
        total += batch.num_rows
        parts.append(pa.Table.from_batches([batch.select(schema.names)]))
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    taken = table.take(pa.array(starts[where[:, 0]] + where[:, 1])).combine_chunks()
    return taken if taken.schema.equals(schema) else taken.cast(schema)
