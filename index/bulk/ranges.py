"""A bulk job cut into ranges for a pool of workers (``qkv index --engine ray``), resumable
after any kill, with no Ray in it.

At the job's start the driver scans the inputs once into a **manifest**: each file's path,
size, modification time and record count, and the job cut into ranges of ``per_range``
records, each with the position it starts at. The scan also finds ids that occur more than
once: every occurrence but the last is listed as superseded in its range, so that whichever
order the workers write the ranges in, the last occurrence in the input is the one that
stays (last write wins, as on one machine).

A range is done when its **marker** exists: a small JSON file written (temporary file, then
rename) only after the store acknowledged the range's upsert, with what was written, the
rejected rows, the worker and its retries. A rerun of the same command reads the manifest
and the markers and feeds only the ranges without one; re-feeding a range whose upsert
landed but whose marker did not is harmless (upserts by id).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from index.bulk.corpus import (
    Fields,
    Position,
    detect_format,
    parse_document,
    parse_record,
    read_records,
    reject,
)


@dataclass(frozen=True)
class Range:
    """``records`` input records of file ``file`` from ``start``; ``superseded``: the lines
    in it whose id occurs again later in the input."""

    file: int
    start: Position
    records: int
    superseded: tuple[int, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.file}-{self.start.offset}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "offset": self.start.offset, "line": self.start.line,
                "records": self.records, "superseded": list(self.superseded)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Range:
        return cls(d["file"], Position(d["offset"], d["line"]), d["records"],
                   tuple(d.get("superseded", ())))


@dataclass
class Manifest:
    inputs: list[dict[str, Any]]
    per_range: int
    ranges: list[Range] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "per_range": self.per_range,
                "ranges": [r.to_dict() for r in self.ranges]}


@dataclass
class RangeBatch:
    """What a worker read from one range: the documents to write and the rejected rows."""

    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    values: list[str | None] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    superseded: int = 0


def file_facts(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _id_hash(rid: str) -> bytes:
    return hashlib.blake2b(rid.encode(), digest_size=16).digest()


def plan(inputs: Sequence[Path], fields: Fields, fmt: str | None = None,
         per_range: int = 2048) -> Manifest:
    """Scan ``inputs`` once: the manifest of the job (see the module's docstring)."""
    if per_range < 1:
        raise ValueError(f"per_range must be >= 1, got {per_range}")
    facts: list[dict[str, Any]] = []
    cuts: list[tuple[int, Position, int]] = []  # (file, start, records)
    hashes: list[bytes] = []
    where: list[tuple[int, int]] = []  # (range index, line) of each id, in input order
    for fi, path in enumerate(inputs):
        form = detect_format(path, fmt)
        start, n, count = Position(), 0, 0
        for rec in read_records(path, form):
            if n == 0:
                cuts.append((fi, start, 0))
            n += 1
            count += 1
            parsed = parse_record(rec, fields)
            if not isinstance(parsed, str):
                hashes.append(_id_hash(parsed[0]))
                where.append((len(cuts) - 1, rec.line))
            if n == per_range:
                cuts[-1] = (fi, cuts[-1][1], n)
                start, n = rec.end, 0
        if n:
            cuts[-1] = (fi, cuts[-1][1], n)
        facts.append({**file_facts(path), "format": form, "records": count})
    superseded: dict[int, list[int]] = {}
    if hashes:
        keys = np.frombuffer(b"".join(hashes), dtype="V16")
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        # an occurrence is superseded when the next one in sorted (stable) order is the same id
        later = np.nonzero(ordered[:-1] == ordered[1:])[0]
        for i in order[later]:
            r, line = where[int(i)]
            superseded.setdefault(r, []).append(line)
    ranges = [Range(f, s, n, tuple(sorted(superseded.get(i, ()))))
              for i, (f, s, n) in enumerate(cuts)]
    return Manifest(facts, per_range, ranges)


def load_or_plan(path: Path, inputs: Sequence[Path], fields: Fields, fmt: str | None,
                 per_range: int) -> Manifest:
    """The job's manifest at ``path``, made now if there is none; ``ValueError`` if an input
    changed since it was made (the ranges would not be the same records)."""
    if path.is_file():
        d = json.loads(path.read_text(encoding="utf-8"))
        now = [file_facts(p) for p in inputs]
        then = [{k: f[k] for k in ("path", "size", "mtime_ns")} for f in d["inputs"]]
        if now != then:
            raise ValueError(f"the inputs changed since this job started ({path}); run it "
                             "with --restart to start over")
        return Manifest(d["inputs"], d["per_range"],
                        [Range.from_dict(r) for r in d["ranges"]])
    manifest = plan(inputs, fields, fmt, per_range)
    write_json(path, manifest.to_dict())
    return manifest


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` whole or not at all: a temporary file, flushed, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # a
    # temporary file of its own: two writers of one path at once each rename a whole file
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def marker_path(done_dir: Path, r: Range) -> Path:
    return done_dir / f"{r.key}.json"


def mark_done(done_dir: Path, r: Range, report: dict[str, Any]) -> None:
    """Record range ``r`` as written; call only after the store acknowledged it."""
    write_json(marker_path(done_dir, r), {"range": r.key, "records": r.records, **report})


def done_reports(done_dir: Path, known: dict[str, dict[str, Any]] | None = None
                 ) -> dict[str, dict[str, Any]]:
    """Every marker under ``done_dir``: range key → its report (those in ``known`` are not
    read again: a marker never changes once written)."""
    out: dict[str, dict[str, Any]] = dict(known or {})
    if done_dir.is_dir():
        for p in done_dir.glob("*.json"):
            if p.stem not in out:
                d = json.loads(p.read_text(encoding="utf-8"))
                out[d["range"]] = d
    return out


def pending(manifest: Manifest, done_dir: Path) -> list[Range]:
    done = done_reports(done_dir)
    return [r for r in manifest.ranges if r.key not in done]


def read_range(path: Path, fmt: str, r: Range, fields: Fields, passages: bool = False
               ) -> RangeBatch:
    """The documents and rejects of range ``r`` of ``path`` (its superseded ids left out;
    duplicate ids within the range resolved last-wins), read for a collection with
    ``passages`` or without (:func:`index.bulk.corpus.parse_document`)."""
    batch = RangeBatch()
    skip = set(r.superseded)
    docs: dict[str, tuple[str, str | None, dict[str, Any]]] = {}
    for n, rec in enumerate(read_records(path, fmt, r.start)):
        if n == r.records:
            break
        parsed = parse_document(rec, fields, passages)
        if isinstance(parsed, str):
            batch.rejects.append(reject(path, rec, parsed))
        elif rec.line in skip:
            batch.superseded += 1
        else:
            rid, text, value, meta = parsed
            docs.pop(rid, None)  # a later duplicate goes last, as it would be written last
            docs[rid] = (text, value, meta)
    for rid, (text, value, meta) in docs.items():
        batch.ids.append(rid)
        batch.texts.append(text)
        batch.values.append(value)
        batch.metadata.append(meta)
    return batch
