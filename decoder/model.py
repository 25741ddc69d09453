"""The retrieval-augmented transformer: an encoder stack reads the source (and the
neighbours' values) into a memory; a decoder stack writes the target, its cross-attention
biased by each neighbour's retrieval weight."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from decoder.config import DecoderConfig
from decoder.layers import KV, DecoderBlock, causal_mask
from encoder.layers import EncoderBlock, SinusoidalPositionalEncoding

SOURCE_SEGMENT = -1  # memory_segments value of the source's tokens; neighbour i's are i
NEIGHBOUR_CHUNK = 128  # neighbours encoded at once


@dataclass
class Memory:
    """What the decoder reads: the source's token states, then each neighbour's.

    states (B, S, d); mask (B, S) bool (True = may attend); log_w (B, S) the log
    retrieval weight of each token's neighbour (0 on the source and on masked slots);
    segments (B, S) long: -1 for the source, i for neighbour i; ids (B, S) the token in
    each slot.
    """

    states: torch.Tensor
    mask: torch.Tensor
    log_w: torch.Tensor
    segments: torch.Tensor
    ids: torch.Tensor

    def select(self, index: torch.Tensor) -> Memory:
        """Rows ``index`` (e.g. the sentences still being decoded)."""
        return Memory(self.states[index], self.mask[index], self.log_w[index],
                      self.segments[index], self.ids[index])

    def packed(self, multiple: int = 8) -> Memory:
        """The same memory with each row's real slots first (in order) and only as many
        padding slots as the fullest row needs, rounded up to ``multiple``: neighbours
        padded to the longest of the batch cost no cross-attention."""
        order = torch.sort((~self.mask).int(), dim=1, stable=True).indices  # real slots first
        width = int(self.mask.sum(dim=1).max()) if self.mask.numel() else 0
        width = min(self.mask.size(1), max(1, -(-width // multiple) * multiple))
        idx = order[:, :width]  # (B, S')

        def take(t: torch.Tensor) -> torch.Tensor:
            if t.dim() == 3:
                return t.gather(1, idx.unsqueeze(-1).expand(-1, -1, t.size(-1)))
            return t.gather(1, idx)

        return Memory(take(self.states), take(self.mask), take(self.log_w),
                      take(self.segments), take(self.ids))


class RetrievalAugmentedTransformer(nn.Module):
    """(source ids (B, S), target input ids (B, T), neighbour ids (B, K, N), neighbour
    weights (B, K)) → next-token logits (B, T, vocab).

    One embedding table serves source, neighbours, target and the output projection
    (the BPE is joint). A learned segment embedding tells source tokens from neighbour
    tokens; positions restart at each sequence. Neighbours with weight 0 are masked out;
    K may be 0.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.segment = nn.Embedding(2, c.d_model)  # 0 = source, 1 = neighbour
        # Room for <s>/<sep> and </s>, and for batches padded up to a multiple of 8.
        self.positions = SinusoidalPositionalEncoding(c.d_model, c.max_tokens + 2 + 8)
        self.encoder_blocks = nn.ModuleList(
            EncoderBlock(c.d_model, c.n_heads, c.d_ff, c.dropout)
            for _ in range(c.n_encoder_layers)
        )
        self.ln_memory = nn.LayerNorm(c.d_model)
        self.decoder_blocks = nn.ModuleList(
            DecoderBlock(c.d_model, c.n_heads, c.d_ff, c.dropout)
            for _ in range(c.n_decoder_layers)
        )
        self.ln_f = nn.LayerNorm(c.d_model)
        self.drop = nn.Dropout(c.dropout)
        nn.init.normal_(self.embed.weight, std=c.d_model**-0.5)
        nn.init.normal_(self.segment.weight, std=0.02)
        with torch.no_grad():
            self.embed.weight[c.pad_id].zero_()

    def _embed(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.drop(self.positions(self.embed(ids) * self.config.d_model**0.5, offset))

    def _encode(self, ids: torch.Tensor, segment: int, layers: int) -> torch.Tensor:
        """(B, T) ids → (B, T, d) states after the first ``layers`` encoder blocks. The
        first token is never masked, so no row's attention is empty."""
        key_mask = ids != self.config.pad_id
        key_mask[:, 0] = True
        x = self._embed(ids) + self.segment.weight[segment]
        for block in list(self.encoder_blocks)[:layers]:
            x = block(x, key_mask.unsqueeze(1))  # key mask (B, 1, T)
        return self.ln_memory(x)

    def _encode_neighbours(self, flat: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """Neighbour ids (R, N) → states (R, N, d) of the rows where ``keep`` (R,), zeros
        elsewhere. Rows are encoded in length-sorted chunks, each padded only to its
        longest row, so one long neighbour does not pad them all."""
        r, n = flat.shape
        lengths = (flat != self.config.pad_id).sum(dim=1)
        rows = keep.nonzero().flatten()
        rows = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
        parts = []
        for chunk in rows.split(NEIGHBOUR_CHUNK):
            t = min(n, -(-int(lengths[chunk].max()) // 8) * 8)
            h = self._encode(flat[chunk, :t], 1, self.config.neighbour_layers)  # (c, t, d)
            parts.append(F.pad(h, (0, 0, 0, n - t)))
        d = self.config.d_model
        if not parts:
            return torch.zeros(r, n, d, device=flat.device)
        states = torch.cat(parts)
        out = states.new_zeros(r, n, d)
        return out.index_put((rows,), states)

    def encode_memory(
        self,
        src: torch.Tensor,
        neighbours: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> Memory:
        """Source ids (B, S), neighbour ids (B, K, N) and weights (B, K) → packed
        :class:`Memory` of at most S + K·N slots."""
        b, s = src.shape
        c = self.config
        states = self._encode(src, 0, c.n_encoder_layers)  # (B, S, d)
        mask = src != c.pad_id
        log_w = torch.zeros(b, s, device=src.device)
        segments = torch.full((b, s), SOURCE_SEGMENT, dtype=torch.long, device=src.device)
        if neighbours is None or neighbours.size(1) == 0:
            return Memory(states, mask, log_w, segments, src)
        if weights is None or weights.shape != neighbours.shape[:2]:
            raise ValueError("neighbour weights must have shape (B, K) like neighbours' first "
                             "two dimensions")
        _, k, n = neighbours.shape
        w = weights.float().unsqueeze(-1).expand(b, k, n)  # (B, K, N)
        n_mask = (neighbours != c.pad_id) & (w > 0)
        n_states = self._encode_neighbours(neighbours.reshape(b * k, n),
                                           n_mask.reshape(b * k, n).any(dim=1))  # (B·K, N, d)
        n_log_w = torch.where(n_mask, w.clamp_min(1e-30).log(), torch.zeros_like(w))
        n_seg = torch.arange(k, device=src.device).view(1, k, 1).expand(b, k, n)
        return Memory(
            torch.cat([states, n_states.to(states.dtype).reshape(b, k * n, -1)], dim=1),
            torch.cat([mask, n_mask.reshape(b, k * n)], dim=1),
            torch.cat([log_w, n_log_w.reshape(b, k * n)], dim=1),
            torch.cat([segments, n_seg.reshape(b, k * n)], dim=1),
            torch.cat([src, neighbours.reshape(b, k * n)], dim=1),
        ).packed()

    def memory_kv(self, memory: Memory) -> list[KV]:
        """Each decoder block's cross-attention keys and values of the memory, computed once
        per sentence and reused at every generation step."""
        blocks: list[DecoderBlock] = list(self.decoder_blocks)  # type: ignore[arg-type]
        return [blk.cross_attn.project_kv(memory.states) for blk in blocks]

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.ln_f(x))

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """Output states (after the final layer norm) → next-token logits (tied output
        embedding). The states are what a token memory (:mod:`decoder.knn`) keys on."""
        return states @ self.embed.weight.t().to(states.dtype)

    def states(self, tgt_in: torch.Tensor, memory: Memory) -> torch.Tensor:
        """Teacher-forced output states (B, T, d): position t's state predicts token t + 1
        of ``<s> y``, i.e. ``(y </s>)[t]``."""
        x = self._embed(tgt_in)
        self_mask = causal_mask(tgt_in.size(1), tgt_in.device)
        mem_mask = memory.mask.unsqueeze(1)
        for blk, kv in zip(self.decoder_blocks, self.memory_kv(memory), strict=True):
            x, _, _ = blk(x, kv, mem_mask, memory.log_w, self_mask=self_mask)
        return self.ln_f(x)

    def decode(
        self, tgt_in: torch.Tensor, memory: Memory, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced: target input ids (B, T) → (logits (B, T, V), cross-attention
        (B, T, S) averaged over heads and layers when ``need_weights``)."""
        x = self._embed(tgt_in)
        self_mask = causal_mask(tgt_in.size(1), tgt_in.device)
        mem_mask = memory.mask.unsqueeze(1)  # (B, 1, S)
        attn = []
        for blk, kv in zip(self.decoder_blocks, self.memory_kv(memory), strict=True):
            x, _, w = blk(x, kv, mem_mask, memory.log_w, self_mask=self_mask,
                          need_weights=need_weights)
            if w is not None:
                attn.append(w.float().mean(dim=1))  # (B, T, S)
        return self._logits(x), torch.stack(attn).mean(0) if attn else None

    def step(
        self,
        tokens: torch.Tensor,
        position: int,
        memory: Memory,
        memory_kv: list[KV],
        past: list[KV] | None,
        need_weights: bool = False,
        group: int = 1,
    ) -> tuple[torch.Tensor, list[KV], torch.Tensor | None]:
        """One generation step with cached keys and values: the last tokens (R,) at
        ``position`` → (output states (R, d): :meth:`project` makes them logits, the caches
        with this step, cross-attention (R, S) averaged over heads and layers when
        ``need_weights``). With ``group`` g, rows
        g·i .. g·i + g - 1 read memory row i (the memory has R/g rows)."""
        x = self._embed(tokens.unsqueeze(1), offset=position)  # (R, 1, d)
        mem_mask = memory.mask.unsqueeze(1)
        new_past: list[KV] = []
        attn = []
        for i, (blk, kv) in enumerate(zip(self.decoder_blocks, memory_kv, strict=True)):
            x, cache, w = blk(x, kv, mem_mask, memory.log_w, past=None if past is None else past[i],
                              need_weights=need_weights, group=group)
            new_past.append(cache)
            if w is not None:
                attn.append(w.float().mean(dim=1)[:, 0])  # (R, S)
        return self.ln_f(x)[:, 0], new_past, torch.stack(attn).mean(0) if attn else None

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        neighbours: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.decode(tgt_in, self.encode_memory(src, neighbours, weights))[0]
