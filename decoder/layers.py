"""The decoder's own layers: the pre-norm decoder block with retrieval-biased
cross-attention. Attention itself is :class:`encoder.layers.MultiHeadAttention`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from encoder.layers import FeedForward, MultiHeadAttention

KV = tuple[torch.Tensor, torch.Tensor]


class RetrievalBias(nn.Module):
    """Cross-attention logit bias ``scale_h · log w`` per head h, from a memory's log-weights.

    ``log w`` is 0 on the source's tokens and log wᵢ on neighbour i's tokens, so the
    softmax over the memory reads neighbour i's tokens with an extra factor wᵢ^scale. The
    scale is learned per head, kept positive (softplus) and starts at 1: a neighbour of
    weight → 0 is never read, whatever was learned.

    Input log-weights (B, S); output bias (B, n_heads, 1, S).
    """

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.raw_scale = nn.Parameter(torch.full((n_heads,), math.log(math.e - 1.0)))

    @property
    def scale(self) -> torch.Tensor:
        return F.softplus(self.raw_scale)  # (nh,), softplus(log(e - 1)) = 1

    def forward(self, log_w: torch.Tensor) -> torch.Tensor:
        return self.scale.view(1, -1, 1, 1) * log_w[:, None, None, :]  # (B, nh, 1, S)


class DecoderBlock(nn.Module):
    """Pre-norm decoder block (Vaswani et al. 2017, §3.1, with pre-norm):

    x + SelfAttn(LN(x)) under a causal mask, then x + CrossAttn(LN(x), memory) with the
    retrieval bias, then x + FFN(LN(x)).

    Input x (B, T, d); ``memory_kv`` the memory's keys and values from
    ``cross_attn.project_kv`` (B, nh, S, hs) each; ``memory_mask`` (B, 1, S) bool and
    ``memory_log_w`` (B, S). ``self_mask`` (1 or B, T, T) bool for a whole sequence, or
    None with ``past`` (the keys and values of earlier positions) for one step at a time.
    With ``group`` g > 1, every g consecutive rows of x share one memory row (the memory
    tensors then have B/g rows): beam search's hypotheses of one sentence.
    Returns (x (B, T, d), this block's self-attention keys and values including x's,
    cross-attention weights (B, nh, T, S) when ``need_weights`` else None).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.retrieval_bias = RetrievalBias(n_heads)
        self.ln3 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        memory_kv: KV,
        memory_mask: torch.Tensor,
        memory_log_w: torch.Tensor,
        self_mask: torch.Tensor | None = None,
        past: KV | None = None,
        need_weights: bool = False,
        group: int = 1,
    ) -> tuple[torch.Tensor, KV, torch.Tensor | None]:
        h = self.ln1(x)
        k, v = self.self_attn.project_kv(h)  # (B, nh, T, hs)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        a, _ = self.self_attn(h, mask=self_mask, kv=(k, v))
        x = x + self.dropout(a)
        b, t, d = x.shape
        # Rows that share one memory (a sentence's beams) read it as one longer query.
        q = self.ln2(x).reshape(b // group, group * t, d)
        c, w = self.cross_attn(q, mask=memory_mask, kv=memory_kv,
                               bias=self.retrieval_bias(memory_log_w), need_weights=need_weights)
        if w is not None:  # (B/g, nh, g·T, S) → (B, nh, T, S)
            w = w.view(b // group, w.size(1), group, t, -1).transpose(1, 2).flatten(0, 1)
        x = x + self.dropout(c.reshape(b, t, d))
        x = x + self.dropout(self.ffn(self.ln3(x)))
        return x, (k, v), w


def causal_mask(t: int, device: torch.device | None = None) -> torch.Tensor:
    """(1, T, T) bool, True where query i may attend key j (j ≤ i)."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril().unsqueeze(0)
