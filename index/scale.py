"""How large a collection each backend serves fast, from the curve ``bench/scale.py``
measures (bench/history/, "Scaling"), and the warning a collection past it carries.

"Fast" is the service's targets on 2 cores: a dense search through the API within 3 × the
time to embed the query, a hybrid one within 8 ×, p99 within 2.5 × p50. Past the size
below, a backend still answers correctly, only slower (FAISS flat scans every vector;
Milvus Lite holds every collection in this process's memory and loads it at start).
"""

from __future__ import annotations

from typing import Any

# Documents per collection a backend serves within the targets (None: no limit measured)
FAST_UP_TO: dict[str, int | None] = {
    "milvus-lite": 1_000_000,  # 2.8 x / 6.9 x at 1,000,000, 3.5 GB; larger: not measured
    "faiss-flat": 50_000,  # exact scan: 3.6 x the embedding time at 100,000
    "faiss-hnsw": None,
    "milvus": None,
}
ALTERNATIVE = {
    "milvus-lite": "a Milvus server (`make stack`, then --store http://localhost:19530)",
    "faiss-flat": "faiss+hnsw://DIR (an HNSW graph instead of a scan) or a Milvus server",
}


def backend(store: Any) -> str:
    """The backend's name: ``milvus-lite``, ``milvus``, ``faiss-flat`` or ``faiss-hnsw``."""
    name = getattr(store, "backend", None)
    return str(name) if name else type(store).__name__


def size_warning(backend_name: str, documents: int | None) -> str | None:
    """A sentence for a collection past what its backend serves fast, else None."""
    limit = FAST_UP_TO.get(backend_name)
    if limit is None or documents is None or documents <= limit:
        return None
    return (f"{documents:,} documents is past the {limit:,} that {backend_name} serves within "
            f"the latency targets (bench/scale.py); searches still answer, slower. For "
            f"collections this size use {ALTERNATIVE.get(backend_name, 'a Milvus server')}.")
