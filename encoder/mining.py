"""Hard negatives mined from the current model (ANCE-style): once over text pairs
(:func:`mine_hard_negatives`), or repeatedly during training on the device
(:func:`mine_rows`)."""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np
import torch

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


def mine_rows(
    q: torch.Tensor, d: torch.Tensor, d_rows: np.ndarray, pos: np.ndarray, rng: np.random.Generator,
    k: int = 20, margin: float = 0.95, chunk: int = 4096,
) -> np.ndarray:
    """In-training mining on the device (repeated through the run, not once): for each
    query ``q[i]`` (unit rows, (n, dim)), one of its ``k`` nearest documents of ``d``
    ((m, dim), whose text rows are ``d_rows``) that is neither its positive (text row
    ``pos[i]``) nor scores ≥ ``margin`` × the positive's score: the positive-aware
    false-negative filter of NV-Retriever (Moreira et al. 2024). Returns (n,) text rows,
    -1 where no candidate passed."""
    out = np.full(len(q), -1, dtype=np.int32)
    where = {int(r): j for j, r in enumerate(d_rows)}
    pos_j = torch.tensor([where.get(int(p), -1) for p in pos], device=q.device)
    k = min(k, len(d_rows))
    for start in range(0, len(q), chunk):
        qc = q[start:start + chunk]
        scores = (qc @ d.T).float()  # (c, m)
        pj = pos_j[start:start + chunk]
        pos_score = scores.gather(1, pj.clamp(min=0).unsqueeze(1)).squeeze(1)  # (c,)
        top_s, top_j = scores.topk(k, dim=1)  # (c, k)
        ok = (top_j != pj.unsqueeze(1)) & (top_s < margin * pos_score.unsqueeze(1))
        ok &= (pj >= 0).unsqueeze(1)
        ok_np, top_np = ok.cpu().numpy(), top_j.cpu().numpy()
        for i in range(len(qc)):
            cands = top_np[i][ok_np[i]]
            if len(cands):
                out[start + i] = d_rows[int(rng.choice(cands))]
    return out
