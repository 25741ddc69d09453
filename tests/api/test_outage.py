"""The store goes away under a running API and comes back: a real Milvus 2.3.5 standalone
server (PyPI ``milvus``) behind a real ``qkv serve`` process.

While Milvus is down, store routes answer 503 with ``Retry-After`` and ``error_type``
``store_unavailable`` (never 500), ``/ready`` is 503, and ``/health`` and embeddings still
work. When Milvus is started again, on the same port and data directory, the same API
process recovers by itself (``MilvusStore`` drops its client after an unavailable error
and reconnects on the next call) and finds the documents written before the outage.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from api_errors import error_of
from store_backends import RestartableMilvus
from uvicorn_server import UvicornServer

DOCS = [
    {"id": "d1", "text": "a brown dog runs in the park", "metadata": {"lang": "en"}},
    {"id": "d2", "text": "a cat sleeps on the beach", "metadata": {"lang": "fr"}},
    {"id": "d3", "text": "two ducks swim in the snow", "metadata": {"lang": "de"}},
]
STORE_TIMEOUT_S = 5.0
RECOVERY_S = 120.0  # Milvus reloads the collection after a restart; slow on 2 busy cores

# a fault run of most of a minute: make test-long (make test stays under 40 minutes)
pytestmark = [pytest.mark.slow, pytest.mark.long]


@pytest.fixture
def milvus(tmp_path: Path) -> Iterator[RestartableMilvus]:
    server = RestartableMilvus(tmp_path / "milvus")
    try:
        server.start()
    except Exception:
        server.stop()
        raise
    yield server
    server.stop()


@pytest.fixture
def api(milvus: RestartableMilvus, tiny_encoder_dir: Path, tmp_path: Path
        ) -> Iterator[UvicornServer]:
    server = UvicornServer(tmp_path / "serve.log", env={
        "QKV_STORE": milvus.uri, "QKV_MODEL": str(tiny_encoder_dir),
        "QKV_STORE_TIMEOUT_S": str(STORE_TIMEOUT_S)})
    server.start()
    yield server
    server.stop()


def eventually(fn: Callable[[], httpx.Response], ok: Callable[[httpx.Response], bool],
               timeout: float) -> httpx.Response:
    """Call ``fn`` until ``ok`` says yes; the last response otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        r = fn()
        if ok(r) or time.monotonic() > deadline:
            return r
        time.sleep(1.0)


def assert_unavailable(r: httpx.Response, error_type: str = "store_unavailable") -> None:
    assert r.status_code == 503, r.text
    assert error_of(r)["error_type"] == error_type, r.text
    assert r.headers["retry-after"] == "1"


def test_store_outage_is_503_and_the_api_recovers(milvus: RestartableMilvus,
                                                   api: UvicornServer) -> None:
    c = httpx.Client(base_url=api.url, timeout=60)
    search = {"query": "a brown dog in the park", "top_k": 3, "consistency": "Strong"}

    assert c.post("/v1/collections", json={"name": "outage"}).status_code == 201
    r = c.post("/v1/collections/outage/documents", json={"documents": DOCS})
    assert r.status_code == 200 and r.json()["upserted"] == 3, r.text
    r = c.post("/v1/collections/outage/search", json=search)
    assert r.status_code == 200, r.text
    before = [h["id"] for h in r.json()["hits"]]
    assert sorted(before) == ["d1", "d2", "d3"]

    milvus.stop()
    t0 = time.monotonic()
    assert_unavailable(c.post("/v1/collections/outage/search", json=search))
    assert_unavailable(c.get("/v1/collections"))
    assert_unavailable(c.get("/v1/collections/outage"))
    assert_unavailable(c.post("/v1/collections/outage/documents", json={"documents": DOCS}))
    assert_unavailable(c.get("/ready"), "not_ready")
    # a dead store costs each request about one store timeout, not more
    assert time.monotonic() - t0 < 5 * 3 * STORE_TIMEOUT_S
    assert c.get("/health").status_code == 200
    assert c.post("/v1/embeddings", json={"input": "still embedding"}).status_code == 200
    assert 'qkv_store_errors_total{kind="unavailable"}' in c.get("/metrics").text

    milvus.start()  # same port, same data directory; the API is not touched
    r = eventually(lambda: c.get("/ready"), lambda r: r.status_code == 200, RECOVERY_S)
    assert r.status_code == 200, f"{r.text}\n{api.log()}"
    r = eventually(lambda: c.post("/v1/collections/outage/search", json=search),
                   lambda r: r.status_code == 200 and len(r.json()["hits"]) == 3, RECOVERY_S)
    assert r.status_code == 200, f"{r.text}\n{api.log()}\n{milvus.log()}"
    assert [h["id"] for h in r.json()["hits"]] == before
    assert c.get("/v1/collections/outage").json()["count"] == 3
    assert api.proc is not None and api.proc.poll() is None  # the same API process throughout
