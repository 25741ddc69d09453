"""The sealer: a pause in the writes seals them, except for a bulk job's store."""

from __future__ import annotations

import time
from pathlib import Path

from index import open_store
from index.milvus.sealing import BULK_SEAL_ROWS, SEAL_QUIET_S, SEAL_ROWS, Sealer


def test_a_pause_seals_what_waits() -> None:
    sealed: list[str] = []
    sealer = Sealer(sealed.append, rows=10, quiet_s=0.05)
    try:
        sealer.wrote("docs", 3)
        deadline = time.monotonic() + 5
        while not sealed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sealed == ["docs"]
    finally:
        sealer.stop()


def test_without_a_quiet_time_only_size_seals() -> None:
    sealed: list[str] = []
    sealer = Sealer(sealed.append, rows=10, quiet_s=None)
    sealer.wrote("docs", 3)
    time.sleep(0.3)
    assert sealed == [] and sealer.pending() == ["docs"]
    sealer.wrote("docs", 8)  # 11 rows wait: past the size
    assert sealed == ["docs"] and sealer.pending() == []
    assert sealer.stop() == []


def test_a_bulk_jobs_lite_store_seals_by_size_only(tmp_path: Path) -> None:
    bulk, served = (open_store(str(tmp_path / f"{n}.db"), bulk=b)
                    for n, b in (("bulk", True), ("served", False)))
    try:
        assert (bulk._sealer.rows, bulk._sealer.quiet_s) == (BULK_SEAL_ROWS, None)  # type: ignore[attr-defined]
        assert (served._sealer.rows, served._sealer.quiet_s) == (SEAL_ROWS, SEAL_QUIET_S)  # type: ignore[attr-defined]
    finally:
        bulk.close()
        served.close()
