"""``qkv serve`` in a subprocess on a free localhost port: the real uvicorn process that the
openai-client and outage tests drive over HTTP.

Settings go in as ``QKV_*`` environment variables (the deployment path); the process is
stopped by its own pid (TERM, then KILL) so nothing outlives the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from store_backends import free_port, stop_process


class UvicornServer:
    """``qkv serve --port PORT *args`` with ``env`` (``QKV_*``) added to this process's
    environment; its output goes to ``log_path``."""

    def __init__(self, log_path: Path, args: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.log_path, self.args, self.env = log_path, args or [], env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> str:
        """Start the process and wait until ``/ready`` answers 200 and says the demo
        collections (if any) are filled; returns the base URL."""
        exe = Path(sys.executable).with_name("qkv")
        env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [str(exe), "serve", "--host", "127.0.0.1", "--port", str(self.port),
                 "--log-level", "warning", *self.args],
                stdout=log_file, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"qkv serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                r = httpx.get(f"{self.url}/ready", timeout=5)
                if r.status_code == 200 and all(  # and its demo collections filled
                        p["state"] not in ("waiting", "seeding")
                        for p in r.json().get("seeding") or []):
                    return self.url
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"qkv serve not ready after {timeout} s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace=10.0)
            self.proc = None

    def log(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""
