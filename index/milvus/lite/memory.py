"""Arrow's allocations in a process that runs Milvus Lite: the C library's malloc, not
pyarrow's default (mimalloc).

Lite builds every write, flush, merge and search result as Arrow tables in this process.
With pyarrow's mimalloc pool most of that memory went back to the system and was faulted
in again by the next table: the store's write path alone (100,000 rows of ``qkv index``'s
bulk documents, cached vectors, a throwaway script, Intel Xeon, 2 cores) spent 8.2 s of
its 32 s of CPU in the kernel, and each 32,768-row flush took 0.7–1.0 s to build and
0.6–0.8 s to write its Parquet file, where the same file is written in 0.12 s on its own.
With the system pool: writes 14.9 → 8.3 s, the kernel's share 8.2 → 1.4 s, a flush
0.1 + 0.15 s. The whole job of 100,000 documents, bf16 graphs, in turns: 62.3, 58.7 s
with mimalloc against 56.6, 52.0 s with the system pool.

Set when the first Lite file is opened (:func:`index.milvus.conn.connect`), so it also
holds where qkv is a library; an explicit ``ARROW_DEFAULT_MEMORY_POOL`` is left as it is.
Buffers already allocated keep the pool they came from.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def install() -> bool:
    """Make the system allocator Arrow's default pool in this process; whether it is now
    (not where ``ARROW_DEFAULT_MEMORY_POOL`` chose another)."""
    import pyarrow as pa

    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL") and (
            pa.default_memory_pool().backend_name != "system"):
        log.debug("Arrow allocations: system malloc (was %s)",
                  pa.default_memory_pool().backend_name)
        pa.set_memory_pool(pa.system_memory_pool())
    return bool(pa.default_memory_pool().backend_name == "system")
