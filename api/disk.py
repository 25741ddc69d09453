"""The disk watermark: writes are refused (507) before the store's file system fills.

Milvus Lite on a full disk failed its writes with raw exceptions and then hid 1,000 of
1,300 acknowledged documents until a restart (issue 44). Like Elasticsearch's flood-stage
watermark, :class:`DiskGuard` checks the free space of the store's own data directory
(Milvus Lite's file, a FAISS directory; a Milvus server guards its own disk) before each
write, and below ``QKV_DISK_FLOOD_MB`` refuses it with 507 and a ``Retry-After``, naming no
path. Reads and deletes go on (a delete frees space once sealed); writes resume by
themselves when space returns. The free bytes are exported at ``/metrics``.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from api.errors import DISK_RETRY_S, ApiError
from api.metrics import Metrics

CHECK_EVERY_S = 1.0  # /metrics and /ready; a write checks afresh (statvfs: microseconds)


def data_dir(store: str) -> Path | None:
    """The directory whose file system holds ``store``'s data, when it is on this machine."""
    if store.startswith(("faiss://", "faiss+hnsw://")):
        path = Path(store.split("://", 1)[1])
    elif "://" in store:
        return None  # a Milvus server: its disk, its quota
    else:
        path = Path(store)
    path = path.expanduser().resolve()
    while not path.exists() and path != path.parent:  # not made yet: where it will be
        path = path.parent
    return path


class DiskGuard:
    def __init__(self, path: Path | None, flood_mb: float, metrics: Metrics) -> None:
        self.path, self.flood = path, int(flood_mb * 2**20)
        self.metrics = metrics
        self._free: int | None = None
        self._at = 0.0
        self._lock = threading.Lock()

    def free(self, fresh: bool = False) -> int | None:
        """Free bytes where the store writes (checked at most every second, or now when
        ``fresh``); None when the store is not on this machine."""
        if self.path is None:
            return None
        with self._lock:
            now = time.monotonic()
            if self._free is None or fresh or now - self._at >= CHECK_EVERY_S:
                try:
                    self._free = shutil.disk_usage(self.path).free
                except OSError:  # gone (dropped store): nothing to guard until it returns
                    self._free = None
                self._at = now
                if self._free is not None:
                    self.metrics.store_free_bytes.set(self._free)
            return self._free

    def blocked(self) -> bool:
        free = self.free()
        return free is not None and free < self.flood

    def check(self) -> None:
        """Raise 507 when a write now could fill the store's disk (a fresh statvfs, a few
        microseconds: a second-old figure let a fast writer fill a small disk before it)."""
        free = self.free(fresh=True)
        if free is not None and free < self.flood:
            self.metrics.writes_refused.inc()
            raise ApiError(
                507, "insufficient_storage",
                f"the store's disk has {free / 2**20:.1f} MB free, under the flood mark of "
                f"{self.flood / 2**20:.0f} MB (QKV_DISK_FLOOD_MB): writes are refused until "
                "space is freed; searches and reads go on",
                {"Retry-After": str(DISK_RETRY_S)})
