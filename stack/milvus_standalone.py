"""A real Milvus standalone server (PyPI ``milvus==2.3.5``) as a child process, without
Docker: what ``qkv stack up``, the benchmarks and the tests run.

Its files live under ``var_dir/milvus``: bin/ (the server, unpacked from the wheel once,
250 MB), configs/, data/ (etcd, rocksmq, segments), logs/.

The ``milvus`` wheel's own launcher (``milvus.MilvusServer``) is not used to start the
server: it leaves the embedded etcd on its fixed ports 2379/2380 (a second Milvus on the
machine then dies at start), tests ports without SO_REUSEADDR (so the port a stopped stack
left in TIME_WAIT counts as taken), and waits on a fixed timeout. Its config writer is used;
ports, etcd and the waiting are ours.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

import psutil

from stack.processes import (
    StackError,
    free_port,
    http_ok,
    mkdir,
    port_in_use,
    stop_process,
    tail,
    wait_until,
)

MILVUS_VERSION = "2.3.5"
# Milvus' components register in etcd with a lease of this many seconds (30 by default). A
# Milvus that was killed leaves its sessions behind, and the next start waits for them to
# expire: 55 s here with 30, hence less.
SESSION_TTL_S = 10


def _embed_etcd_config(path: Path) -> tuple[Path, int]:
    """Milvus' embedded etcd on free ports (its defaults, 2379/2380, clash with any other
    etcd or Milvus on the machine). Returns the config file and the client port."""
    client, peer = free_port(), free_port()
    path.write_text(f"name: default\n"
                    f"listen-client-urls: http://127.0.0.1:{client}\n"
                    f"advertise-client-urls: http://127.0.0.1:{client}\n"
                    f"listen-peer-urls: http://127.0.0.1:{peer}\n"
                    f"initial-advertise-peer-urls: http://127.0.0.1:{peer}\n"
                    f"initial-cluster: default=http://127.0.0.1:{peer}\n")
    return path, client


def start_milvus(var_dir: Path, port: int, http_port: int, env: dict[str, str] | None = None
                 ) -> tuple[subprocess.Popen[bytes], Path]:
    """``milvus run standalone`` over ``var_dir/milvus`` on ``port`` (gRPC) and ``http_port``
    (``/healthz``, ``/metrics``), in its own session (Ctrl-C reaches ``qkv stack up`` only,
    which stops the servers in order). ``env``: Milvus settings as its environment
    overrides them (e.g. ``COMMON_STORAGETYPE=minio``, ``MINIO_ADDRESS``, ``MINIO_PORT``:
    its data in an S3 bucket instead of local storage). Returns it and its log."""
    try:
        import milvus
    except ImportError as e:
        raise StackError(f"the Milvus server package is missing: pip install "
                         f"milvus=={MILVUS_VERSION} (`make stack` does)") from e
    base = (var_dir / "milvus").resolve()
    mcfg = milvus.MilvusServerConfig(data_dir=str(base))
    for key in list(mcfg.configurable_items):
        if key.endswith("_port"):  # the coordinators' and nodes' internal gRPC ports
            mcfg.set(key, free_port())
    etcd_config, etcd_port = _embed_etcd_config(mkdir(base / "configs") / "embedEtcd.yaml")
    mcfg.set("etcd_port", etcd_port)
    mcfg.set("proxy_port", port)
    mcfg.set("common.session.ttl", SESSION_TTL_S)
    mcfg.resolve_storage()  # configs/, logs/, data/ under base
    mcfg.write_config()  # configs/milvus.yaml
    milvus._initialize_data_files(str(base))  # unpacks bin/ once (md5-stamped)
    bin_dir = base / "bin"
    env = {**os.environ, **(env or {}), "DEPLOY_MODE": "STANDALONE",
           "METRICS_PORT": str(http_port),
           "MILVUS_RUN_DIR": str(base / "run"), "ETCD_CONFIG_PATH": str(etcd_config),
           "LD_LIBRARY_PATH": os.pathsep.join(
               p for p in (str(bin_dir), os.environ.get("LD_LIBRARY_PATH", "")) if p)}
    log_path = base / "logs" / "milvus-stdout.log"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([str(bin_dir / "milvus"), "run", "standalone"], cwd=base,
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, log_path


class MilvusStandalone:
    """One Milvus 2.3.5 standalone over ``var_dir/milvus`` on ``port`` (free by default),
    started (:func:`start_milvus`, ready when its ``/healthz`` says OK and its port
    listens) and stopped by pid as often as wanted, on the same port and data: what the
    benchmarks and tests run, and what ``stack.local.up`` runs with the API beside it."""

    def __init__(self, var_dir: Path, port: int = 0, start_timeout_s: float = 300.0,
                 stop_timeout_s: float = 10.0, env: dict[str, str] | None = None) -> None:
        self.var_dir, self.port, self.env = var_dir, port or free_port(), env
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        """Start and wait until ready; returns the ``http://`` URI."""
        http_port = free_port()
        self.proc, self.log_path = start_milvus(self.var_dir, self.port, http_port, self.env)
        try:
            wait_until("Milvus", lambda: (http_ok(f"http://127.0.0.1:{http_port}/healthz", b"OK")
                                          and port_in_use(self.port)),
                       self.proc, time.monotonic() + self.start_timeout_s, self.log_path)
        except BaseException:
            self.stop()
            raise
        return self.uri

    def stop(self) -> None:
        """TERM, then KILL after ``stop_timeout_s`` (Milvus 2.3 never finishes a graceful
        stop here), its descendants too; idempotent."""
        if self.proc is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                stop_process(psutil.Process(self.proc.pid), self.stop_timeout_s)
            self.proc.wait(10)
            self.proc = None

    def log(self, n: int = 3000) -> str:
        return tail(self.log_path, n) if self.log_path else "(not started)"
