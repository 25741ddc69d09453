"""wiring.ray_bulk.files_to_import on its own: the ranges' files merged as planned once; a
new plan (the job started over with --restart) never takes an earlier plan's merged file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from index.bulk.ranges import Position, Range, mark_done
from wiring.ray_bulk import files_to_import


def _ranges(done: Path, parts: Path, n: int, rows: int, tag: str) -> None:
    parts.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = parts / f"{tag}-{i}.parquet"
        pq.write_table(pa.table({"id": [f"{tag}-{i}-{j}" for j in range(rows)]}), path)
        mark_done(done, Range(0, Position(i * 100, i), rows), {"written": rows,
                                                              "file": str(path)})


def test_a_new_plan_never_imports_an_earlier_plans_file(tmp_path: Path) -> None:
    done, out, state = tmp_path / "done", tmp_path / "bulk", tmp_path / "job.imports.json"
    _ranges(done, tmp_path / "parts", 3, 10, "old")
    state.write_text(json.dumps({"collection": "c", "files": {}}))
    files = files_to_import(state, done, out, group_rows=100)
    assert [rows for _, rows in files] == [30]
    assert pq.read_table(files[0][0]).column("id").to_pylist()[0] == "old-0-0"

    # --restart: the job's files and markers go, the bulk directory stays
    for p in done.glob("*.json"):
        p.unlink()
    _ranges(done, tmp_path / "parts", 2, 5, "new")
    state.write_text(json.dumps({"collection": "c", "files": {}}))
    files = files_to_import(state, done, out, group_rows=100)
    assert [rows for _, rows in files] == [10]
    ids = pq.read_table(files[0][0]).column("id").to_pylist()
    assert ids[0] == "new-0-0" and len(ids) == 10
