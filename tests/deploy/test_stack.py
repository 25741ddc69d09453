"""``qkv stack up`` / ``qkv stack down`` end to end: a real Milvus 2.3.5 standalone (PyPI
``milvus``) and ``qkv serve`` as children of ``qkv stack up``, on free ports, with a
temporary state directory. Documents indexed through the API are still there after the
stack is stopped and started again; both ways of stopping (``qkv stack down`` and Ctrl-C)
leave no process behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from stack import free_port

pytestmark = pytest.mark.slow

DOCS = [{"id": "cat", "text": "The cat sat on the mat.", "metadata": {"topic": "pets"}},
        {"id": "rates", "text": "Interest rates rose again in March.", "value": "finance"},
        {"id": "flute", "text": "A man is playing a flute on the stage."}]


def qkv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


class Stack:
    """``qkv stack up`` in a subprocess over ``var_dir`` with fixed free ports."""

    def __init__(self, var_dir: Path, model: Path) -> None:
        self.var_dir, self.port = var_dir, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = ["--var-dir", str(var_dir), "--port", str(self.port),
                     "--milvus-port", str(free_port()), "--model", str(model),
                     "--timeout", "300", "--stop-timeout", "10"]
        self.log = var_dir.parent / "stack-up.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def up(self) -> dict[str, int]:
        """Start it, wait until the API is ready; returns role -> pid from stack.json."""
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(qkv("stack", "up", *self.args), stdout=out,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 330
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"qkv stack up exited:\n{self.output()}"
            state = self.state()
            if state.get("status") == "ready":
                assert httpx.get(f"{self.url}/ready", timeout=10).status_code == 200
                return {role: p["pid"] for role, p in state["processes"].items()}
            time.sleep(0.5)
        raise TimeoutError(f"stack not ready:\n{self.output()}")

    def state(self) -> dict[str, Any]:
        path = self.var_dir / "stack.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def wait_exit(self, timeout: float = 90) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def assert_stopped(stack: Stack, pids: dict[str, int]) -> None:
    assert {"stack", "milvus", "api"} == set(pids)
    left = {role: pid for role, pid in pids.items() if not gone(pid)}
    assert not left, f"still running after stop: {left}"
    assert not list(stack.var_dir.glob("*.pid")) and not (stack.var_dir / "stack.json").exists()
    assert (stack.var_dir / "milvus" / "data").is_dir()  # the data stays


def search_top(url: str, text: str) -> str:
    r = httpx.post(f"{url}/v1/collections/notes/search", json={"query": text, "top_k": 1},
                   timeout=60)
    assert r.status_code == 200, r.text
    return str(r.json()["hits"][0]["id"])


def test_stack_indexes_searches_and_keeps_documents_across_a_restart(
        tmp_path: Path, tiny_encoder_dir: Path) -> None:
    stack = Stack(tmp_path / "stack", tiny_encoder_dir)
    try:
        pids = stack.up()
        for role in ("stack", "milvus", "api"):
            assert (stack.var_dir / f"{role}.pid").read_text().strip() == str(pids[role])
        assert psutil.Process(pids["milvus"]).cmdline()[1:] == ["run", "standalone"]

        # a second stack from the same directory is refused before it starts anything
        again = subprocess.run(qkv("stack", "up", *stack.args), capture_output=True, text=True,
                               timeout=60)
        assert again.returncode == 1 and "already running" in again.stderr
        status = subprocess.run(qkv("stack", "status", "--var-dir", str(stack.var_dir)),
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and "ready" in status.stdout, status.stdout

        r = httpx.post(f"{stack.url}/v1/collections", json={"name": "notes"}, timeout=60)
        assert r.status_code == 201, r.text
        r = httpx.post(f"{stack.url}/v1/collections/notes/documents", json={"documents": DOCS},
                       timeout=60)
        assert r.status_code == 200 and r.json()["upserted"] == 3, r.text
        assert search_top(stack.url, DOCS[1]["text"]) == "rates"

        down = subprocess.run(qkv("stack", "down", "--var-dir", str(stack.var_dir)),
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0 and "stack" in down.stdout, down.stdout + down.stderr
        assert stack.wait_exit() == 0, stack.output()
        assert_stopped(stack, pids)

        pids = stack.up()  # same directory and ports: Milvus reopens its data
        r = httpx.get(f"{stack.url}/v1/collections/notes", timeout=60)
        assert r.status_code == 200 and r.json()["count"] == 3, r.text
        for doc in DOCS:
            assert search_top(stack.url, doc["text"]) == doc["id"]
        r = httpx.get(f"{stack.url}/v1/collections/notes/documents/rates", timeout=60)
        assert r.status_code == 200 and r.json()["value"] == "finance", r.text

        assert stack.proc is not None
        stack.proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert stack.wait_exit() == 0, stack.output()
        assert "qkv stack: stopped" in stack.output()
        assert_stopped(stack, pids)
        down = subprocess.run(qkv("stack", "down", "--var-dir", str(stack.var_dir)),
                              capture_output=True, text=True, timeout=60)
        assert down.returncode == 0 and "nothing running" in down.stdout
    finally:
        subprocess.run(qkv("stack", "down", "--var-dir", str(stack.var_dir)), timeout=120,
                       capture_output=True)
        if stack.proc is not None and stack.proc.poll() is None:
            stack.proc.kill()
            stack.proc.wait(10)
