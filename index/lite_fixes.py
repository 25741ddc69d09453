"""Mends for races inside Milvus Lite 3.x itself, installed in this process before the
first connection to a Lite file (whatever ``QKV_LITE_FAST_SEARCH`` says: these are about
correctness, not speed).

- **Two objects for one collection.** ``MilvusLite.get_collection`` opens a collection on
  its first use after a start (replaying its write-ahead log) with no lock between the
  check of its cache and the store into it. Two gRPC threads that touch the collection at
  once after a restart (a read and an upsert, as after every kill -9 of the crasher
  bench) each open and recover it; one object goes into the cache, the other serves the
  call that opened it. A load that went to the other left the cached one ``released``:
  every query then failed "in state 'released'", and ``load_collection`` waited 10 s for
  a load that had happened elsewhere (issue 44). Opening is now one at a time per
  process, so every caller gets the one cached object.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict[str, Any] = {"installed": False}


def install() -> bool:
    """Wrap Lite's collection opening in a lock (once per process); whether it is."""
    with _lock:
        if _state["installed"]:
            return True
        try:
            from milvus_lite.db import MilvusLite
        except ImportError:  # no Milvus Lite: nothing to mend
            return False
        original = MilvusLite.get_collection
        opening = threading.RLock()  # re-entrant: Lite's own methods call it from inside

        @functools.wraps(original)
        def get_collection(self: Any, *args: Any, **kwargs: Any) -> Any:
            with opening:  # a cache hit is a dict lookup: the lock costs microseconds
                return original(self, *args, **kwargs)

        MilvusLite.get_collection = get_collection
        _state["installed"], _state["original"] = True, original
        return True


def uninstall() -> None:
    """Put Lite's own ``get_collection`` back (the test shows the race without the lock)."""
    with _lock:
        if _state["installed"]:
            from milvus_lite.db import MilvusLite

            MilvusLite.get_collection = _state["original"]
            _state["installed"] = False
