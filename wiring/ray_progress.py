"""A Ray bulk job's progress, as its range markers tell it (``wiring.ray_indexing``): the
terminal's bar and the job's state file (``NAME.ray.json``), for a dashboard."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from index.bulk.ranges import done_reports, write_json


@dataclass
class Progress:
    """The job as the markers tell it: for the terminal and the job's state file."""

    total_records: int
    started: float = field(default_factory=time.monotonic)
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    base: tuple[int, int] = (0, 0)  # records and written by earlier runs: not this run's rate

    def start(self, done_dir: Path) -> None:
        self.seen = done_reports(done_dir)
        self.base = (sum(d["records"] for d in self.seen.values()),
                     sum(d["written"] for d in self.seen.values()))
        self.started = time.monotonic()

    def update(self, done_dir: Path) -> dict[str, Any]:
        self.seen = done_reports(done_dir, self.seen)
        records = sum(d["records"] for d in self.seen.values())
        written = sum(d["written"] for d in self.seen.values())
        elapsed = max(time.monotonic() - self.started, 1e-9)
        workers: dict[str, int] = {}
        for d in self.seen.values():
            workers[d["worker"]] = workers.get(d["worker"], 0) + d["records"]
        rate = (records - self.base[0]) / elapsed
        left = self.total_records - records
        return {"records_done": records, "records_total": self.total_records,
                "written": written, "rejected": sum(len(d["rejects"]) for d in self.seen.values()),
                "retries": sum(d["retries"] for d in self.seen.values()),
                "docs_per_s": round((written - self.base[1]) / elapsed, 1),
                "eta_s": round(left / rate, 1) if rate > 0 and left > 0 else 0.0,
                "workers": {w: round(n / max(records, 1), 3) for w, n in sorted(workers.items())},
                "ranges_done": len(self.seen), "updated": time.time()}


def tick(tracker: Progress, done_dir: Path, state_path: Path,
          progress: Callable[[dict[str, Any]], None], stop: threading.Event) -> None:
    """Every second until ``stop``: the figures to the state file and to ``progress``."""
    while not stop.wait(1.0):
        figures = tracker.update(done_dir)
        write_json(state_path, {**figures, "complete": False})
        progress(figures)
