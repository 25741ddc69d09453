"""A translation memory held in process: aligned (source, target) sentences whose sources
are keyed by the qkv encoder in an exact FAISS inner-product index, and whose targets are
the values the decoder reads. Used by ``qkv translate``, ``qkv eval-decoder`` and ``qkv
train-decoder`` (where the memory is the training pairs and each pair's own entry is left
out).

Weights are ``index.attend.softmax(score / T)`` over the k neighbours kept, as the
``generate`` route computes them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np

from encoder import TextEncoder
from index.attend import DEFAULT_TEMPERATURE, softmax

log = logging.getLogger(__name__)


class TranslationMemory:
    """``sources[i]`` ↦ ``targets[i]``; :meth:`search` finds the sources nearest a query.

    ``xb`` (n, d) are the encoder's unit vectors of the sources; an entry with an empty
    source or target is never returned.
    """

    def __init__(self, text_encoder: TextEncoder, sources: Sequence[str],
                 targets: Sequence[str], xb: np.ndarray) -> None:
        if len(sources) != len(targets) or len(sources) != xb.shape[0]:
            raise ValueError(f"memory files differ in length: {len(sources)} sources, "
                             f"{len(targets)} targets")
        self.encoder = text_encoder
        self.sources, self.targets = list(sources), list(targets)
        self.usable = np.array([bool(s.strip()) and bool(t.strip())
                                for s, t in zip(sources, targets, strict=True)])
        self.xb = np.ascontiguousarray(xb, dtype=np.float32)
        self.index = faiss.IndexFlatIP(self.xb.shape[1])
        self.index.add(self.xb)

    @classmethod
    def build(cls, text_encoder: TextEncoder, sources: Sequence[str], targets: Sequence[str],
              cache_dir: Path | None = None) -> TranslationMemory:
        """Encode the sources (or load their vectors from ``cache_dir``, keyed by the
        encoder's fingerprint and the sources' text) and index them."""
        h = hashlib.sha256(text_encoder.fingerprint.encode())
        for s in sources:
            h.update(s.encode() + b"\n")
        cache = cache_dir / f"{h.hexdigest()[:24]}.npy" if cache_dir is not None else None
        if cache is not None and cache.is_file():
            xb = np.load(cache, allow_pickle=False)
            log.info("memory vectors from %s", cache)
        else:
            log.info("encoding %d memory sentences", len(sources))
            xb = text_encoder.encode(list(sources)) if sources else np.zeros(
                (0, text_encoder.dim), np.float32)
            if cache is not None:
                try:
                    cache.parent.mkdir(parents=True, exist_ok=True)
                    np.save(cache, xb, allow_pickle=False)
                except OSError as e:  # a read-only place only costs the next run time
                    log.warning("could not cache memory vectors in %s: %s", cache, e)
        return cls(text_encoder, sources, targets, xb)

    def __len__(self) -> int:
        return len(self.sources)

    def search(
        self,
        queries: Sequence[str],
        k: int,
        exclude: Sequence[int | None] | None = None,
        temperature: float = DEFAULT_TEMPERATURE,
        xq: np.ndarray | None = None,
    ) -> list[list[tuple[int, float]]]:
        """Per query, up to ``k`` (memory index, weight), best first, weights
        ``softmax(score / T)``. ``exclude[i]`` is an entry to leave out for query i, with
        any entry that repeats its (source, target) pair. Empty queries get none.
        ``xq`` (len(queries), d): the queries' vectors when already known (the memory's
        own ``xb`` when the queries are its sources)."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        out: list[list[tuple[int, float]]] = [[] for _ in queries]
        live = [i for i, q in enumerate(queries) if q.strip()]
        if k == 0 or not live or len(self) == 0:
            return out
        xq = self.encoder.encode([queries[i] for i in live]) if xq is None else xq[live]
        D, I = self.index.search(np.ascontiguousarray(xq), min(len(self), k + 8))
        for row, i in enumerate(live):
            e = None if exclude is None else exclude[i]
            kept = [(int(j), float(d)) for j, d in zip(I[row], D[row], strict=True)
                    if j >= 0 and self.usable[j] and not self._same(j, e)][:k]
            if kept:
                w = softmax(np.array([d for _, d in kept], np.float32), temperature)
                out[i] = [(j, float(wi)) for (j, _), wi in zip(kept, w, strict=True)]
        return out

    def _same(self, j: int, e: int | None) -> bool:
        return e is not None and (j == e or (self.sources[j] == self.sources[e]
                                             and self.targets[j] == self.targets[e]))

    def neighbours(self, queries: Sequence[str], k: int,
                   temperature: float = DEFAULT_TEMPERATURE) -> list[list[tuple[str, float]]]:
        """Per query, up to ``k`` (target text, weight): what the decoder reads."""
        return [[(self.targets[j], w) for j, w in row]
                for row in self.search(queries, k, temperature=temperature)]
