"""A process that opens a Milvus Lite file allocates Arrow's buffers with the system's
malloc (:mod:`index.milvus.lite.memory`), unless ``ARROW_DEFAULT_MEMORY_POOL`` says
otherwise; the file's rows read back the same."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from index import MilvusStore
from index.milvus.lite import memory as lite_memory
from index.store import Item


def _other_pool() -> pa.MemoryPool:
    for make in (pa.mimalloc_memory_pool, pa.jemalloc_memory_pool):
        try:
            return make()
        except NotImplementedError:  # not built into this pyarrow
            continue
    pytest.skip("this pyarrow has no pool but the system's")


@pytest.fixture
def other_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[pa.MemoryPool]:
    """Arrow's default pool set to another than the system's for the test, and put back."""
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    before = pa.default_memory_pool()
    pool = _other_pool()
    pa.set_memory_pool(pool)
    try:
        yield pool
    finally:
        pa.set_memory_pool(before)


def test_opening_a_lite_file_makes_malloc_arrows_pool(other_pool: pa.MemoryPool,
                                                      tmp_path: Path) -> None:
    assert pa.default_memory_pool().backend_name == other_pool.backend_name != "system"
    store = MilvusStore(str(tmp_path / "m.db"))
    try:
        x = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        store.create("c", 16)  # the first call opens the file
        assert pa.default_memory_pool().backend_name == "system"
        store.upsert("c", [Item(id=str(i), vector=v, text=f"t{i}") for i, v in enumerate(x)])
        store.flush("c")  # a Parquet file written and read back through the new pool
        got = store.get("c", ["0", "299"])
        assert [it.text for it in got] == ["t0", "t299"]
        assert np.allclose(got[1].vector, x[299], atol=1e-6)
    finally:
        store.close()


def test_an_explicit_pool_is_left_as_chosen(other_pool: pa.MemoryPool,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", other_pool.backend_name)
    assert lite_memory.install() is False
    assert pa.default_memory_pool().backend_name == other_pool.backend_name
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL")
    assert lite_memory.install() is True
    assert pa.default_memory_pool().backend_name == "system"
