"""The process's memory while it serves several encoders (issue 38).

glibc's malloc gives each thread that allocates its own arena (up to 8 a core) and keeps
freed memory in them. A service with three encoders has three batcher threads and three
ONNX Runtime thread pools allocating batch buffers, so arenas multiply; loading an encoder
frees its float16 and dequantisation buffers, which malloc keeps. Measured on 2 cores
(three encoders loaded and used from their own threads): 777 MB as is, 620 MB with at most
two arenas and a trim after each load. Elsewhere than glibc (musl, macOS) both are no-ops.
``MALLOC_ARENA_MAX`` in the environment, when set, wins over :func:`cap_arenas`.

And the garbage collector's: what the service holds from startup on is frozen out of its
full collections (:func:`freeze_heap`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
from functools import cache
from typing import Any

log = logging.getLogger(__name__)
M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)


@cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def cap_arenas(n: int = 2) -> bool:
    """At most ``n`` malloc arenas for the threads made from now on; whether it took."""
    libc = _libc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, n))


def trim() -> bool:
    """Give freed heap memory back to the system; whether any was."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def freeze_heap() -> int:
    """Collect, then move every object alive now (the encoder, the app, its schemas: about
    250,000 tracked objects) into the garbage collector's permanent generation, where its
    full collections no longer walk them; how many were frozen. Each full collection walked
    them all, holding the GIL for 138 ms while the encoder threads and the event loop
    waited: POST /v1/embeddings cost the event loop 356-367 us of CPU a request thawed
    against 218-220 frozen (bench/api_overhead.py, two recorded runs, AMD EPYC 2 cores).
    Undone by :func:`thaw_heap` at shutdown, so a process that makes and drops many apps
    (the tests) can still collect their cycles."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def thaw_heap() -> None:
    """Give the frozen objects back to the collector (:func:`freeze_heap`)."""
    gc.unfreeze()
