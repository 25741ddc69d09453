"""The encoder network: embeddings + positions → pre-norm blocks → attention pooling."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from encoder.config import EncoderConfig
from encoder.layers import EncoderBlock, Packing, SinusoidalPositionalEncoding
from encoder.pooling import AttentionPooling


class TransformerEncoder(nn.Module):
    """Token ids (B, T) → unit vectors (B, d_model), plus pooling weights (B, T).

    The padding mask (True = real token) is made once here from ``pad_id`` and passed to
    every block as a key mask (B, 1, T) and to the pooling as (B, T).
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.positions = SinusoidalPositionalEncoding(c.d_model, c.max_tokens)
        self.blocks = nn.ModuleList(
            EncoderBlock(c.d_model, c.n_heads, c.d_ff, c.dropout) for _ in range(c.n_layers)
        )
        self.ln_f = nn.LayerNorm(c.d_model)
        self.pool = AttentionPooling(c.d_model, c.pooling)
        self.drop = nn.Dropout(c.dropout)
        if c.lexical_weight > 0:  # the token bag's idf (encoder.token_bag): saved, not trained
            self.register_buffer("lexical_idf", torch.zeros(c.vocab_size))
            if c.lexical_table:  # the bag's own table (encoder.bag_train); not in forward
                self.lexical = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        nn.init.normal_(self.embed.weight, std=c.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[c.pad_id].zero_()

    def token_states(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) ids → (token states (B, T, d), mask (B, T) bool)."""
        mask = ids != self.config.pad_id  # (B, T)
        x = self.drop(self.positions(self.embed(ids) * self.config.d_model**0.5))
        key_mask = mask.unsqueeze(1)  # (B, 1, T)
        for block in self.blocks:
            x = block(x, key_mask)
        return self.ln_f(x), mask

    def forward(
        self, ids: torch.Tensor, normalize: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) ids → (pooled vectors (B, d), unit unless ``normalize`` is false; pooling
        weights (B, T))."""
        h, mask = self.token_states(ids)
        pooled, weights = self.pool(h, mask)  # (B, d), (B, T)
        return (F.normalize(pooled, dim=-1) if normalize else pooled), weights

    def forward_packed(
        self, ids: torch.Tensor, mask: torch.Tensor, normalize: bool = True, multiple: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` for inference without computing padding: ``ids`` (B, T) padded
        as for :meth:`forward` and ``mask`` (B, T) its real tokens. The blocks run on the
        packed real tokens (rounded up to ``multiple`` rows, so the kernels see few
        distinct shapes), only attention and pooling padded. Same results as
        :meth:`forward` up to float rounding; a batch of mixed lengths costs what its
        tokens cost, not B × its longest."""
        packing = Packing(mask)
        rows = -(-packing.n // multiple) * multiple
        flat = ids.reshape(-1)[packing.index]  # (n,)
        pos = packing.index % ids.size(1)  # each token's position in its text
        x = self.embed(flat) * self.config.d_model**0.5 + self.positions.table[pos].to(
            self.embed.weight.dtype)
        if rows > packing.n:
            x = torch.cat((x, x.new_zeros(rows - packing.n, x.size(1))))
        for block in self.blocks:
            assert isinstance(block, EncoderBlock)
            x = block.forward_packed(x, packing)
        h = packing.pad(self.ln_f(x))  # (B, T, d)
        pooled, weights = self.pool(h, mask)
        return (F.normalize(pooled, dim=-1) if normalize else pooled), weights
