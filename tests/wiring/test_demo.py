"""Demo collections (wiring.demo) on a real Milvus Lite file: created once, completed after a
stopped start, and rebuilt when the served encoder is not the one that made them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from wiring.components import load_components
from wiring.demo import seed_demo

ROWS = [{"id": f"d{i}", "text": f"demo document about topic {i}", "value": f"v{i}"}
        for i in range(25)]


def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "demo.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_demo_made_by_another_encoder_is_rebuilt(tiny_encoder_dir: Path,
                                                 other_tiny_encoder_dir: Path,
                                                 tmp_path: Path) -> None:
    store, demo = str(tmp_path / "demo.db"), corpus(tmp_path)
    old = load_components(other_tiny_encoder_dir, store)
    try:
        assert seed_demo(old, demo, "docs") == 25
        assert seed_demo(old, demo, "docs") == 0  # complete: nothing written again
        old_fingerprint = old.info.fingerprint
    finally:
        old.close()
    new = load_components(tiny_encoder_dir, store)
    try:
        assert new.info.fingerprint != old_fingerprint
        assert seed_demo(new, demo, "docs") == 25
        info = new.store.describe("docs")
        assert info.encoder == new.info and new.store.count("docs") == 25
        xq = new.encoder.encode([ROWS[3]["text"]])
        (hits,) = new.store.search("docs", xq, 1, encoder=new.info, consistency="Strong")
        assert hits[0].id == "d3" and hits[0].value == "v3"
        assert np.isclose(hits[0].score, 1.0, atol=1e-3)
    finally:
        new.close()
