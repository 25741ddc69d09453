"""Hard negatives mined with FAISS from the current model (ANCE-style, one-shot)."""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)


class Embedder(Protocol):
    """Anything that turns texts into (n, d) unit rows: a TextEncoder, or a test double."""

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray: ...


def top_k(xq: np.ndarray, xb: np.ndarray, k: int, chunk: int = 2048) -> np.ndarray:
    """Indices (nq, k) of each query's ``k`` highest inner products over ``xb``, best first:
    exact search, what FAISS' ``IndexFlatIP`` returns up to the order of equal scores, in
    numpy (training needs no FAISS, which the lent GPU machines do not have), ``chunk``
    queries at a time to bound memory."""
    out = np.empty((len(xq), k), dtype=np.int64)
    for start in range(0, len(xq), chunk):
        scores = xq[start : start + chunk] @ xb.T  # (chunk, nb)
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]  # (chunk, k), unordered
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
        out[start : start + chunk] = np.take_along_axis(top, order, axis=1)
    return out


def mine_hard_negatives(
    enc: Embedder,
    pairs: list[tuple[str, str]],
    k: int = 30,
    skip_top: int = 2,
    seed: int = 0,
) -> dict[int, str]:
    """For each pair i, a document ranked in [skip_top, k) for its query that is not its
    positive. Skipping the very top lowers the chance of a false negative (an unlabelled
    true match). Returns {pair index: negative text}.
    """
    docs = sorted({d for _, d in pairs})
    pos = {d: j for j, d in enumerate(docs)}
    xb = enc.encode(docs, batch_size=128)  # (nb, d)
    xq = enc.encode([q for q, _ in pairs], batch_size=128)  # (nq, d)
    I = top_k(xq, xb, min(k, len(docs)))  # (nq, k)
    rng = np.random.default_rng(seed)
    out: dict[int, str] = {}
    for i, (_, d) in enumerate(pairs):
        cands = [j for j in I[i, skip_top:] if j >= 0 and j != pos[d]]
        if cands:
            out[i] = docs[int(rng.choice(cands))]
    log.info("mined %d hard negatives over %d documents", len(out), len(docs))
    return out
