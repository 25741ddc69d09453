"""What this machine's CPU is, from ``/proc/cpuinfo`` (no torch needed): its model name
and its feature flags, which decide the kernels torch and ONNX Runtime take (bf16, VNNI,
AMX). Read once a process; elsewhere than Linux, empty flags and the platform's name."""

from __future__ import annotations

import functools
import platform
from pathlib import Path


@functools.cache
def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def cpu_flags() -> frozenset[str]:
    """The first processor's feature flags (``avx2``, ``avx512_vnni``, ``amx_int8`` ...)."""
    line = next((x for x in _cpuinfo() if x.startswith("flags")), "")
    return frozenset(line.split(":", 1)[-1].split())


def cpu_model() -> str:
    """The CPU's model name (``Intel(R) Xeon(R) Processor``)."""
    for line in _cpuinfo():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()
