"""Where the encoder runs: CUDA with bf16 autocast when present, else the CPU (bf16 where
the CPU has native bf16 instructions)."""

from __future__ import annotations

import contextlib
import os

import torch

from encoder.cpu import cpu_flags


def pick_device(name: str | None = None) -> torch.device:
    """``name`` if given, else ``$QKV_DEVICE``, else CUDA when available, else CPU."""
    name = name or os.environ.get("QKV_DEVICE")
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cpu_has_bf16() -> bool:
    """True when the CPU runs bf16 matmuls natively (AVX-512 BF16 or AMX)."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def autocast(device: torch.device, enabled: bool = True) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA, and on CPUs with native bf16; a no-op otherwise."""
    if not enabled or os.environ.get("QKV_NO_BF16"):
        return contextlib.nullcontext()
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if device.type == "cpu" and cpu_has_bf16():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()
