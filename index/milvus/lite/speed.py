"""Milvus Lite searches that do not rescan the collection: installed into this process's
embedded Milvus Lite before the first connection to a Lite file.

Milvus Lite 3.x is pure Python and runs in this process (pymilvus starts its gRPC server
in a thread). Its searches first walk every primary key of every segment in Python to
decide which rows are visible, and score BM25 posting by posting in Python: per search,
linear in the collection (146 ms dense and 223 ms BM25 at 174,000 captions, 556 ms dense
at 522,000). :mod:`index.milvus.lite.dense` and :mod:`index.milvus.lite.sparse` are the
same two search paths with visibility cached per generation of segments
(:mod:`index.milvus.lite.visibility`) and array postings (:mod:`index.milvus.lite.bm25`);
their results are Lite's own (a test holds them so on random workloads: the same hits
in the same order, BM25 scores to the last bit, inner products to float32 rounding). They are
written to go upstream as they are. Lite's write path loses three per-value Python loops
too (:mod:`index.milvus.lite.writes`), a hit's projection its scans of the schema
(:mod:`index.milvus.lite.projection`), and a filter on a JSON path its row-by-row Python
(in Arrow where it can be, :mod:`index.milvus.lite.filters`), with the same results.

They replace Lite's functions only when the installed Lite is the one they were copied
from (the replaced functions' source hashes to what is recorded here): any other version
runs unpatched, with a warning, at Lite's own speed. ``QKV_LITE_FAST_SEARCH=0`` (a setting
applied by :func:`wiring.runtime.use` before the first connection: :func:`use`) keeps
Lite's own paths (for comparison).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

# sha256 of inspect.getsource of each function replaced, in milvus-lite 3.2.2, and of
# Collection.upsert, which the direct upserts rely on (index.milvus.lite.direct.upsert)
KNOWN_SOURCES = {
    "execute_search_with_index":
        "e22ce49c5ee11c9535792072df8ac5d07fe48f7a76888f1063d46adc14a6022f",
    "Collection._search_sparse":
        "95df328148020ef43914f02127a7b74a4e7e82315bddc75e2e87b88735572552",
    "Collection._build_or_load_segment_index":
        "0031c591fb4c8123c10489d0302a0d18acbe1533ca8d52ff9e28373ae996e30d",
    "validate_record": "51e1a5b3f524c1762bfbadce767276d8e088de2582be31a6546a434eb1c437dd",
    "_find_float_vector": "a9a8f0900a0344e7a7888f2af1a6ff08334d0e6958fb7df1a9903a76d2b2c431",
    "MemTable._build_data_table":
        "6a7d20cc7bdddb80d4cfb22873c77ead82e6b94c1ef6cbf04a3a2db477c70b76",
    "FaissHnswIndex.build": "f9f8f677eb7a79f8c72220166bc7ce630af70e3d21ae8ae90ad3b9caaa153372",
    "project_record": "1a05f13dfb2f8d56af9bd49eaa301091ee2b5a2c6334b65c91bf3c127a1bb337",
    "evaluate_python": "4be0aee27efc870edc0c133586ee69ac49498beab255cf9eaf44e36acfb63878",
    "term_to_id": "39e848f0726b54101f61b8eb7fc80d85e2252a57fdff971a140fe1a1e4df6779",
    "Collection.upsert": "3cea7e04acd70780151ee384436e7808c811598fa54d9bdcb0db6dacf2b40c0a",
}
# A segment smaller than this gets no HNSW graph and is searched exactly by brute force
# (about 3 ms at 50,000 rows, 256 dims, 2 cores): Lite merges small segments into larger
# ones again and again (1,000 → 4,000 → 16,000 → 64,000 → 100,000 rows) and built a graph
# at every step, the largest cost of ingest after the encoder (bench/history/, Scaling).
HNSW_MIN_ROWS = 50_000
# ...but one of at least this many rows that a collection has when it loads gets a graph
# on the collection's background worker after the load (build_later): it stays until more
# writes merge it, and brute force over the segments of a bulk job (32,768 rows each,
# index.milvus.sealing) was most of a dense search of 100,000 documents. Segments made while
# serving are merged again soon, and get none below HNSW_MIN_ROWS.
LOADED_HNSW_MIN_ROWS = 16_384
_state: dict[str, Any] = {"installed": None, "wanted": True}
_lock = threading.Lock()


def use(fast: bool) -> None:
    """Whether this process's first connection to a Lite file installs the fast paths
    (``QKV_LITE_FAST_SEARCH``); a later call changes nothing once they are installed."""
    _state["wanted"] = fast


def wanted() -> bool:
    """Whether this process's Lite connections install the fast paths (:func:`use`)."""
    return bool(_state["wanted"])


def _targets() -> dict[str, Any]:
    from milvus_lite.analyzer import hash as term_hash
    from milvus_lite.engine import collection, projection
    from milvus_lite.index.faiss_hnsw import FaissHnswIndex
    from milvus_lite.schema import validation
    from milvus_lite.search import executor_indexed
    from milvus_lite.search.filter.eval import python_backend
    from milvus_lite.storage import memtable

    return {"execute_search_with_index": executor_indexed.execute_search_with_index,
            "Collection._search_sparse": collection.Collection._search_sparse,
            "Collection._build_or_load_segment_index":
                collection.Collection._build_or_load_segment_index,
            "validate_record": validation.validate_record,
            "_find_float_vector": validation._find_float_vector,
            "MemTable._build_data_table": memtable.MemTable._build_data_table,
            "FaissHnswIndex.build": FaissHnswIndex.build,
            "project_record": projection.project_record,
            "evaluate_python": python_backend.evaluate_python,
            "term_to_id": term_hash.term_to_id,
            "Collection.upsert": collection.Collection.upsert}


def source_hashes() -> dict[str, str]:
    """The sha256 of each replaced (or relied on) function's source as installed
    (unpatched)."""
    originals = _state.get("originals") or _targets()
    return {name: hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
            for name, fn in originals.items()}


def install() -> bool:
    """Replace Lite's two search paths and its write path's loops (once per process);
    whether they now run."""
    with _lock:
        if _state["installed"] is not None:
            return bool(_state["installed"])
        if not _state["wanted"]:
            _state["installed"] = False
            return False
        try:
            targets = _targets()
        except ImportError:  # no Milvus Lite: nothing to patch
            _state["installed"] = False
            return False
        hashes = source_hashes()
        if hashes != KNOWN_SOURCES:
            from milvus_lite import __version__ as version

            log.warning("Milvus Lite %s is not the version qkv's fast search paths were "
                        "written for (3.2.2): searches run on Lite's own, linear in the "
                        "collection", version)
            _state["installed"] = False
            return False
        from milvus_lite.engine import collection
        from milvus_lite.search import executor_indexed

        from index.milvus.lite import dense as lite_dense
        from index.milvus.lite import sparse as lite_sparse

        _state["originals"] = targets
        lite_sparse.ORIGINAL["search_sparse"] = targets["Collection._search_sparse"]
        executor_indexed.execute_search_with_index = lite_dense.execute_search_with_index
        collection.execute_search_with_index = lite_dense.execute_search_with_index
        collection.Collection._search_sparse = lite_sparse.search_sparse
        build = targets["Collection._build_or_load_segment_index"]

        def build_or_load_segment_index(self: Any, seg: Any, spec: Any) -> None:
            if spec.index_type == "HNSW":
                if getattr(self, "_qkv_graphs_wait", False) and not getattr(
                        self, "_qkv_after_load", False):
                    return  # a bulk job's: built as it closes (defer_graphs)
                saved = os.path.exists(seg.index_file_path(
                    self._index_dir(seg.partition), spec.index_type, spec.field_name))
                loaded_size = seg.num_rows >= LOADED_HNSW_MIN_ROWS
                if seg.num_rows < HNSW_MIN_ROWS and not saved and not (
                        loaded_size and getattr(self, "_qkv_after_load", False)):
                    if loaded_size and self._load_state == "loading":
                        build_later(self)
                    return  # searched by brute force until merged into a large segment
                if self._load_state == "loading" and not saved:
                    build_later(self)  # searched exactly meanwhile
                    return
            build(self, seg, spec)  # loads a saved graph, else builds it

        collection.Collection._build_or_load_segment_index = build_or_load_segment_index
        from index.milvus.lite import projection as lite_projection

        lite_projection.ORIGINAL["project_record"] = targets["project_record"]
        collection.project_record = lite_projection.project_record  # its search's, by name
        _install_writes(targets)
        _install_graphs()
        _install_filters(targets)
        _state["installed"] = True
        log.info("Milvus Lite: fast search paths installed")
        return True


def _install_writes(targets: dict[str, Any]) -> None:
    """Lite's write path without its per-value loops (:mod:`index.milvus.lite.writes`)."""
    from milvus_lite.analyzer import protocol
    from milvus_lite.engine import collection
    from milvus_lite.schema import validation
    from milvus_lite.storage import memtable

    from index.milvus.lite import writes as lite_writes

    lite_writes.ORIGINAL.update(validate_record=targets["validate_record"],
                                find_float_vector=targets["_find_float_vector"],
                                build_data_table=targets["MemTable._build_data_table"],
                                term_to_id=targets["term_to_id"])
    collection.validate_record = lite_writes.validate_record
    validation._find_float_vector = lite_writes.find_float_vector
    memtable.MemTable._build_data_table = lite_writes.build_data_table
    protocol.term_to_id = lite_writes.term_to_id  # what every analyzer's analyze() calls


def _install_graphs() -> None:
    """Lite's HNSW graphs over bf16 vectors, their hits scored exactly
    (:mod:`index.milvus.lite.graphs`)."""
    from milvus_lite.index.faiss_hnsw import FaissHnswIndex

    from index.milvus.lite import graphs as lite_graphs

    lite_graphs.ORIGINAL["build"] = FaissHnswIndex.__dict__["build"]
    FaissHnswIndex.build = classmethod(lite_graphs.build)  # type: ignore[method-assign,assignment]


def _install_filters(targets: dict[str, Any]) -> None:
    """Lite's filters on a JSON path in Arrow where they can be, else row by row on the
    columns they read (:mod:`index.milvus.lite.filters`)."""
    from index.milvus.lite import filters as lite_filters

    lite_filters.ORIGINAL["evaluate_python"] = targets["evaluate_python"]
    lite_filters.bind(lite_filters.evaluate_python)


def build_later(col: Any, reason: str = "after the load") -> None:
    """Build the HNSW graphs a loaded collection's segments lack, on its background worker:
    of those of ``HNSW_MIN_ROWS`` rows or more, and here of ``LOADED_HNSW_MIN_ROWS`` or more.

    A process killed after a merge and before the merged segment's graph was saved found
    no graph on the next start, and ``load()`` built it there and then: 72,704 rows took
    more than the 10 s a load may take, and the collection answered 503 after every restart
    (the crasher bench). The load now skips the build; until the graph is there the segment
    is searched exactly by brute force, as segments under ``HNSW_MIN_ROWS`` always are.

    A bulk job has them built as it closes the file (:func:`build_now`): the server that
    loads the collection next found the job's last segments without graphs and built them
    while it answered its first searches (the 22,181 rows after 500,000: the first 200
    queries' dense p99 64 ms against 30 ms when asked again, ``bench/scale.py`` at 522,000
    documents)."""
    if getattr(col, "_qkv_build_later", False) or col._bg_closed:
        return
    col._qkv_build_later = True

    def when_loaded() -> None:
        deadline = time.monotonic() + 600
        while col._load_state == "loading" and time.monotonic() < deadline:
            time.sleep(0.1)
        col._qkv_build_later = False
        if col._load_state == "loaded":
            col._qkv_after_load = True  # segments of LOADED_HNSW_MIN_ROWS get theirs too
            began = time.monotonic()
            try:
                built = col._ensure_loaded_segments_indexed()
            finally:
                col._qkv_after_load = False
            # Lite counts each segment's indexes, the HNSW graph and the BM25 one
            log.info("Milvus Lite: built %d segment indexes (HNSW graphs, BM25) %s in %.1f s",
                     built, reason, time.monotonic() - began)

    col._bg_executor.submit(when_loaded)


def defer_graphs(col: Any) -> None:
    """A bulk job writes ``col``: its segments' graphs wait for the job's close
    (:func:`build_now`) instead of being built on the background worker after Lite's merges,
    beside the encoders. Built there, they took the cores from the encoders and took
    longer themselves (a 32,768-row graph 7.2 s, against 2.75 s alone): ``qkv index`` of
    bench/scale.py's 522,000 documents took 289.8, 283.9 s and 533, 521 core-seconds with
    them, 268.9, 280.4 s and 483, 502 core-seconds with the six graphs built at its close
    (about 65 s of it), peak RSS 2.79, 2.75 → 2.58, 2.66 GB (runs taken in turns, Intel
    Xeon, 2 cores; a throwaway script). A job's own segments are never searched before it
    ends (its process holds the file); one killed before its close leaves them to the next
    load (:func:`build_later`)."""
    col._qkv_graphs_wait = True


def build_now(col: Any, reason: str) -> None:
    """:func:`build_later`, and wait until the collection's background worker has done it
    (and what it had queued before: merges, their graphs), then lift :func:`defer_graphs`:
    segments made later get their graphs on the worker as before."""
    build_later(col, reason)
    col._wait_for_bg()  # returns at once once the worker is shut down
    col._qkv_graphs_wait = False


def uninstall() -> None:
    """Put Lite's own paths back (tests compare the two in one process)."""
    with _lock:
        originals = _state.get("originals")
        if originals:
            from milvus_lite.engine import collection
            from milvus_lite.search import executor_indexed

            executor_indexed.execute_search_with_index = originals["execute_search_with_index"]
            collection.execute_search_with_index = originals["execute_search_with_index"]
            collection.Collection._search_sparse = originals["Collection._search_sparse"]
            collection.Collection._build_or_load_segment_index = originals[
                "Collection._build_or_load_segment_index"]
            collection.project_record = originals["project_record"]
            from milvus_lite.schema import validation
            from milvus_lite.storage import memtable

            collection.validate_record = originals["validate_record"]
            validation._find_float_vector = originals["_find_float_vector"]
            memtable.MemTable._build_data_table = originals["MemTable._build_data_table"]
            from milvus_lite.index.faiss_hnsw import FaissHnswIndex

            from index.milvus.lite import graphs as lite_graphs

            if "build" in lite_graphs.ORIGINAL:
                FaissHnswIndex.build = lite_graphs.ORIGINAL.pop("build")
            from index.milvus.lite import filters as lite_filters

            lite_filters.bind(originals["evaluate_python"])
        _state["installed"] = None


def installed() -> bool:
    return bool(_state["installed"])
