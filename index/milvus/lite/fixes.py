"""Mends for faults inside Milvus Lite 3.x itself (two races, lost build parameters),
installed in this process before the first connection to a Lite file (whatever
``QKV_LITE_FAST_SEARCH`` says: these are about correctness, not speed).

- **Two objects for one collection.** ``MilvusLite.get_collection`` opens a collection on
  its first use after a start (replaying its write-ahead log) with no lock between the
  check of its cache and the store into it. Two gRPC threads that touch the collection at
  once after a restart (a read and an upsert, as after every kill -9 of the crasher
  bench) each open and recover it; one object goes into the cache, the other serves the
  call that opened it. A load that went to the other left the cached one ``released``:
  every query then failed "in state 'released'", and ``load_collection`` waited 10 s for
  a load that had happened elsewhere (issue 44). Opening is now one at a time per
  process, so every caller gets the one cached object.
- **Rows unseen while the memtable is flushed.** ``Collection._trigger_flush`` swaps in an
  empty memtable first and adds the flushed segment to the segment cache only later, under
  its maintenance lock. A read between the two (``get``, ``query``, ``search``, the row
  count) sees neither: an acknowledged document answered 404 and was back a second later.
  The first write after a restart flushes (the replayed log counts against the budget), so
  this hit a read-back right after a restart about once in 10,000 (issue 44's crasher). A
  flush now waits for the reads in flight and holds new ones back until its segment is
  readable (:class:`FlushGate`, one per collection).
- **An index's build parameters dropped.** pymilvus sends them flattened, one key each
  (``M``, ``efConstruction``, ``bm25_k1``), as a Milvus server reads them; Lite's
  ``CreateIndex`` reads only a ``params`` key holding them as JSON, and built every HNSW
  graph with its defaults (M 16, efConstruction 200) whatever the collection asked for.
  The flattened keys are now its build parameters when there is no ``params`` key
  (:func:`index_params`).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from index.guarded import ReadWriteLock

log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict[str, Any] = {"installed": False}
# Lite's reads that combine the memtable with the segment cache (``_num_entities`` is
# under the ``num_entities`` property; a ``count(*)`` query is a query)
GATED_READS = ("get", "query", "search", "_num_entities")


class FlushGate(ReadWriteLock):
    """Many reads or one flush (``write``); a waiting flush holds new reads back. A read
    inside a read on the same thread passes (Lite's reads call one another), and so does a
    flush from inside a read (it could not wait for itself)."""

    def __init__(self) -> None:
        super().__init__()
        self._mine = threading.local()

    @contextmanager
    def read(self) -> Iterator[None]:
        depth = getattr(self._mine, "depth", 0)
        self._mine.depth = depth + 1
        try:
            if depth:
                yield
            else:
                with super().read():
                    yield
        finally:
            self._mine.depth = depth

    @contextmanager
    def write(self) -> Iterator[None]:
        if getattr(self._mine, "depth", 0):
            yield
        else:
            with super().write():
                yield


def gate_of(collection: Any) -> FlushGate:
    """The collection object's gate (made on first use)."""
    gate = collection.__dict__.get("_qkv_flush_gate")
    if gate is None:
        with _lock:
            gate = collection.__dict__.setdefault("_qkv_flush_gate", FlushGate())
    return gate


def _gated(method: Any, flush: bool) -> Any:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        gate = gate_of(self)
        with gate.write() if flush else gate.read():
            return method(self, *args, **kwargs)

    return call


# The keys of Lite's CreateIndex that are not build parameters
INDEX_KEYS = frozenset({"index_type", "metric_type", "params", "search_params", "index_name"})


def index_params(original: Any, extra_params: Any) -> dict[str, Any]:
    """Lite's decoding of ``CreateIndex``'s key-value pairs, with the build parameters
    pymilvus sent flattened (each a key, its value as text or JSON) taken too."""
    out: dict[str, Any] = original(extra_params)
    if not out.get("params"):
        flat = {}
        for pair in extra_params:
            if pair.key not in INDEX_KEYS:
                try:
                    flat[pair.key] = json.loads(pair.value)
                except ValueError:
                    flat[pair.key] = pair.value
        out["params"] = flat
    return out


def install() -> bool:
    """Wrap Lite's collection opening in a lock and mend its decoding of an index's build
    parameters (once per process); whether it is."""
    with _lock:
        if _state["installed"]:
            return True
        try:
            from milvus_lite.adapter.grpc import servicer
            from milvus_lite.db import MilvusLite
            from milvus_lite.engine.collection import Collection
        except ImportError:  # no Milvus Lite: nothing to mend
            return False
        decode = servicer.kv_pairs_to_index_params_dict
        servicer.kv_pairs_to_index_params_dict = functools.partial(index_params, decode)
        original = MilvusLite.get_collection
        opening = threading.RLock()  # re-entrant: Lite's own methods call it from inside

        @functools.wraps(original)
        def get_collection(self: Any, *args: Any, **kwargs: Any) -> Any:
            with opening:  # a cache hit is a dict lookup: the lock costs microseconds
                return original(self, *args, **kwargs)

        MilvusLite.get_collection = get_collection
        gated = {name: getattr(Collection, name) for name in (*GATED_READS, "_trigger_flush")}
        for name, method in gated.items():
            setattr(Collection, name, _gated(method, flush=name == "_trigger_flush"))
        _state.update(installed=True, original=original, gated=gated, decode=decode)
        return True


def uninstall() -> None:
    """Put Lite's own methods back (the tests show each fault without its mend)."""
    with _lock:
        if _state["installed"]:
            from milvus_lite.adapter.grpc import servicer
            from milvus_lite.db import MilvusLite
            from milvus_lite.engine.collection import Collection

            servicer.kv_pairs_to_index_params_dict = _state["decode"]
            MilvusLite.get_collection = _state["original"]
            for name, method in _state["gated"].items():
                setattr(Collection, name, method)
            _state["installed"] = False
