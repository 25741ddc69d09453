"""Where the encoder runs: CUDA with bf16 autocast when present, else the CPU (bf16 where
the CPU has native bf16 instructions); and which attention kernels inference uses on CUDA."""

from __future__ import annotations

import contextlib
import threading

import torch

from encoder.cpu import cpu_flags


class Defaults:
    """The process's defaults, set once at its edge from the settings (``QKV_DEVICE``,
    ``QKV_NO_BF16``: :func:`wiring.runtime.use`); an argument given to a function here
    wins over them."""

    device: str | None = None  # None: CUDA when available, else the CPU
    bf16: bool = True  # False: fp32 everywhere (exact comparisons)


def pick_device(name: str | None = None) -> torch.device:
    """``name`` if given, else the process's default (``QKV_DEVICE``), else CUDA when
    available, else CPU."""
    name = name or Defaults.device
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cpu_has_bf16() -> bool:
    """True when the CPU runs bf16 matmuls natively (AVX-512 BF16 or AMX)."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def autocast(device: torch.device, enabled: bool = True) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA, and on CPUs with native bf16; a no-op otherwise, and where
    the process runs in fp32 (``Defaults.bf16`` false: ``QKV_NO_BF16``)."""
    if not enabled or not Defaults.bf16:
        return contextlib.nullcontext()
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if device.type == "cpu" and cpu_has_bf16():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


# Whether inference on CUDA may use cuDNN's attention, torch's first pick on Hopper for a
# masked batch. It may not: cuDNN builds an execution plan for each new (batch, length)
# shape, and inference sees a new shape in nearly every batch (texts sorted by length, one
# text per API call); FlashAttention, the memory-efficient kernel and math stay on. On one
# H200 (torch 2.11, bench/encode_gpu.py, four alternating processes), without cuDNN's
# against with it: 5,707-5,892 against 1,238-1,344 sentences/s at batch 32, 13,691-14,293
# against 4,443-4,579 at batch 256, one sentence's p95 3.6-5.3 against 45-48 ms; the vectors
# within cosine 0.99999 of fp32 on the CPU either way. True: torch's own pick (the bench's
# "before" arm, --sdpa torch).
CUDA_INFERENCE_CUDNN_SDPA = False


class _CudnnSdpaOff:
    """cuDNN's attention switched off while any inference on CUDA runs. torch's flag is
    process-wide, so entries are counted under a lock: batches on several threads overlap,
    and the flag comes back as it was when the last one leaves (a save and restore per
    entry, as torch's sdpa_kernel does, could restore another thread's state)."""

    _lock = threading.Lock()
    _active = 0
    _before = True

    def __enter__(self) -> None:
        cls = type(self)
        with cls._lock:
            if cls._active == 0:
                cls._before = torch.backends.cuda.cudnn_sdp_enabled()
                torch.backends.cuda.enable_cudnn_sdp(False)
            cls._active += 1

    def __exit__(self, *exc: object) -> None:
        cls = type(self)
        with cls._lock:
            cls._active -= 1
            if cls._active == 0:
                torch.backends.cuda.enable_cudnn_sdp(cls._before)


def inference_attention(device: torch.device) -> contextlib.AbstractContextManager:
    """On CUDA, scaled dot-product attention without cuDNN's kernel
    (:data:`CUDA_INFERENCE_CUDNN_SDPA`); a no-op elsewhere (the CPU's kernel needs no
    per-shape plan)."""
    if device.type != "cuda" or CUDA_INFERENCE_CUDNN_SDPA:
        return contextlib.nullcontext()
    return _CudnnSdpaOff()
