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
        self, q: torch.Tensor, d: torch.Tensor, hard: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        docs = d if hard is None else torch.cat([d, hard], dim=0)  # (B + H, d)
        logits = q.float() @ docs.float().T / self.temperature  # (B, B + H)
        target = torch.arange(q.size(0), device=q.device)
        loss = F.cross_entropy(logits, target)
        if self.symmetric:
            loss = (loss + F.cross_entropy(logits[:, : q.size(0)].T, target)) / 2
        acc = (logits.argmax(dim=1) == target).float().mean()
        return loss, acc
