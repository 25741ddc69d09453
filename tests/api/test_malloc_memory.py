"""api.memory: malloc's arenas capped and freed memory trimmed (issue 38's memory target is
measured by bench/encoders_load.py; here, that the calls reach glibc and respect the user's
own MALLOC_ARENA_MAX)."""

from __future__ import annotations

import platform

import pytest

from api import memory

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
