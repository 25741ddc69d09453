"""The transformer layers of the attention papers, one small module per concept.

Leaf modules take plain numbers; only :class:`encoder.model.TransformerEncoder` takes the
config. Masks are boolean with ``True`` = may attend, made once at the encoder entry.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, the readable reference (Vaswani et al. 2017, eq. 1).

    softmax(q kᵀ / √d + bias, masked) v.

    q: (..., Tq, d), k: (..., Tk, d), v: (..., Tk, dv); mask broadcastable to
    (..., Tq, Tk), bool, True = may attend; bias: additive logits of the same shape.
    Returns (output (..., Tq, dv), weights (..., Tq, Tk) in float32 whatever the inputs'
    dtype, so maps read under bf16 still sum to 1). A query row whose keys are all masked
    gets zero weights rather than NaN.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., Tq, Tk)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).nan_to_num(0.0)
    return weights.to(v.dtype) @ v, weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention with a fused SDPA fast path and the readable reference path.

    Input x: (B, T, d_model), optional memory (B, S, d_model) for cross-attention,
    mask (B, 1 or T, S) bool. Output (B, T, d_model). With ``need_weights`` the reference
    path runs and the per-head weights (B, n_heads, T, S) are returned too.

    Optional ``bias``: additive logits broadcastable to (B, n_heads, T, S) (the decoder's
    retrieval weights). Optional ``kv``: keys and values already projected by
    :meth:`project_kv`, (B, n_heads, S, d_head) each, used instead of ``memory`` (a
    decoder's cached memory or its growing self-attention cache).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout
        self.fused = True

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, nh, T, hs)

    def project_kv(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``src`` (B, S, d_model), each (B, n_heads, S, d_head)."""
        k, v = self.kv_proj(src).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        bias: torch.Tensor | None = None,
        kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        q = self._split(self.q_proj(x))  # (B, nh, T, hs)
        k, v = kv if kv is not None else self.project_kv(x if memory is None else memory)
        m = None if mask is None else mask.unsqueeze(1)  # (B, 1, T|1, S)
        weights = None
        if self.fused and not need_weights:
            p = self.dropout if self.training else 0.0
            attn_mask = m
            if bias is not None:  # SDPA takes one float mask: the bias, -inf where masked
                bias_q = bias.to(q.dtype)
                attn_mask = bias_q if m is None else torch.where(m, bias_q, float("-inf"))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
        else:
            y, weights = attention(q, k, v, m, bias)
        b, _, t, _ = y.shape
        y = y.transpose(1, 2).reshape(b, t, self.n_heads * self.d_head)  # (B, T, d_model)
        return self.out_proj(y), weights


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sine/cosine position table (Vaswani et al. 2017, §3.5), added to embeddings.

    Input (B, T, d_model), output the same shape. The table is a derived, non-persistent
    buffer: it is not saved with the weights.
    """

    table: torch.Tensor

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (L, 1)
        div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                        * (-math.log(10000.0) / d_model))  # (d/2,)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(pos * div)
        table[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("table", table, persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Add positions ``offset .. offset + T - 1`` (an offset for step-wise decoding)."""
        t = offset + x.size(1)
        if t > self.table.size(0):
            raise ValueError(f"sequence of {t} tokens exceeds max_len={self.table.size(0)}")
        return x + self.table[offset:t].to(x.dtype)


class FeedForward(nn.Module):
    """Position-wise feed-forward network: Linear → GELU → Linear. (B, T, d) → (B, T, d)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(F.gelu(self.fc1(x))))


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block: x + MHA(LN(x)), then x + FFN(LN(x)).

    Input (B, T, d_model) and mask (B, 1, T) bool; output (B, T, d_model).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        a, _ = self.attn(self.ln1(x), mask=mask)
        x = x + self.dropout(a)
        return x + self.dropout(self.ffn(self.ln2(x)))

    def forward_packed(self, x: torch.Tensor, packing: Packing) -> torch.Tensor:
        """The same block on packed tokens (inference): ``x`` is (N, d), the real tokens
        of a batch one text after another (rows past ``packing.n`` are filler). The
        projections, the feed-forward and the norms (nearly all the work) see only these
        rows; only the attention itself runs padded, (B, T), with the key mask."""
        h = self.ln1(x)
        attn = self.attn
        qkv = torch.cat((attn.q_proj(h), attn.kv_proj(h)), dim=-1)  # (N, 3d)
        q, k, v = packing.pad(qkv).chunk(3, dim=-1)  # (B, T, d) each
        y = F.scaled_dot_product_attention(attn._split(q), attn._split(k), attn._split(v),
                                           attn_mask=packing.key_mask)
        b, _, t, _ = y.shape
        y = y.transpose(1, 2).reshape(b, t, attn.n_heads * attn.d_head)
        x = x + attn.out_proj(packing.unpad(y, x.size(0)))
        return x + self.ffn(self.ln2(x))


class Packing:
    """Where the real tokens of a padded (B, T) batch lie among its B·T positions, to move
    per-token tensors between the packed (N, ...) and the padded (B, T, ...) layouts."""

    def __init__(self, mask: torch.Tensor) -> None:
        self.mask = mask  # (B, T) bool, True = real token
        self.index = mask.reshape(-1).nonzero().squeeze(1)  # (n,) flat positions
        self.n = int(self.index.numel())
        self.key_mask = mask[:, None, None, :]  # (B, 1, 1, T) for SDPA

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, k) packed (N >= n) → (B, T, k), zeros on padding."""
        b, t = self.mask.shape
        out = x.new_zeros(b * t, x.size(-1))
        out[self.index] = x[: self.n]
        return out.view(b, t, -1)

    def unpad(self, x: torch.Tensor, rows: int) -> torch.Tensor:
        """(B, T, k) padded → (rows, k) packed; rows past n are zeros."""
        flat = x.reshape(-1, x.size(-1))
        if rows == self.n:
            return flat[self.index]
        out = flat.new_zeros(rows, flat.size(-1))
        out[: self.n] = flat[self.index]
        return out
