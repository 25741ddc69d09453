"""Milvus Lite's gRPC port served any local user (issue 68, finding 6): whoever found the
port on 127.0.0.1 could read and write every collection past the service's keys and
tenants. The port now takes calls carrying this process's token only
(:mod:`index.milvus.lite.private`)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from pymilvus import MilvusClient
from pymilvus.exceptions import MilvusException

from index import MilvusStore
from index.milvus.lite.private import TOKEN
from index.store import Item


def test_the_lite_port_refuses_a_caller_without_the_token(tmp_path: Path) -> None:
    from milvus_lite.server_manager import server_manager_instance

    path = tmp_path / "private.db"
    store = MilvusStore(str(path))
    store.create("secret", 4)
    store.upsert("secret", [Item(id="s1", vector=np.array([1, 0, 0, 0], np.float32),
                                 text="tenant b's confidential text")])
    server, _, port = server_manager_instance._servers[str(path.resolve())]
    t0 = time.monotonic()
    with pytest.raises(MilvusException):
        MilvusClient(uri=f"http://127.0.0.1:{port}", timeout=5).list_collections()
    with pytest.raises(MilvusException):
        MilvusClient(uri=f"http://127.0.0.1:{port}", token="root:Milvus",
                     timeout=5).query("secret", ids=["s1"])
    assert time.monotonic() - t0 < 30
    insider = MilvusClient(uri=f"http://127.0.0.1:{port}", token=TOKEN, timeout=5)
    assert "secret" in insider.list_collections()
    assert store.get("secret", ["s1"])[0].text == "tenant b's confidential text"
