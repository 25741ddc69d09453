"""Pick the fastest encoder backend for the CPU at hand by timing them (issue 43).

Which of the int8 ONNX Runtime graph (``onnx``) and torch (bf16 where the CPU has it, else
fp32) is faster depends on the CPU: int8 was 1.6 x torch's bf16 on an AMD AVX-512 machine,
1.1 x on an Intel one with AMX and 1.4 x torch's fp32 on an AVX2-only AMD EPYC (Zen 2)
(bench/encode_speed.py), and nobody should have to know. :func:`choose` times each backend
that keeps quality (every vector within cosine :data:`MIN_COSINE` of the fp32 network's) on the
same token lists, alternating rounds, and takes the fastest at the shapes it serves: the
bulk job's batches of 64 and the API's small ones (:data:`SHAPES`). Timing batches of 64
alone picked torch on an Intel AMX machine (1,079 against 1,024 sentences/s), where torch
then served /v1/embeddings at a third of onnx's rate: its batches there held about 16 texts,
at which it does 395-435 sentences/s and onnx 945-991. The answer is cached in a
JSON file keyed by the CPU (model and the flags that pick kernels), the thread count, the
encoder's fingerprint and the library versions, so a service pays the timing (about 2 s)
once per machine and encoder.

:func:`int8_kernels` says which family of int8 kernels ONNX Runtime's MLAS dispatches to
on a CPU with the given flags (it reads CPUID itself; we cannot choose for it): AVX-512
VNNI, AVX-VNNI, AVX-512 BW (uint8 × int8 pairs summed in int16: why the graph's weights
are 7-bit, ``encoder.onnx_graph``), AVX2 (the same pairing) or none (SSE: slow). It is
reported beside the choice. The AVX-512 VNNI family was timed on Intel and AMD machines and
the AVX2 family on an AVX2-only AMD EPYC (646 against torch's 451 sentences/s there,
cosine to torch's vectors at least 0.9997; :func:`choose` took onnx); the AVX-512 BW and
AVX-VNNI families were never on a machine here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from encoder.cpu import cpu_flags, cpu_model

log = logging.getLogger(__name__)
MIN_COSINE = 0.999  # the quality bound every backend must keep against fp32
ROUNDS = 3
N_TEXTS = 256
# (batch size, texts) timed per round: the bulk job's shape, and the API's (its dynamic
# batches hold a few to a few dozen texts); the score is all the texts over all the time
SHAPES = ((64, N_TEXTS), (8, 64))
TIMING_VERSION = 2  # in the cache key: choices timed another way are timed again
KERNEL_FLAGS = ("avx512_vnni", "avx_vnni", "avx512bw", "avx512f", "avx2", "amx_int8",
                "amx_bf16", "avx512_bf16", "fma")


@dataclass
class Choice:
    """The backend picked, why, and what was measured (sentences/s, lowest cosine)."""

    backend: str
    why: str
    per_s: dict[str, float] = field(default_factory=dict)
    cosine: dict[str, float] = field(default_factory=dict)
    kernels: str = ""
    cpu: str = ""
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def int8_kernels(flags: Iterable[str]) -> str:
    """The int8 kernel family MLAS takes on a CPU with these flags (see the module doc)."""
    f = set(flags)
    if "avx512_vnni" in f:
        return "AVX-512 VNNI"
    if "avx_vnni" in f:
        return "AVX-VNNI (256-bit)"
    if "avx512bw" in f:
        return "AVX-512 BW (int16 pair sums)"
    if "avx2" in f:
        return "AVX2 (int16 pair sums)"
    return "SSE (no AVX2: slow int8)"


def cache_key(fingerprint: str, threads: int, flags: Iterable[str] | None = None,
              model: str | None = None) -> str:
    import onnxruntime
    import torch

    from encoder.onnx_graph import GRAPH_VERSION

    f = sorted(set(flags if flags is not None else cpu_flags()) & set(KERNEL_FLAGS))
    parts = [model or cpu_model(), ",".join(f), str(threads), fingerprint,
             f"torch {torch.__version__}", f"ort {onnxruntime.__version__}",
             f"graph {GRAPH_VERSION}", f"timing {TIMING_VERSION}"]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def sample_ids(vocab: int, first_id: int, n: int = N_TEXTS, seed: int = 0,
               max_len: int = 64) -> list[list[int]]:
    """``n`` token id lists of sentence lengths (8-64 tokens, mean about 32, as the speed
    bench's sentences; at most ``max_len``), ``first_id`` (the ``<s>``) first; the same
    every call."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.gamma(4.0, 8.0, n).astype(int), min(8, max_len), min(64, max_len))
    return [[first_id, *rng.integers(8, vocab, k - 1).tolist()] for k in lengths]


def _cosines(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).min())


def measure(enc: Any, candidates: Iterable[str], rounds: int = ROUNDS) -> Choice:
    """Time each backend of ``candidates`` on ``enc`` (a CPU ``TextEncoder``) and check its
    vectors against the fp32 network's; the fastest that keeps quality wins (torch when
    none does). Leaves ``enc`` on the winner."""
    ids = sample_ids(enc.config.vocab_size, enc.tokenizer.token_to_id("<s>") or 0,
                     max_len=enc.max_tokens)
    reference = enc.encode_ids(ids, batch_size=64, fp32=True)
    names = list(candidates)
    graphs: dict[str, Any] = {}
    for name in sorted(names, key=lambda n: n != enc.backend):  # the loaded one first
        if name != enc.backend:  # each graph built once (use_backend builds it anew)
            enc.use_backend(name)
        graphs[name] = enc._onnx

    def run(name: str, batch: int = 64, n: int = len(ids)) -> np.ndarray:
        enc.backend, enc._onnx = name, graphs[name]
        return np.asarray(enc.encode_ids(ids[:n], batch_size=batch))

    per_s: dict[str, float] = {}
    cosine = {name: round(_cosines(run(name), reference), 6) for name in names}
    ok = [n for n in names if cosine[n] >= MIN_COSINE]
    texts = sum(min(n, len(ids)) for _, n in SHAPES)
    for r in range(rounds):  # alternate, rotating the order: the machine drifts
        for name in ok[r % len(ok):] + ok[:r % len(ok)] if ok else []:
            t = time.perf_counter()
            for batch, n in SHAPES:
                run(name, batch, n)
            per_s[name] = max(per_s.get(name, 0.0),
                              round(texts / (time.perf_counter() - t), 1))
    flags = cpu_flags()
    kernels = int8_kernels(flags)
    if not ok:
        best, why = "torch", (f"no backend kept cosine {MIN_COSINE} of fp32 ({cosine}); "
                              "torch, as it runs by default")
    else:
        best = max(ok, key=lambda n: per_s[n])
        others = ", ".join(f"{n} {per_s[n]:,.0f}" for n in ok if n != best)
        shapes = " and ".join(str(b) for b, _ in SHAPES)
        why = (f"fastest here at batches of {shapes}: {best} {per_s[best]:,.0f} sentences/s"
               + (f" against {others}" if others else "")
               + f"; every vector within cosine {MIN_COSINE} of fp32 (lowest "
               f"{cosine[best]:.5f}); int8 kernels: {kernels}")
        dropped = [n for n in names if n not in ok]
        if dropped:
            why += f"; {', '.join(dropped)} left out (cosine {[cosine[n] for n in dropped]})"
    enc.backend, enc._onnx = best, graphs.get(best)
    return Choice(best, why, per_s, cosine, kernels, cpu_model())


def choose(enc: Any, cache: Path | None, threads: int, candidates: Iterable[str] = ("onnx",
           "torch")) -> Choice:
    """The backend for ``enc`` on this CPU: from ``cache`` (a JSON file) when this CPU,
    thread count, encoder and library versions were timed before, else measured now
    (:func:`measure`) and written there. Leaves ``enc`` on it."""
    from encoder.onnx_graph import onnx_available, supports

    names = [n for n in candidates
             if n == "torch" or (onnx_available() and supports(enc.config))]
    key = cache_key(enc.fingerprint, threads)
    known: dict[str, Any] = {}
    if cache is not None and cache.is_file():
        try:
            known = json.loads(cache.read_text())
        except (OSError, ValueError):
            known = {}
    if key in known and known[key].get("backend") in names:
        choice = Choice(**{**known[key], "cached": True})
        if enc.backend != choice.backend:
            enc.use_backend(choice.backend)
        return choice
    if len(names) == 1:
        enc.use_backend(names[0])
        return Choice(names[0], f"the only backend for this encoder: {names[0]}",
                      kernels=int8_kernels(cpu_flags()), cpu=cpu_model())
    choice = measure(enc, names)
    log.info("encoder backend: %s", choice.why)
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({**known, key: choice.to_dict()}, indent=1))
            tmp.replace(cache)
        except OSError as e:  # a read-only state dir: time again next start
            log.warning("could not cache the encoder backend choice in %s: %s", cache, e)
    return choice
