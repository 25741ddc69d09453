"""The four store backends of the contract tests, and the real servers behind two of them.

The servers are started and stopped by session fixtures in conftest.py:

* ``milvus==2.3.5`` (PyPI) ships Milvus standalone with embedded etcd and local storage;
  :class:`milvus.MilvusServer` unpacks the binary into the data directory and starts it
  as our direct child. Every port it needs is picked free; the gRPC port is ours.
* ``milvus-lite server`` serves a Milvus Lite data directory over gRPC.

Both run in a temporary directory and are stopped by their own pid (TERM, then KILL), so
nothing outlives the test session.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index import FaissStore, MilvusStore, VectorStore
from stack import MilvusStandalone, free_port

log = logging.getLogger(__name__)




def wait_for_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listening on port {port} after {timeout} s")


def stop_process(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class RestartableMilvus(MilvusStandalone):
    """Milvus 2.3.5 standalone over ``data_dir`` that a test can stop and start again on the
    same port and data (:class:`stack.MilvusStandalone`: every port free, etcd's too,
    so it also runs beside another Milvus on the machine)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, start_timeout_s=180.0, stop_timeout_s=5.0)


@contextlib.contextmanager
def milvus_standalone(data_dir: Path) -> Iterator[str]:
    """Milvus 2.3.5 standalone on free ports (its etcd's too); yields its ``http://`` URI."""
    server = RestartableMilvus(data_dir)
    t0 = time.monotonic()
    try:
        server.start()  # blocks until /healthz says OK (raises after 180 s)
        log.info("milvus 2.3.5 on port %d in %.1f s", server.port, time.monotonic() - t0)
        yield server.uri
    finally:
        server.stop()


class LiteServer:
    """``milvus-lite server`` over ``data_dir``; can be stopped and started again on the
    same port (to play a store that goes away and comes back)."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir, self.port = data_dir, port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        exe = Path(sys.executable).with_name("milvus-lite")
        with open(self.data_dir.parent / f"{self.data_dir.name}.log", "ab") as log_file:
            self.proc = subprocess.Popen(
                [str(exe), "server", "--data-dir", str(self.data_dir), "--host", "127.0.0.1",
                 "--port", str(self.port), "--max-workers", "4"],
                stdout=log_file, stderr=subprocess.STDOUT)
        wait_for_port(self.port, 60, self.proc)
        return self.uri

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace=5.0)
            self.proc = None


@contextlib.contextmanager
def milvus_lite_server(data_dir: Path) -> Iterator[str]:
    """``milvus-lite server`` on a free port; yields its ``http://`` URI."""
    server = LiteServer(data_dir)
    try:
        yield server.start()
    finally:
        server.stop()


S3_CREDS = {"AWS_ACCESS_KEY_ID": "qkvtest", "AWS_SECRET_ACCESS_KEY": "qkvtest-secret"}


@contextlib.contextmanager
def s3_server(*buckets: str) -> Iterator[tuple[str, Any]]:
    """moto's S3 server (a real S3 API over HTTP) on a free port, with ``buckets`` made;
    yields its endpoint (``http://127.0.0.1:PORT``) and a minio client of it. The caller
    puts :data:`S3_CREDS` in the environment of what it tests."""
    pytest.importorskip("moto")
    minio = pytest.importorskip("minio")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, 60, proc)
        client = minio.Minio(f"127.0.0.1:{port}", S3_CREDS["AWS_ACCESS_KEY_ID"],
                             S3_CREDS["AWS_SECRET_ACCESS_KEY"], secure=False)
        for bucket in buckets:
            client.make_bucket(bucket)
        yield f"http://127.0.0.1:{port}", client
    finally:
        stop_process(proc)


BACKENDS = ["faiss", "lite-file", "milvus-2.3.5", "lite-server"]


def open_backend(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> VectorStore:
    if backend == "faiss":
        return FaissStore(tmp_path / "faiss", index_type="hnsw")
    if backend == "lite-file":
        return MilvusStore(str(tmp_path / "lite.db"))
    if backend == "milvus-2.3.5":
        return MilvusStore(request.getfixturevalue("milvus_server_uri"))
    if backend == "lite-server":
        return MilvusStore(request.getfixturevalue("lite_server_uri"))
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def unit_rows(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)
