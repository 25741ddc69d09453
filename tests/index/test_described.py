"""A collection's info from the store's memory (``VectorStore.described``), for the event
loop that would otherwise hop to a thread for it on every search: only while it is fresh,
only its own collection's (an alias resolved from the alias map in memory), never while a
collection-level change holds or waits for the guard, nor on a damaged store."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from index import MilvusStore
from index.guarded import GuardedStore
from index.milvus import store as milvus_store


def test_described_is_what_describe_said_while_fresh(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = MilvusStore(str(tmp_path / "m.db"))
    try:
        store.create("c", 8)
        store.create("d", 4)
        store.set_alias("a", "c")
        store._info.clear()  # as a fresh process: nothing described yet
        assert store.described("c") is None
        info = store.describe("c")
        assert store.described("c") is info
        store.list_aliases()
        store.describe("a")
        assert store.described("a") is not None and store.described("a").name == "c"
        assert store.described("d") is None  # never described here
        store._aliases.invalidate()  # the alias map stale: nothing read, none given
        assert store.described("a") is None and store.described("c") is None
        store.describe("c")
        monkeypatch.setattr(milvus_store, "INFO_TTL_S", 0.0)  # the info stale
        assert store.described("c") is None
        monkeypatch.undo()
        store.describe("d")
        assert store.described("d") is not None
        store.drop("d")
        assert store.described("d") is None
    finally:
        store.close()


def test_the_guard_gives_none_while_a_change_holds_or_waits(tmp_path: Path) -> None:
    guarded = GuardedStore(MilvusStore(str(tmp_path / "m.db")))
    try:
        guarded.create("c", 8)
        guarded.describe("c")
        assert guarded.described("c") is not None
        entered, leave = threading.Event(), threading.Event()

        def change() -> None:
            with guarded._lock.write():
                entered.set()
                leave.wait(10)

        t = threading.Thread(target=change)
        t.start()
        assert entered.wait(10)
        assert guarded.described("c") is None  # a drop could be under way
        leave.set()
        t.join()
        assert guarded.described("c") is not None
        guarded._damaged = "disk full"
        assert guarded.described("c") is None
        guarded._damaged = None
    finally:
        guarded.close()
