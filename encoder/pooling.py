"""Attention pooling: a learned query attends over the token states (one vector a text)."""

from __future__ import annotations

import math

import torch
from torch import nn

SCORINGS = ("dot", "additive")


class AttentionPooling(nn.Module):
    """Pool token states into one vector with a learned query.

    Scores per token t:
    - ``dot``: s_t = (W_k h_t) · q / √d  (Luong / Vaswani style);
    - ``additive``: s_t = vᵀ tanh(W h_t + b)  (Bahdanau et al. 2015, an MLP score).
    α = softmax(s) over the tokens the mask allows; output = Σ_t α_t h_t.

    Input h: (B, T, d), mask (B, T) bool (True = real token). Returns (pooled (B, d),
    weights (B, T)); weights are 0 on padding and sum to 1 over each row's tokens.
    """

    def __init__(self, d_model: int, scoring: str = "dot", d_hidden: int | None = None) -> None:
        super().__init__()
        if scoring not in SCORINGS:
            raise ValueError(f"unknown pooling scoring {scoring!r}; valid: {', '.join(SCORINGS)}")
        self.scoring = scoring
        self.d_model = d_model
        if scoring == "dot":
            self.query = nn.Parameter(torch.randn(d_model) / math.sqrt(d_model))
            self.key = nn.Linear(d_model, d_model)
        else:
            hidden = d_hidden or d_model
            self.proj = nn.Linear(d_model, hidden)
            self.v = nn.Linear(hidden, 1, bias=False)

    def scores(self, h: torch.Tensor) -> torch.Tensor:
        """Unnormalised score per token, (B, T, d) → (B, T)."""
        if self.scoring == "dot":
            return self.key(h) @ self.query.to(h.dtype) / math.sqrt(self.d_model)
        return self.v(torch.tanh(self.proj(h))).squeeze(-1)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.scores(h).float().masked_fill(~mask, float("-inf"))  # (B, T)
        weights = torch.softmax(s, dim=-1).nan_to_num(0.0)  # (B, T)
        pooled = (weights.unsqueeze(-1) * h.float()).sum(dim=1)  # (B, d)
        return pooled, weights
