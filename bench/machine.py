"""What a benchmark ran on, for the line it records: CPU model, cores, commit."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" + uncommitted changes" if git("status", "--porcelain", "-uno") else "")


def stamp() -> str:
    """``CPU model, N cores, commit abc1234``."""
    return f"{cpu_model()}, {os.cpu_count()} cores, commit {commit()}"
