"""What a benchmark ran on, for the line it records: CPU model, cores, commit."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

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


def cpu_flags() -> list[str]:
    """The vector-instruction flags that decide kernel choice (AVX2, AVX-512 parts, AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return []
    keep = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_int8", "fma")
    return sorted({f for f in flags if f in keep})


def record(name: str, command: str, figures: dict[str, Any], machine: str | None = None,
           when: str | None = None, at: str | None = None) -> Path:
    """Append one JSON line to ``bench/results/NAME.jsonl`` (issue 42: results as data): the
    date, the machine (CPU model, cores and flags, or ``machine`` for another one, e.g. a
    lent GPU), the command, the commit (``at`` for a run made from an earlier one) and the
    figures."""
    path = ROOT / "bench/results" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {"date": when or time.strftime("%Y-%m-%d"),
           "machine": machine or {"cpu": cpu_model(), "cores": os.cpu_count(),
                                  "flags": cpu_flags()},
           "command": command, "commit": at or commit(), "figures": figures}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
