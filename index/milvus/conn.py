"""The connection to Milvus: a dedicated ``MilvusClient``, Milvus Lite's log noise, and
which failures mean "unreachable" (retry later) rather than "refused"."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from index.store import (
    CollectionNotFoundError,
    StoreDamagedError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreUnavailableError,
)

log = logging.getLogger(__name__)

# Milvus/grpc wording for a server that is down or did not answer in time.
_UNAVAILABLE_MARKERS = ("unavailable", "deadline", "fail connecting", "timeout", "timed out",
                        "connection refused", "connect failed", "server is not ready")


class LiteNoise(logging.Filter):
    """Milvus Lite's in-process gRPC server logs a traceback each time pymilvus asks it for a
    timestamp (``AllocTimestamp``, unimplemented there, harmless), and its server manager
    one when another process holds the file (which the store reports in one line:
    :func:`failure`); drop just those."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if type(exc).__name__ == "DataDirLockedError":
            return False
        return not isinstance(exc, NotImplementedError)


# OS wording for a write that failed on the disk (Milvus Lite runs in this process, so its
# OSErrors come through as they are)
_IO_MARKERS = ("no space left", "input/output error", "read-only file system", "disk quota",
               "wal already closed", "errno 28", "errno 5", "errno 30")


def is_io_failure(e: Exception) -> bool:
    text = f"{type(e).__name__} {e}".lower()
    return any(m in text for m in _IO_MARKERS)


def restart_lite(uri: str) -> None:
    """Stop this process's Milvus Lite server for ``uri``: after a failed write its memory
    may no longer match its files (a full disk hid 1,000 of 1,300 acknowledged documents
    until a restart, issue 44). The next connection starts it again, and Lite's recovery
    replays its write-ahead log."""
    from milvus_lite.server_manager import server_manager_instance

    log.warning("Milvus Lite failed a write: restarting it from its write-ahead log")
    server_manager_instance.release_server(str(Path(uri).expanduser()))


def failure(what: str, e: Exception, uri: str) -> StoreError:
    """The store's error for a failed Milvus call (the store's own text in ``detail``)."""
    if is_missing(e):
        return CollectionNotFoundError(f"no such collection (Milvus {what})", str(e))
    if "://" not in uri and "open local milvus failed" in str(e).lower():
        # milvus_lite's DataDirLockedError, which it logs and pymilvus hides behind this
        return StoreLockedError(
            f"the Milvus Lite file {uri} is held by another process (a running qkv serve?): "
            "stop that process first, or send the documents to the running service through "
            "its API, or use a Milvus server that many processes share (--store "
            "http://HOST:19530)", str(e))
    if is_unavailable(e):
        return StoreUnavailableError(f"Milvus unreachable ({what})", f"{uri}: {e}")
    if "://" not in uri and is_io_failure(e):
        return StoreDamagedError(f"Milvus Lite could not write ({what}); it is re-opened "
                                 "from its write-ahead log, try again", f"{uri}: {e}")
    if "://" in uri and "disk quota" in str(e).lower():  # the server's quotaAndLimits
        return StoreFullError(f"the Milvus server refuses writes: its disk quota is used up "
                              f"({what})", str(e))
    return StoreError(f"Milvus {what} failed", str(e))


def is_unavailable(e: Exception) -> bool:
    text = f"{type(e).__name__} {e}".lower()
    return any(m in text for m in _UNAVAILABLE_MARKERS)


_MISSING = re.compile(r"collection\b.{0,80}?\b(does not exist|not found)|can't find collection",
                      re.IGNORECASE)


def is_missing(e: Exception) -> bool:
    """Milvus' wording for a collection that is not there (another client dropped it)."""
    return _MISSING.search(str(e)) is not None


def version_at_least(version: str, least: tuple[int, int]) -> bool:
    """Whether a Milvus version string (``v2.3.5-lite``, ``v2.5.16``) is ``least`` or later;
    Milvus Lite 3.x (``milvus_lite-3.2.2``) counts as new."""
    m = re.search(r"(\d+)\.(\d+)", version)
    return not m or (int(m[1]), int(m[2])) >= least


def connect(uri: str, token: str, timeout: float) -> Any:
    """A ``MilvusClient`` of its own for ``uri`` (a path is a Milvus Lite file: its
    directory is made, its noise filtered, and its port serves this process only:
    :mod:`index.milvus.lite.private`)."""
    from pymilvus import MilvusClient  # heavy import, paid on first use only

    if "://" not in uri:
        from index.milvus.lite import fixes as lite_fixes
        from index.milvus.lite import memory as lite_memory
        from index.milvus.lite import private as lite_private
        from index.milvus.lite import speed as lite_speed

        lite_fixes.install()  # Lite runs in this process: its races mended,
        lite_speed.install()  # its search paths without the rescans,
        lite_private.install()  # and its port refusing callers without this process's token
        lite_memory.install()  # its Arrow tables allocated by malloc, not mimalloc
        token = lite_private.TOKEN
        for name in ("grpc._server", "milvus_lite.server_manager"):
            noisy = logging.getLogger(name)
            if not any(isinstance(f, LiteNoise) for f in noisy.filters):
                noisy.addFilter(LiteNoise())
        Path(uri).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    # A dedicated connection: pymilvus shares one per URI otherwise, and a shared one that
    # saw the server go away stays broken after close().
    return MilvusClient(uri=uri, token=token, timeout=timeout, dedicated=True)
