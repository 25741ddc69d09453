"""A Lite search's sources (segments and memtable) searched side by side and merged
(:func:`index.milvus.lite.dense.each`, :func:`index.milvus.lite.dense.merged`); the equality
of whole searches with Lite's own is ``test_lite_speed``'s."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from index.milvus.lite import dense


def test_each_keeps_the_order_and_uses_helper_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense.os, "cpu_count", lambda: 3)
    threads: set[str] = set()

    def work(x: int) -> int:
        threads.add(threading.current_thread().name)
        time.sleep(0.02)  # long enough for a helper to take some
        return x * x

    assert dense.each(work, list(range(8))) == [x * x for x in range(8)]
    assert threading.current_thread().name in threads
    assert any(t.startswith("qkv-lite-search") for t in threads), threads
    threads.clear()
    assert dense.each(work, list(range(4)), side_by_side=False) == [0, 1, 4, 9]
    assert threads == {threading.current_thread().name}
    assert dense.each(work, []) == []


def test_each_raises_an_error_once_the_items_taken_are_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense.os, "cpu_count", lambda: 3)
    done: list[int] = []

    def work(x: int) -> int:
        time.sleep(0.01)
        if x == 2:
            raise RuntimeError("segment 2 failed")
        done.append(x)
        return x

    with pytest.raises(RuntimeError, match="segment 2 failed"):
        dense.each(work, list(range(6)))
    assert sorted(done) == [0, 1, 3, 4, 5]  # every other item still searched, none left running


@pytest.mark.parametrize("seed", range(20))
def test_merged_is_the_sorted_union_of_the_sources(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nq, k = int(rng.integers(1, 4)), int(rng.integers(1, 12))
    found: list[tuple[np.ndarray, np.ndarray] | None] = []
    want: list[list[tuple[float, int, int]]] = [[] for _ in range(nq)]
    for source in range(int(rng.integers(0, 6))):
        if rng.random() < 0.2:
            found.append(None)  # no rows in scope
            continue
        width = int(rng.integers(1, 15))
        ids = np.full((nq, width), -1, np.int64)
        dists = np.full((nq, width), np.inf, np.float32)
        for q in range(nq):
            n = int(rng.integers(0, width + 1))
            ids[q, :n] = rng.choice(1000, size=n, replace=False)
            # few distinct distances: ties, broken by source then local id
            dists[q, :n] = np.sort(rng.integers(-5, 5, size=n).astype(np.float32) / 4)
            want[q] += [(float(dists[q, j]), source, int(ids[q, j])) for j in range(n)]
        found.append((ids, dists))
    got = dense.merged(found, nq, k)
    assert got == [sorted(c)[:k] for c in want]
