"""The faiss store under concurrent first requests and writes: what a ``kill -9`` test saw
once in CI (a collection's count one acknowledged batch short after a restart) made exact,
and a faiss index built across a write."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from index.faiss import memory as faiss_memory
from index.faiss.store import FaissStore
from index.store import Item

DIM = 8


def _items(prefix: str, n: int, seed: int) -> list[Item]:
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return [Item(f"{prefix}-{i}", vecs[i], f"text {prefix} {i}") for i in range(n)]


def _side_by_side(jobs: list[Callable[[], object]]) -> None:
    start = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def go(job: Callable[[], object]) -> None:
        start.wait()
        try:
            job()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_first_writes_after_a_start_are_all_kept(tmp_path: Path) -> None:
    """Writers that reach a freshly opened store together each open the collection; every
    write that returned is in memory and in the log, whichever opened it first."""
    root = tmp_path / "f"
    first = FaissStore(root)
    first.create("c", DIM)
    for b in range(20):  # a log long enough that replaying it takes a while
        first.upsert("c", _items(f"old{b}", 200, b))
    total = 20 * 200
    for round_ in range(8):
        store = FaissStore(root)  # a restart: nothing open yet
        batches = [_items(f"r{round_}w{w}", 16, 100 + w) for w in range(6)]
        _side_by_side([lambda b=b, s=store: s.upsert("c", b) for b in batches])
        total += 6 * 16
        assert store.count("c") == total
        assert FaissStore(root).count("c") == total  # the log agrees


def test_an_index_built_across_a_write_is_not_kept(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that lands while a search builds the faiss index (another request thread)
    leaves that index stale: it answers the search that built it but is not kept, so every
    later search finds the write."""
    store = FaissStore(tmp_path / "f")
    store.create("c", DIM)
    store.upsert("c", _items("base", 50, 0))
    late = _items("late", 1, 1)[0]
    real = faiss_memory.faiss.IndexFlatIP

    class WriteMidBuild(real):  # type: ignore[misc, valid-type]
        def add(self, xb: np.ndarray) -> None:
            super().add(xb)
            if store.count("c") == 50:
                store.upsert("c", [late])  # as another thread's write would, mid-build

    monkeypatch.setattr(faiss_memory.faiss, "IndexFlatIP", WriteMidBuild)
    store.search("c", late.vector[None, :], k=1)  # builds the index; the write lands
    monkeypatch.setattr(faiss_memory.faiss, "IndexFlatIP", real)
    assert store.search("c", late.vector[None, :], k=1)[0][0].id == late.id


def test_a_search_across_a_delete_answers_without_the_deleted_item(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delete that lands while a search builds its index: that search answers (it used
    to fail looking up the gone item) and leaves the item out; filtered searches too."""
    store = FaissStore(tmp_path / "f")
    store.create("c", DIM)
    items = _items("base", 20, 0)
    store.upsert("c", items)
    real = faiss_memory.faiss.IndexFlatIP

    class DeleteMidBuild(real):  # type: ignore[misc, valid-type]
        def add(self, xb: np.ndarray) -> None:
            super().add(xb)
            if store.count("c") == 20:
                store.delete("c", ["base-0"])  # as another thread's delete would

    monkeypatch.setattr(faiss_memory.faiss, "IndexFlatIP", DeleteMidBuild)
    hits = store.search("c", items[0].vector[None, :], k=5)[0]
    assert hits and "base-0" not in [h.id for h in hits]
    monkeypatch.setattr(faiss_memory.faiss, "IndexFlatIP", real)
    assert "base-0" not in [h.id for h in store.search("c", items[0].vector[None, :], k=5)[0]]


def test_aliases_set_at_once_are_all_kept(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each alias change reads aliases.json and writes it back whole: two at once each kept
    only their own. The read is held open here so that every change overlaps the others."""
    import index.faiss.store as faiss_store

    store = FaissStore(tmp_path)
    store.create("docs", DIM)
    checked = faiss_store.checked_set

    def slow_check(*args: object) -> dict[str, str]:
        aliases = checked(*args)
        threading.Event().wait(0.05)  # the others read the same file meanwhile
        return aliases

    monkeypatch.setattr(faiss_store, "checked_set", slow_check)
    _side_by_side([lambda i=i: store.set_alias(f"a{i}", "docs") for i in range(6)])
    want = {f"a{i}": "docs" for i in range(6)}
    assert store.list_aliases() == want
    assert FaissStore(tmp_path).list_aliases() == want  # and on disk
    _side_by_side([lambda i=i: store.drop_alias(f"a{i}") for i in range(3)])
    assert FaissStore(tmp_path).list_aliases() == {f"a{i}": "docs" for i in range(3, 6)}
