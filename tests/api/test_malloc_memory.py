"""wiring.memory: malloc's arenas capped and freed memory trimmed (issue 38's memory target is
measured by bench/encoders_load.py; here, that the calls reach glibc and respect the user's
own MALLOC_ARENA_MAX); the garbage collector's heap frozen while an app serves (what it
saves is bench/api_overhead.py's)."""

from __future__ import annotations

import gc
import platform

import pytest
from conftest import MakeClient

from wiring import memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")


@glibc
def test_arenas_are_capped_unless_the_user_set_malloc_arena_max(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert memory.cap_arenas(8) is True
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert memory.cap_arenas(2) is False  # theirs wins


@glibc
def test_trim_gives_freed_heap_back() -> None:
    blocks = [bytearray(100_000) for _ in range(200)]  # below mmap's threshold: the heap
    del blocks
    assert memory.trim() is True


def test_the_heap_is_frozen_while_an_app_serves_and_thawed_after(make_client: MakeClient) -> None:
    gc.unfreeze()
    client = make_client()
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # the encoder, the app and its schemas
    was = gc.isenabled()
    gc.disable()  # no automatic collection takes the cycle first (other tests' threads
    try:  # allocate meanwhile): the collection below must find it
        garbage = [[]]
        garbage[0].append(garbage)  # a cycle made after startup: still collectable
        del garbage
        assert gc.collect() >= 1
        # still frozen: a thaw empties the frozen generation; a frozen object another
        # test's thread lets go of meanwhile is freed from it (1,005,372 -> 1,005,370 once)
        assert frozen - 100 <= gc.get_freeze_count() <= frozen
    finally:
        if was:
            gc.enable()
    client.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0
