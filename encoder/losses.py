"""Contrastive losses."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class InfoNCE(nn.Module):
    """Symmetric InfoNCE with in-batch negatives (and optional hard negatives).

    For unit query vectors qᵢ and positive documents dᵢ, i = 1..B, and optional hard
    negative documents hⱼ, j = 1..H, with logits sᵢⱼ = qᵢ·dⱼ / τ:

        L_q→d = −1/B Σᵢ log( exp(sᵢᵢ) / Σ_{j ∈ docs ∪ hard} exp(sᵢⱼ) )
        L_d→q = −1/B Σᵢ log( exp(sᵢᵢ) / Σ_{j ∈ queries} exp(sⱼᵢ) )
        L     = (L_q→d + L_d→q) / 2

    The temperature τ is fixed (default 0.05, i.e. a logit scale of 20 as in
    sentence-transformers' MultipleNegativesRankingLoss): a learned τ on a small batch
    drifts low and over-sharpens; 0.05 is the common choice for unit vectors.
    Inputs are (B, d) unit vectors, hard negatives (H, d). Returns (loss, in-batch
    top-1 accuracy of the query → document direction).
    """

    def __init__(self, temperature: float = 0.05, symmetric: bool = True) -> None:
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.symmetric = symmetric

    def forward(
        self, q: torch.Tensor, d: torch.Tensor, hard: torch.Tensor | None = None,
        same: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``same`` (B, B + H) bool, optional: True where column j is the same text as row
        i's positive (a duplicate in the batch, not a negative) but j ≠ i; those logits are
        left out of both directions."""
        docs = d if hard is None else torch.cat([d, hard], dim=0)  # (B + H, d)
        logits = q.float() @ docs.float().T / self.temperature  # (B, B + H)
        if same is not None:
            logits = logits.masked_fill(same, float("-inf"))
        target = torch.arange(q.size(0), device=q.device)
        loss = F.cross_entropy(logits, target)
        if self.symmetric:
            loss = (loss + F.cross_entropy(logits[:, : q.size(0)].T, target)) / 2
        acc = (logits.argmax(dim=1) == target).float().mean()
        return loss, acc


def duplicates(pos_rows: torch.Tensor, doc_rows: torch.Tensor, query_rows: torch.Tensor
               ) -> torch.Tensor:
    """(B, B + H) bool: column j shows row i's positive text again, or row i's own query
    text (symmetric pairs), without being i's positive (the diagonal). The text rows of the
    positives (B,), of all columns (B + H,) and of the queries (B,)."""
    same = (doc_rows.unsqueeze(0) == pos_rows.unsqueeze(1))  # (B, B + H)
    same |= doc_rows.unsqueeze(0) == query_rows.unsqueeze(1)
    b = pos_rows.size(0)
    same[:, :b].fill_diagonal_(False)
    return same


class Matryoshka(nn.Module):
    """A loss over nested prefixes of the vectors (Kusupati et al. 2022, "Matryoshka
    Representation Learning"): the mean of ``loss`` on the full unit vectors and on each
    prefix of ``dims`` coordinates, renormalised, so that a vector cut to any of those
    sizes still ranks well. Returns (loss, the full size's accuracy)."""

    def __init__(self, loss: InfoNCE, dims: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.loss = loss
        self.dims = dims

    def forward(
        self, q: torch.Tensor, d: torch.Tensor, hard: torch.Tensor | None = None,
        same: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        total, acc = self.loss(q, d, hard, same)
        for m in self.dims:
            cut = [None if x is None else F.normalize(x[:, :m].float(), dim=-1)
                   for x in (q, d, hard)]
            total = total + self.loss(cut[0], cut[1], cut[2], same)[0]
        return total / (1 + len(self.dims)), acc
