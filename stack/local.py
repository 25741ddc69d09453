"""The stack without Docker: a real Milvus standalone server (PyPI ``milvus==2.3.5``) and the
API, as child processes of ``qkv stack up``, which waits until both are ready and stops both
on Ctrl-C, SIGTERM or ``qkv stack down``.

Everything lives under one directory (``var/stack`` by default)::

    milvus/                Milvus' base directory: bin/ (the server, unpacked from the wheel
                           once, 250 MB), configs/, data/ (etcd, rocksmq, segments), logs/
    api.log                the API's output
    stack.pid, milvus.pid, api.pid
    stack.json             status, URLs, and each process's pid and start time

``down`` signals only processes whose start time matches ``stack.json``, so a pid that the
system has since given to another program is never touched.

The Milvus server itself: :mod:`stack.milvus_standalone`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from stack.milvus_standalone import MILVUS_VERSION, start_milvus
from stack.processes import (
    StackError,
    free_port,
    http_ok,
    live_process,
    mkdir,
    port_in_use,
    stop_process,
    wait_until,
)

log = logging.getLogger(__name__)

ROLES = ("stack", "milvus", "api")
API_STOP_S = 15.0  # uvicorn finishes in-flight requests, then the lifespan closes the store


@dataclass(frozen=True)
class StackConfig:
    """Where the stack keeps its state, its ports, and how long it waits."""

    var_dir: Path = Path("var/stack")
    host: str = "127.0.0.1"  # the API's interface
    api_port: int = 8000
    milvus_port: int = 19530
    milvus_http_port: int = 0  # Milvus' /healthz and /metrics; 0 = any free port
    model: Path | None = None  # None: QKV_MODEL or models/encoder-default
    demo: Path | None = None  # JSONL(.gz) loaded into the `docs` collection on first start
    demo_tm: Path | None = None  # translation pairs loaded into `tm-en-fr` on first start
    decoders: tuple[str, ...] = ()  # COLLECTION=DIR, as `qkv serve --decoder`
    demo_token_memory: Path | None = None  # as `qkv serve --demo-token-memory`
    start_timeout_s: float = 600.0
    # Milvus 2.3 stops its coordinators first, then its nodes wait on them (over 2 minutes
    # here, without end); what it acknowledged is on disk (etcd, rocksmq's log), so after
    # this many seconds it is killed
    stop_timeout_s: float = 10.0

    @property
    def milvus_uri(self) -> str:
        return f"http://127.0.0.1:{self.milvus_port}"

    @property
    def api_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.api_port}"


# -- the API ------------------------------------------------------------------------------
def start_api(cfg: StackConfig) -> tuple[subprocess.Popen[bytes], Path]:
    """``qkv serve`` against the stack's Milvus, in its own session; QKV_* settings from
    this environment apply (options given here win)."""
    cmd = [sys.executable, "-m", "cli", "serve", "--host", cfg.host,
           "--port", str(cfg.api_port), "--store", cfg.milvus_uri]
    if cfg.model is not None:
        cmd += ["--model", str(cfg.model)]
    if cfg.demo is not None:
        cmd += ["--demo", str(cfg.demo)]
    if cfg.demo_tm is not None:
        cmd += ["--demo-tm", str(cfg.demo_tm)]
    for entry in cfg.decoders:
        cmd += ["--decoder", entry]
    if cfg.demo_token_memory is not None:
        cmd += ["--demo-token-memory", str(cfg.demo_token_memory)]
    log_path = cfg.var_dir / "api.log"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, log_path


# -- state: pid files and stack.json --------------------------------------------------------
def read_state(var_dir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((var_dir / "stack.json").read_text()))
    except (OSError, ValueError):
        return {}


def _write_state(var_dir: Path, state: dict[str, Any]) -> None:
    tmp = var_dir / "stack.json.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(var_dir / "stack.json")


def _record(var_dir: Path, state: dict[str, Any], role: str, pid: int) -> None:
    state["processes"][role] = {"pid": pid, "started": psutil.Process(pid).create_time()}
    (var_dir / f"{role}.pid").write_text(f"{pid}\n")
    _write_state(var_dir, state)


def _clear(var_dir: Path) -> None:
    for name in [*(f"{r}.pid" for r in ROLES), "stack.json"]:
        (var_dir / name).unlink(missing_ok=True)


def running(var_dir: Path) -> dict[str, psutil.Process]:
    """The stack's processes that still run: role -> psutil.Process."""
    procs = read_state(var_dir).get("processes", {})
    return {role: p for role in ROLES if (p := live_process(procs.get(role))) is not None}


# -- up and down ----------------------------------------------------------------------------
def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _stop_signals() -> list[signal.Signals]:
    """SIGINT (set explicitly: a shell starts background jobs with it ignored), SIGTERM, and
    SIGHUP unless ignored (``nohup qkv stack up &`` must outlive the terminal)."""
    sigs = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        sigs.append(signal.SIGHUP)
    return sigs


def _check_ports(cfg: StackConfig) -> None:
    for port, option in ((cfg.api_port, "--port"), (cfg.milvus_port, "--milvus-port"),
                         (cfg.milvus_http_port, "--milvus-http-port")):
        if port and port_in_use(port):
            raise StackError(f"port {port} is in use; choose another with {option}")


def up(cfg: StackConfig, on_ready: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Start Milvus, then the API; when both are ready call ``on_ready(state)`` and keep
    them until SIGINT (Ctrl-C), SIGTERM or SIGHUP, then stop the API, then Milvus.

    Raises StackError when the stack cannot start, or when a server exits on its own (the
    other is stopped first). Returns normally after a signal.
    """
    var_dir = mkdir(cfg.var_dir)
    if live := running(var_dir):
        pids = ", ".join(f"{role} {p.pid}" for role, p in live.items())
        raise StackError(f"a stack is already running from {var_dir} ({pids}); "
                         f"`qkv stack down --var-dir {var_dir}` stops it")
    _clear(var_dir)
    _check_ports(cfg)
    http_port = cfg.milvus_http_port or free_port()
    state: dict[str, Any] = {
        "status": "starting", "api_url": cfg.api_url, "milvus_uri": cfg.milvus_uri,
        "milvus_healthz": f"http://127.0.0.1:{http_port}/healthz",
        "milvus_version": MILVUS_VERSION, "config": json.loads(json.dumps(asdict(cfg),
                                                                          default=str)),
        "processes": {}}
    children: dict[str, subprocess.Popen[bytes]] = {}
    handlers = {sig: signal.signal(sig, _interrupt) for sig in _stop_signals()}
    try:
        _record(var_dir, state, "stack", os.getpid())
        deadline = time.monotonic() + cfg.start_timeout_s
        t0 = time.monotonic()
        children["milvus"], milvus_log = start_milvus(cfg.var_dir, cfg.milvus_port, http_port)
        _record(var_dir, state, "milvus", children["milvus"].pid)
        wait_until("Milvus", lambda: (http_ok(state["milvus_healthz"], b"OK")
                                      and port_in_use(cfg.milvus_port)),
                   children["milvus"], deadline, milvus_log)
        log.info("Milvus %s ready on %s in %.1f s (pid %d; data and logs under %s)",
                 MILVUS_VERSION, cfg.milvus_uri, time.monotonic() - t0, children["milvus"].pid,
                 cfg.var_dir / "milvus")
        t0 = time.monotonic()
        children["api"], api_log = start_api(cfg)
        _record(var_dir, state, "api", children["api"].pid)
        wait_until("the API", lambda: http_ok(f"{cfg.api_url}/ready"), children["api"],
                   deadline, api_log)
        log.info("API ready on %s in %.1f s (pid %d; log %s)", cfg.api_url,
                 time.monotonic() - t0, children["api"].pid, api_log)
        state["status"] = "ready"
        _write_state(var_dir, state)
        if on_ready is not None:
            on_ready(state)
        while True:
            for role, proc in children.items():
                if proc.poll() is not None:
                    raise StackError(f"{role} exited with status {proc.returncode}; "
                                     f"see {milvus_log if role == 'milvus' else api_log}")
            time.sleep(0.5)
    except KeyboardInterrupt:
        log.info("stopping the stack")
    finally:
        for sig in handlers:  # a second Ctrl-C must not cut the shutdown short
            signal.signal(sig, signal.SIG_IGN)
        _stop_children(children, cfg.stop_timeout_s)
        _clear(var_dir)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _stop_children(children: dict[str, subprocess.Popen[bytes]], milvus_grace: float) -> None:
    for role, grace in (("api", API_STOP_S), ("milvus", milvus_grace)):
        proc = children.get(role)
        if proc is None:
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            if not stop_process(psutil.Process(proc.pid), grace):
                log.warning("%s (pid %d) did not stop within %.0f s of SIGTERM; killed", role,
                            proc.pid, grace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)  # reap it


def down(var_dir: Path) -> list[str]:
    """Stop the stack started from ``var_dir``: SIGTERM to ``qkv stack up``, which stops its
    servers; then any server still running (e.g. after ``up`` was killed) by its own pid.
    Returns what was stopped, e.g. ``["stack 123", "milvus 456"]``."""
    state = read_state(var_dir)
    procs = state.get("processes", {})
    grace = float(state.get("config", {}).get("stop_timeout_s", StackConfig.stop_timeout_s))
    stopped = []
    supervisor = live_process(procs.get("stack"))
    if supervisor is not None and supervisor.pid != os.getpid():
        supervisor.terminate()
        deadline = time.monotonic() + API_STOP_S + grace + 20
        # exited = gone or a zombie (its parent, a shell or a test, reaps it later)
        while live_process(procs["stack"]) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        if live_process(procs["stack"]) is not None:
            log.warning("qkv stack up (pid %d) still runs; stopping its servers directly",
                        supervisor.pid)
        stopped.append(f"stack {supervisor.pid}")
    for role, role_grace in (("api", API_STOP_S), ("milvus", grace)):
        p = live_process(procs.get(role))
        if p is not None:
            stop_process(p, role_grace)
            stopped.append(f"{role} {p.pid}")
    _clear(var_dir)
    return stopped
