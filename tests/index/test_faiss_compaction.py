"""The faiss store's snapshot and log: a long log is folded at open, and a compaction
killed at any point leaves the collection whole (:func:`index.faiss.memory.write_snapshot`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from index.faiss import store as faiss_store
from index.faiss.store import FaissStore
from index.store import Item

DIM = 4


def _items(prefix: str, n: int) -> list[Item]:
    """Items ``prefix0`` .. ``prefix{n-1}``, each the same whatever ``n``."""
    return [Item(f"{prefix}{i}", np.random.default_rng([ord(prefix), i]).standard_normal(
        DIM).astype(np.float32), f"t {i}", None, {"n": i}) for i in range(n)]


def _state(store: FaissStore) -> dict[str, tuple[list[float], dict[str, object]]]:
    got = store.get("c", [f"{p}{i}" for p in ("a", "b") for i in range(40)])
    return {it.id: (it.vector.tolist(), it.metadata) for it in got}


def _written(root: Path) -> dict[str, tuple[list[float], dict[str, object]]]:
    store = FaissStore(root)
    store.create("c", DIM)
    store.upsert("c", _items("a", 40))
    store.delete("c", ["a3", "a7"])
    store.upsert("c", _items("b", 10))
    return _state(store)


def test_a_long_log_is_folded_into_a_snapshot_at_open(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    want = _written(tmp_path / "f")
    path = tmp_path / "f" / "c"
    assert (path / "log.jsonl").is_file() and not (path / "snapshot.json").exists()
    assert _state(FaissStore(tmp_path / "f")) == want  # under the threshold: kept as it is
    assert (path / "log.jsonl").is_file()
    monkeypatch.setattr(faiss_store, "COMPACT_LOG_BYTES", 1)
    assert _state(FaissStore(tmp_path / "f")) == want
    assert not (path / "log.jsonl").exists() and (path / "snapshot-1").is_dir()
    store = FaissStore(tmp_path / "f")  # from the snapshot alone, then written on
    assert _state(store) == want and store.count("c") == 48
    store.upsert("c", _items("a", 2))  # a0, a1 again: the same items
    store.compact("c")
    assert sorted(p.name for p in path.iterdir()) == ["collection.json", "snapshot-2",
                                                      "snapshot.json"]
    assert _state(FaissStore(tmp_path / "f")) == want


def test_a_compaction_that_cannot_write_leaves_the_log_serving(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = _written(tmp_path / "f")

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(faiss_store, "COMPACT_LOG_BYTES", 1)
    monkeypatch.setattr(faiss_store, "write_snapshot", full)
    store = FaissStore(tmp_path / "f")
    assert _state(store) == want  # opened from the log, which stays
    assert (tmp_path / "f" / "c" / "log.jsonl").is_file()
    store.upsert("c", _items("b", 11))
    assert FaissStore(tmp_path / "f").count("c") == 49


def test_a_compaction_killed_at_any_point_leaves_the_collection_whole(tmp_path: Path) -> None:
    want = _written(tmp_path / "f")
    path = tmp_path / "f" / "c"
    log = (path / "log.jsonl").read_bytes()
    # killed before the switch: a half-written next snapshot beside a full log
    (path / "snapshot-1").mkdir()
    (path / "snapshot-1" / "items.jsonl").write_text('{"id": "a0"')
    assert _state(FaissStore(tmp_path / "f")) == want
    FaissStore(tmp_path / "f").compact("c")  # writes over the torn one
    assert _state(FaissStore(tmp_path / "f")) == want
    # killed after the switch, before the log went: its records replay onto the snapshot
    (path / "log.jsonl").write_bytes(log)
    assert _state(FaissStore(tmp_path / "f")) == want
    assert FaissStore(tmp_path / "f").count("c") == 48


def test_a_store_written_before_numbered_snapshots_opens_and_compacts(tmp_path: Path) -> None:
    want = _written(tmp_path / "f")
    path = tmp_path / "f" / "c"
    FaissStore(tmp_path / "f").compact("c")
    for name in ("vectors.npy", "items.jsonl"):  # the old layout: files at the top level
        shutil.move(str(path / "snapshot-1" / name), path / name)
    (path / "snapshot-1").rmdir()
    (path / "snapshot.json").unlink()
    store = FaissStore(tmp_path / "f")
    assert _state(store) == want
    store.upsert("c", _items("b", 12))
    store.compact("c")
    assert not (path / "items.jsonl").exists() and not (path / "vectors.npy").exists()
    assert FaissStore(tmp_path / "f").count("c") == 50
