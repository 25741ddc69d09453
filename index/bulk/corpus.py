"""Corpus readers for the bulk job: JSONL, CSV and Parquet, streamed, resumable by position;
and document files (text, Markdown, HTML, PDF: :mod:`index.bulk.documents`), a record each.

Every reader yields :class:`Record` s one at a time and can start at a saved
:class:`Position` (a byte offset for JSONL and CSV, a row index for Parquet), so memory
stays flat however large the file and a resumed job skips what is done without rereading
it. A record that cannot be parsed comes back with ``error`` set instead of ``row``.
:func:`to_fields` turns a row into (id, text, value, metadata): the id, text and value
fields are named by the caller, and every other field of the row becomes metadata; a
``metadata`` object (the API's document shape) is taken as metadata itself, its keys
winning over the row's other fields.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from index.bulk.documents import DOCUMENT_SUFFIXES, document_row
from index.passages import MAX_DOCUMENT_BYTES, check_document
from index.store import MAX_ID_BYTES, MAX_TEXT_BYTES

FORMATS = ("jsonl", "csv", "parquet", "document")
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
             ".parquet": "parquet", ".pq": "parquet",
             **dict.fromkeys(DOCUMENT_SUFFIXES, "document")}
KNOWN_SUFFIXES = frozenset(_SUFFIXES)
PARQUET_BATCH = 2048


@dataclass(frozen=True)
class Position:
    """Where to resume in one file: ``offset`` (bytes, or rows for Parquet) and the number
    of the last line read (for reject reports)."""

    offset: int = 0
    line: int = 0


@dataclass
class Record:
    """One input record: its line (row for Parquet), the position just after it, and either
    the parsed ``row`` or the parse ``error``."""

    line: int
    end: Position
    row: dict[str, Any] | None = None
    error: str | None = None
    raw: str = ""
    document: bool = False  # a document file (index.bulk.documents)


@dataclass(frozen=True)
class Fields:
    """Names of the id, text and (optional) value fields of the input rows."""

    id: str = "id"
    text: str = "text"
    value: str | None = None


def detect_format(path: Path, fmt: str | None = None) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
        return fmt
    suffix = path.suffix.lower()
    if suffix not in _SUFFIXES:
        raise ValueError(
            f"cannot tell the format of {path} from its suffix; pass one of {FORMATS} "
            f"(known suffixes: {sorted(_SUFFIXES)})")
    return _SUFFIXES[suffix]


def read_records(path: Path, fmt: str, start: Position = Position(),
                 root: Path | None = None) -> Iterator[Record]:
    """Stream the records of ``path`` from ``start`` (a document file under the folder
    ``root`` is named by its path there)."""
    if fmt == "document":
        return _read_document(path, start, root)
    if fmt == "jsonl":
        return _read_jsonl(path, start)
    if fmt == "csv":
        return _read_csv(path, start)
    if fmt == "parquet":
        return _read_parquet(path, start)
    raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")


def _read_document(path: Path, start: Position, root: Path | None) -> Iterator[Record]:
    if start.offset >= 1:  # done
        return
    end = Position(1, 1)
    try:
        yield Record(1, end, row=document_row(path, root), document=True)
    except ValueError as e:
        yield Record(1, end, error=f"cannot read {path.name}: {e}", raw=str(path))


def _read_jsonl(path: Path, start: Position) -> Iterator[Record]:
    offset, line_no = start.offset, start.line
    with open(path, "rb") as f:
        f.seek(offset)
        for raw in f:
            offset += len(raw)
            line_no += 1
            end = Position(offset, line_no)
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
                row = json.loads(text)
            except UnicodeDecodeError as e:
                yield Record(line_no, end, error=f"not UTF-8: {e}", raw=repr(raw[:200]))
                continue
            except json.JSONDecodeError as e:
                yield Record(line_no, end, error=f"malformed JSON: {e}", raw=text[:200])
                continue
            if not isinstance(row, dict):
                yield Record(line_no, end, error="not a JSON object", raw=text[:200])
                continue
            yield Record(line_no, end, row=row)


class _LineSource:
    """Lines of a binary file decoded one at a time, counting bytes and lines consumed;
    ``csv.reader`` pulls exactly the lines of one record before yielding it."""

    def __init__(self, f: Any, offset: int, line: int) -> None:
        self.f, self.offset, self.line = f, offset, line

    def __iter__(self) -> Iterator[str]:
        for raw in self.f:
            self.offset += len(raw)
            self.line += 1
            yield raw.decode("utf-8", errors="replace")


def _read_csv(path: Path, start: Position) -> Iterator[Record]:
    with open(path, "rb") as f:
        src = _LineSource(f, 0, 0)
        reader = csv.reader(src)
        header = next(reader, None)
        if header is None:
            return
        if start.offset > src.offset:
            f.seek(start.offset)
            src.offset, src.line = start.offset, start.line
        while True:
            first_line = src.line + 1
            try:
                values = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                yield Record(first_line, Position(src.offset, src.line), error=f"bad CSV: {e}")
                continue
            end = Position(src.offset, src.line)
            if not values:
                continue
            if len(values) != len(header):
                yield Record(first_line, end, raw=",".join(values)[:200],
                             error=f"expected {len(header)} fields, got {len(values)}")
                continue
            yield Record(first_line, end, row=dict(zip(header, values, strict=True)))


def _read_parquet(path: Path, start: Position) -> Iterator[Record]:
    import pyarrow.parquet as pq  # only the Parquet reader needs pyarrow

    pf = pq.ParquetFile(path)
    first_row, groups = 0, list[int]()
    for g in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if first_row + n <= start.offset and not groups:
            first_row += n  # whole row group already done
            continue
        groups.append(g)
    row_no = first_row
    if not groups:
        return
    for batch in pf.iter_batches(batch_size=PARQUET_BATCH, row_groups=groups):
        for row in batch.to_pylist():
            row_no += 1
            if row_no <= start.offset:
                continue
            yield Record(row_no, Position(row_no, row_no), row=row)


def parse_record(rec: Record, fields: Fields, max_text: int = MAX_TEXT_BYTES
                 ) -> tuple[str, str, str | None, dict[str, Any]] | str:
    """:func:`to_fields` of a record's row, or why it is rejected (it could not be parsed,
    or :func:`to_fields` refused it)."""
    if rec.row is None:
        return rec.error or "unreadable record"
    if rec.document:  # a document file's row names its own fields
        return to_fields(rec.row, Fields(), max_text)
    return to_fields(rec.row, fields, max_text)


def parse_document(rec: Record, fields: Fields, passages: bool
                   ) -> tuple[str, str, str | None, dict[str, Any]] | str:
    """:func:`parse_record` for a collection with ``passages`` (a text of up to
    :data:`index.passages.MAX_DOCUMENT_BYTES`, checked as a document) or without (a text
    of up to ``MAX_TEXT_BYTES``): what the local job and Ray's encoders both read."""
    parsed = parse_record(rec, fields, MAX_DOCUMENT_BYTES if passages else MAX_TEXT_BYTES)
    if passages and not isinstance(parsed, str):
        try:
            check_document(parsed[0], parsed[1], parsed[3])
        except (ValueError, OverflowError) as e:
            return str(e)
    return parsed


def reject(path: Path, rec: Record, reason: str) -> dict[str, Any]:
    """A line of the rejects file."""
    raw = rec.raw or (json.dumps(rec.row, ensure_ascii=False, default=str)[:2000]
                      if rec.row is not None else "")
    return {"file": str(path), "line": rec.line, "reason": reason, "raw": raw}


def to_fields(
    row: dict[str, Any], fields: Fields, max_text: int = MAX_TEXT_BYTES
) -> tuple[str, str, str | None, dict[str, Any]] | str:
    """(id, text, value, metadata) of a row, or the reason it is rejected (a text over
    ``max_text`` bytes: a collection with passages takes up to 10 MB)."""
    rid = row.get(fields.id)
    if rid is None or rid == "":
        return f"missing id field {fields.id!r}"
    if isinstance(rid, bool) or not isinstance(rid, str | int):
        return f"id must be a string or an integer, got {type(rid).__name__}"
    rid = str(rid)
    if len(rid.encode()) > MAX_ID_BYTES:
        return f"id longer than {MAX_ID_BYTES} bytes"
    text = row.get(fields.text)
    if not isinstance(text, str) or not text.strip():
        return f"missing text field {fields.text!r}"
    if len(text.encode()) > max_text:
        return f"text longer than {max_text:,} bytes"
    value: str | None = None
    if fields.value is not None:
        v = row.get(fields.value)
        if v is not None and not isinstance(v, str):
            return f"value field {fields.value!r} must be a string"
        if v is not None and len(v.encode()) > MAX_TEXT_BYTES:
            return f"value longer than {MAX_TEXT_BYTES} bytes"
        value = v or None
    skip = {fields.id, fields.text, fields.value}
    metadata = {k: v for k, v in row.items() if k not in skip}
    if isinstance(metadata.get("metadata"), dict):  # {"id", "text", "metadata": {...}}
        nested = metadata.pop("metadata")
        metadata = {**metadata, **nested}
    if metadata:  # (none: nothing to make strict)
        try:
            # Milvus stores strict JSON: dates and the like become strings, NaN is refused.
            metadata = json.loads(json.dumps(metadata, default=str, allow_nan=False))
        except ValueError as e:
            return f"metadata is not valid JSON: {e}"
    return rid, text, value, metadata


def shard_of(key: str, n_shards: int) -> int:
    """Deterministic shard of an id: the first 8 bytes of its blake2b hash, mod N."""
    h = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") % n_shards


def parse_shard(spec: str) -> tuple[int, int]:
    """``"i/N"`` → (i, N) with 0 ≤ i < N."""
    try:
        i_s, n_s = spec.split("/")
        i, n = int(i_s), int(n_s)
    except ValueError as e:
        raise ValueError(f"shard must look like i/N (e.g. 0/4), got {spec!r}") from e
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"shard i/N needs N >= 1 and 0 <= i < N, got {spec!r}")
    return i, n
