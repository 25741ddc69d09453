"""Issue 68's fuzz and fault pass, CI-sized: ``bench/fuzz.py`` with a few generated cases
per operation and a few stateful scenarios, on the tiny encoder. No 5xx but 503/507, every
hostile input answered as documented, no traceback in the server's log, and every
acknowledged document readable at every read (the reader runs throughout)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import fuzz  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_a_small_fuzz_pass_finds_nothing(tiny_encoder_dir: Path, tmp_path: Path) -> None:
    p, operations, tracebacks = fuzz.run(str(tmp_path / "lite.db"), str(tiny_encoder_dir),
                                         tmp_path, examples=2, scenarios=2, seed=1)
    assert operations >= 40
    assert p.server_errors == []
    assert [(n, s, t) for n, s, ok, t in p.hostile if not ok] == []
    assert len(p.hostile) >= 25
    assert tracebacks == 0
    assert len(p.acked) >= 2 * fuzz.BATCH and p.reads > len(p.acked)
    assert p.unreadable == []
    assert sum(p.statuses.values()) > 300
