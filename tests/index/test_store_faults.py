"""A store that failed at the file level is healed before it takes writes again
(:class:`index.guarded.GuardedStore`), and a Milvus server's disk quota is a full store, not
a failure (:func:`index.milvus.conn.failure`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index import open_store
from index.guarded import GuardedStore
from index.milvus.conn import failure
from index.store import (
    Item,
    StoreDamagedError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
)


class Failing:
    """A real store whose next ``fail_upserts`` upserts fail as Lite's did on a full disk,
    and whose counts fail while ``count_down`` is set (the store not back yet)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.fail_upserts, self.count_down, self.counted = inner, 0, False, 0

    def upsert(self, *args: Any, **kwargs: Any) -> int:
        if self.fail_upserts:
            self.fail_upserts -= 1
            raise StoreDamagedError("Milvus Lite could not write (upsert)", "No space left")
        return int(self.inner.upsert(*args, **kwargs))

    def count(self, *args: Any, **kwargs: Any) -> int:
        if self.count_down:
            raise StoreUnavailableError("Milvus unreachable (count)")
        self.counted += 1
        return int(self.inner.count(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _items(ids: range) -> list[Item]:
    v = np.eye(4, dtype=np.float32)
    return [Item(id=str(i), vector=v[i % 4], text=f"t{i}") for i in ids]


def test_a_damaged_store_takes_writes_only_after_every_collection_counts(tmp_path: Path
                                                                        ) -> None:
    inner = Failing(open_store(f"faiss://{tmp_path}"))
    store = GuardedStore(inner)  # type: ignore[arg-type]
    store.create("a", 4)
    store.create("b", 4)
    store.upsert("a", _items(range(3)))
    inner.fail_upserts = 1
    with pytest.raises(StoreDamagedError):
        store.upsert("a", _items(range(3, 6)))
    assert store.damaged is not None and "could not write" in store.damaged
    assert store.count("a") == 3  # reads go on while damaged
    inner.count_down = True  # not back yet: the write waits (503), nothing is written
    with pytest.raises(StoreUnavailableError, match="being re-opened"):
        store.upsert("a", _items(range(3, 6)))
    assert store.damaged is not None
    inner.count_down, inner.counted = False, 0
    assert store.upsert("a", _items(range(3, 6))) == 3  # healed on the way
    assert store.damaged is None and inner.counted == 2  # both collections counted
    assert store.count("a") == 6
    assert store.heal() is False  # nothing left to heal


def test_a_server_disk_quota_is_a_full_store() -> None:
    quota = Exception("<MilvusException: (code=53, message=quota exceeded[reason=disk quota "
                      "exceeded, please allocate more resources])>")
    err = failure("upsert", quota, "http://milvus:19530")
    assert isinstance(err, StoreFullError) and "disk quota" in str(err)
    io = failure("upsert", OSError(28, "No space left on device"), "/srv/qkv/m.db")
    assert isinstance(io, StoreDamagedError) and "/srv" not in str(io)
    assert type(failure("search", ValueError("bad"), "http://m:19530")) is StoreError


def test_a_full_store_answers_507_with_retry_after() -> None:
    from api.errors import from_exception

    e = from_exception(StoreFullError("the Milvus server refuses writes", "quota text"))
    assert e.status == 507 and e.error_type == "insufficient_storage"
    assert int(e.headers["Retry-After"]) > 0 and "quota text" not in e.message
