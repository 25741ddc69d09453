"""The int8 ONNX Runtime graph (:mod:`encoder.onnx_graph`) as the encoder runs it: one
session per thread count, made on first use."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from encoder import graph_cache
from encoder.onnx_graph import build_graph, calibrate, pack

if TYPE_CHECKING:
    from encoder.model import TransformerEncoder


class OnnxForward:
    """The network's inference forward on ONNX Runtime: (B, T) padded ids → (unnormalised
    vectors (B, d), pooling weights (B, T)). One session per intra-op thread count (read
    from torch's setting at each call, as the torch path follows it); ``run`` may be
    called from several threads at once.

    ``spin``: whether ONNX Runtime's intra-op threads spin-wait for the next operator
    (its default) or sleep. Spinning is faster when the encoder has the cores to itself
    and slower when other threads need them: on 2 cores, offline batches ran 1.2 x faster
    spinning, and the HTTP service (its event loop beside the encoder) served 1.2-1.4 x
    more /v1/embeddings requests with it off (bench/history/, API load). Set it before
    the first call (the sessions are made then).

    The serialised graph (``model_bytes``, ~19 MB) is dropped once a session is made from
    it (by this object and by the session's Python side), and built again from ``model``
    only if another thread count asks for a second session: a service keeping several
    encoders (issue 38) keeps no encoder's graph twice.

    ``calibration``: token id lists to calibrate the int8 graph's activation ranges on
    (:func:`calibrate`; ``TextEncoder`` gives :func:`calibration_texts` unless
    ``QKV_ONNX_ACTIVATIONS`` is ``token``); without them the ranges are per token.
    ``activations`` says which the graph has.

    ``cache``: a directory of built graphs (:mod:`encoder.graph_cache`), where the graph and
    its ranges are read from when this model's were built before, and written to when not
    (``cached`` says which)."""

    def __init__(self, model: TransformerEncoder, int8: bool = True, spin: bool = True,
                 calibration: Sequence[Sequence[int]] | None = None,
                 cache: Path | None = None) -> None:
        self._model, self._int8 = model, int8
        static = int8 and bool(calibration)
        self.activations = "static" if static else "token" if int8 else "fp32"
        self._cache = cache
        self._key = graph_cache.key(model, int8, calibration if static else None) \
            if cache is not None else None
        hit = graph_cache.load(cache, self._key) if cache is not None and self._key else None
        self.cached = hit is not None
        if hit is not None:
            self.model_bytes: bytes | None = hit[0]
            self._ranges = hit[1]
        else:
            self._ranges = calibrate(model, calibration or []) if static else None
            self.model_bytes = self._build()  # not graph_bytes(): the cache just missed
            if cache is not None and self._key:
                graph_cache.save(cache, self._key, self.model_bytes, self._ranges)
        self.spin = spin
        self.arena = True  # ONNX Runtime's memory arena (off: less memory, see set_arena)
        self.threads: int | None = None  # threads a call runs on; None: torch's setting
        self._sessions: dict[tuple[int, bool], Any] = {}
        self._lock = threading.Lock()

    def session(self, threads: int) -> Any:
        key = (threads, self.spin)
        with self._lock:
            if key not in self._sessions:
                import onnxruntime as ort

                opts = ort.SessionOptions()
                opts.intra_op_num_threads = threads
                opts.inter_op_num_threads = 1
                opts.log_severity_level = 3
                opts.enable_cpu_mem_arena = self.arena
                opts.add_session_config_entry("session.intra_op.allow_spinning",
                                              "1" if self.spin else "0")
                session = ort.InferenceSession(self.model_bytes or self.graph_bytes(), opts,
                                               providers=["CPUExecutionProvider"])
                # its Python side keeps the bytes it was made from, to remake itself on a
                # fallback provider, which the CPU provider has none of: ~19 MB an encoder
                session.disable_fallback()
                session._model_bytes = None
                self._sessions[key], self.model_bytes = session, None
            return self._sessions[key]

    def graph_bytes(self) -> bytes:
        """The serialised graph this forward runs (from the cache where it is there, else
        built anew from the weights)."""
        if self._cache is not None and self._key:
            hit = graph_cache.load(self._cache, self._key)
            if hit is not None:
                return hit[0]
        return self._build()

    def _build(self) -> bytes:
        """The serialised graph, built from the weights and the ranges."""
        serialised: bytes = build_graph(self._model, self._int8, self._ranges).SerializeToString()
        return serialised

    def keep_only(self, threads: int) -> None:
        """Drop the sessions made for other thread counts (each holds the whole network):
        a service that settled on one count after timing another keeps one session."""
        with self._lock:
            for key in [k for k in self._sessions if k[0] != threads]:
                del self._sessions[key]

    def __call__(self, seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Token id lists (each at least one) → (B, d) vectors, (B, T) pooling weights."""
        import torch

        threads = self.threads or torch.get_num_threads()
        vec, alpha = self.session(threads).run(["vec", "alpha"], pack(seqs))
        return vec, alpha
