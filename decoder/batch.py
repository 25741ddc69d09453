"""Token ids of sources, neighbours and targets → padded tensors, one way for training and
generation. Layouts: source ``<s> x </s>``, neighbour ``<sep> v </s>``, target input
``<s> y`` and output ``y </s>``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from decoder.config import DecoderConfig

# Padded lengths are multiples of this: fewer distinct shapes, so the CPU kernels' caches
# of per-shape primitives stay small in a long-running process (as in the encoder).
PAD_MULTIPLE = 8


def pad(seqs: Sequence[Sequence[int]], pad_id: int, multiple: int = PAD_MULTIPLE) -> torch.Tensor:
    """(B, T) long, each row left-aligned, T the longest row rounded up to ``multiple``."""
    t = max((len(s) for s in seqs), default=1)
    t = max(1, -(-t // multiple) * multiple)
    out = np.full((len(seqs), t), pad_id, dtype=np.int64)
    for row, s in enumerate(seqs):
        out[row, : len(s)] = s
    return torch.from_numpy(out)


def sources(ids: Sequence[Sequence[int]], c: DecoderConfig) -> torch.Tensor:
    """(B, S): ``<s> x </s>`` per source."""
    return pad([[c.bos_id, *x, c.eos_id] for x in ids], c.pad_id)


def neighbours(
    ids: Sequence[Sequence[Sequence[int]]], weights: Sequence[Sequence[float]], c: DecoderConfig
) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
    """(B, K, N) ids ``<sep> v </s>`` and (B, K) weights, K the most neighbours of any row;
    absent neighbours are all padding with weight 0. (None, None) when no row has any."""
    k = max((len(n) for n in ids), default=0)
    if k == 0:
        return None, None
    n_max = max(len(v) + 2 for n in ids for v in n)
    n_max = -(-n_max // PAD_MULTIPLE) * PAD_MULTIPLE
    out = np.full((len(ids), k, n_max), c.pad_id, dtype=np.int64)
    w = np.zeros((len(ids), k), dtype=np.float32)
    for b, (n, nw) in enumerate(zip(ids, weights, strict=True)):
        for i, (v, wi) in enumerate(zip(n, nw, strict=True)):
            out[b, i, 0], out[b, i, 1 : len(v) + 1], out[b, i, len(v) + 1] = c.sep_id, v, c.eos_id
            w[b, i] = wi
    return torch.from_numpy(out), torch.from_numpy(w)


def targets(ids: Sequence[Sequence[int]], c: DecoderConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ``<s> y``, output ``y </s>``), each (B, T) padded with ``pad_id``."""
    return (pad([[c.bos_id, *y] for y in ids], c.pad_id),
            pad([[*y, c.eos_id] for y in ids], c.pad_id))
