"""Milvus Lite opened a collection twice when two threads touched it at once after a start
(:mod:`index.lite_fixes`): the load went to one object, queries to the other ("in state
'released'"). With the mend, every concurrent opener gets the one cached object."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index import MilvusStore, lite_fixes
from index.store import Item


def _filled_lite_dir(tmp_path: Path) -> Path:
    path = tmp_path / "m.db"
    store = MilvusStore(str(path))
    store.create("c", 8, hybrid=True)
    rng = np.random.default_rng(0)
    for start in range(0, 3000, 500):  # several segments and a write-ahead log to replay
        vectors = rng.standard_normal((500, 8)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        store.upsert("c", [Item(id=str(start + i), vector=v, text=f"text {start + i}")
                           for i, v in enumerate(vectors)])
        if start < 2000:
            store.flush("c")
    store.close(seal=False)
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(path))
    return path


def _concurrent_opens(path: Path, threads: int = 8) -> set[int]:
    from milvus_lite.db import MilvusLite

    db, barrier, got = MilvusLite(str(path)), threading.Barrier(threads), []

    def open_it() -> None:
        barrier.wait()
        got.append(db.get_collection("c"))

    workers = [threading.Thread(target=open_it) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    cached: Any = db.get_collection("c")
    objects = {id(c) for c in got} | {id(cached)}
    db.close()
    return objects


@pytest.mark.parametrize("mended", [True, False])
def test_concurrent_first_opens_share_one_collection(tmp_path: Path, mended: bool) -> None:
    path = _filled_lite_dir(tmp_path)
    if not mended:  # Lite's own: shows that the race is real (else the test proves nothing)
        lite_fixes.uninstall()
        try:
            objects = max((_concurrent_opens(path) for _ in range(3)), key=len)
        finally:
            assert lite_fixes.install()
        assert len(objects) > 1, "Lite no longer opens a collection twice: drop the mend"
    else:
        assert lite_fixes.install()
        assert len(_concurrent_opens(path)) == 1
