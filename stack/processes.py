"""Processes and ports for the local stack: free ports, readiness probes, and stopping a
process tree by pid (only processes whose start time matches what was recorded)."""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StackError(RuntimeError):
    """The stack cannot start or keep running: a port in use, a stack already running from
    the same directory, a server that exits or is not ready in time."""


def free_port() -> int:
    """A port free to listen on now, drawn below the range the kernel gives outgoing
    connections their own ports from (Linux: ``ip_local_port_range``). A port the kernel
    handed out as free (bind to 0) comes from that range, and a connection another process
    opens before the server binds it (Milvus' to its etcd and its own components) can take
    it: the API then failed to start with "address already in use" (CI, 2026-12-02). Any
    free port where there is no such range below."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(64 if low > 10_001 else 0):
        port = rng.randrange(10_000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The lowest port of the kernel's range for outgoing connections (32768 unread)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_in_use(port: int) -> bool:
    """True when something listens on ``port``. SO_REUSEADDR as servers set it, so that the
    TIME_WAIT connections a stopped server leaves behind do not count."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def http_ok(url: str, needle: bytes = b"") -> bool:
    """True when ``url`` answers 200 (with ``needle`` in the body); never raises."""
    try:
        with _NO_PROXY.open(url, timeout=2) as r:
            return bool(r.status == 200 and needle in r.read())
    except OSError:  # refused, reset, timeout, HTTPError (a 503 /ready)
        return False


def tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no output)"


def wait_until(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes],
               deadline: float, log_path: Path) -> None:
    """Poll ``ready`` until it holds; StackError if ``proc`` exits or time runs out."""
    while not ready():
        if proc.poll() is not None:
            raise StackError(f"{what} exited with status {proc.returncode} while starting; "
                             f"end of {log_path}:\n{tail(log_path)}")
        if time.monotonic() > deadline:
            raise StackError(f"{what} not ready in time (--timeout); see {log_path}")
        time.sleep(0.5)


def live_process(entry: dict[str, Any] | None) -> psutil.Process | None:
    """The ``psutil.Process`` that ``entry`` ({pid, started}) recorded, if it still runs;
    None when it has exited or its pid now belongs to another process."""
    if not entry:
        return None
    try:
        p = psutil.Process(int(entry["pid"]))
        if abs(p.create_time() - float(entry["started"])) > 0.5:
            return None
        return None if p.status() == psutil.STATUS_ZOMBIE else p
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None


def stop_process(p: psutil.Process, grace: float) -> bool:
    """TERM ``p`` and its descendants (each by its own pid), wait ``grace`` s, then KILL what
    is left. Returns False when something had to be killed."""
    with contextlib.suppress(psutil.Error):
        procs = [*p.children(recursive=True), p]
        for q in procs:
            with contextlib.suppress(psutil.Error):
                q.terminate()
        _, alive = psutil.wait_procs(procs, timeout=grace)
        for q in alive:
            with contextlib.suppress(psutil.Error):
                q.kill()
        psutil.wait_procs(alive, timeout=10)
        return not alive
    return True




def mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
