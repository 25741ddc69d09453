"""Training the token bag's table beside a frozen network (issue 15, items 1 and 5).

The bag of :mod:`encoder.token_bag` sums idf-weighted rows of a table; untrained, that
table is the network's input embeddings. Here the table itself is trained, initialised
from the one in use, so that the vectors the encoder serves, ``normalise(n(v) + w·bag)``,
rank each pair's positive above the batch's other documents and the pair's hard negative
(:class:`encoder.losses.InfoNCE`, on the full vectors and on Matryoshka prefixes). The
network is frozen: its vectors of the pairs' texts are computed once, as the encoder
serves them, and a step is one ``embedding_bag`` over the batch's tokens, so a few hundred
steps take seconds on a CPU and no GPU is needed.

``qkv token-bag --pairs BUNDLE`` trains it on a ``qkv build-pairs`` bundle; ``qkv
token-bag --corpus DOCS`` adapts it to a user's documents without labels (item 5), on the
BM25-imitation, span and title → text pairs of :func:`encoder.adapt.corpus_sources`. The
trained table is the checkpoint's ``lexical`` embedding (``lexical_table`` in its
architecture), stored like the input embeddings and hashed into the fingerprint.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from encoder.dataset import Bundle
from encoder.losses import InfoNCE, Matryoshka, duplicates
from encoder.token_bag import term_weights

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BagTraining:
    """Options of :func:`train_table`; the defaults were chosen on the dev sets
    (bench/history/, "Training the token bag")."""

    steps: int = 600
    batch_size: int = 256
    lr: float = 1e-3
    per_source: int = 20_000  # pairs drawn from each source at most
    dims: tuple[int, ...] = (64, 128)  # Matryoshka prefixes trained besides the full size
    temperature: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "per_source"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


class TextBags:
    """Texts as the bag sees them: each one's distinct token ids with their BM25 weights
    (:func:`encoder.token_bag.term_weights`, as the served bag weighs them), flat, and the
    network's unit vectors of them."""

    def __init__(self, ids: Sequence[Sequence[int]], vectors: np.ndarray, idf: np.ndarray
                 ) -> None:
        rows, tokens, weights = term_weights(ids, idf)
        self.ids = torch.from_numpy(tokens)
        self.weights = torch.from_numpy(weights)
        self.offsets = np.concatenate(
            [[0], np.cumsum(np.bincount(rows, minlength=len(ids)), dtype=np.int64)])
        self.vectors = F.normalize(torch.from_numpy(np.asarray(vectors, np.float32)), dim=-1)

    def __len__(self) -> int:
        return len(self.vectors)

    def served(self, rows: np.ndarray, table: torch.Tensor, weight: float) -> torch.Tensor:
        """(len(rows), d) unit vectors ``normalise(n(v) + weight·bag)`` of the texts
        ``rows``, differentiable in ``table``."""
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        sel = torch.from_numpy(np.concatenate(
            [np.arange(s, e) for s, e in zip(starts, ends, strict=True)] or [np.zeros(0, int)]))
        offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(ends - starts)[:-1]]))
        bag = F.embedding_bag(self.ids[sel], table, offsets, mode="sum",
                              per_sample_weights=self.weights[sel])
        bag = F.normalize(bag, dim=-1, eps=1e-12)
        return F.normalize(self.vectors[torch.from_numpy(rows)] + weight * bag, dim=-1)


def sample_pairs(bundle: Bundle, per_source: int, seed: int) -> list[np.ndarray]:
    """Per source, up to ``per_source`` of its pairs drawn at random: (n, 3) rows of
    (query, positive, hard negative or -1) into the bundle's texts."""
    rng = np.random.default_rng(seed)
    out = []
    for s in bundle.sources:
        take = np.sort(rng.permutation(len(s))[:per_source])
        out.append(np.stack([s.q[take], s.d[take], s.neg[take]], 1).astype(np.int64))
    return out


def train_table(encoder: Any, bundle: Bundle, options: BagTraining = BagTraining()
                ) -> tuple[Any, dict[str, Any]]:
    """A copy of ``encoder``'s network (a :class:`encoder.TextEncoder` with a token bag)
    whose bag has its own table, trained on ``bundle``'s pairs; and a report of the run."""
    from encoder.model import TransformerEncoder

    config = encoder.config
    if not config.lexical_weight:
        raise ValueError("the encoder has no token bag: add one first (qkv token-bag --texts)")
    o = options
    t0 = time.time()
    pairs = [p for p in sample_pairs(bundle, o.per_source, o.seed) if len(p)]
    weights = np.array([s.weight for s in bundle.sources if len(s)], np.float64)
    if not pairs or not weights.sum() > 0:
        raise ValueError("no pairs to train the token bag on")
    used = np.unique(np.concatenate([p.ravel() for p in pairs]))
    used = used[used >= 0]
    row = np.full(len(bundle.texts), -1, np.int64)
    row[used] = np.arange(len(used))
    pairs = [np.where(p >= 0, row[np.maximum(p, 0)], -1) for p in pairs]
    texts = [bundle.texts[i] for i in used]
    ids, _ = encoder.tokenize(texts)
    idf = encoder.model.get_buffer("lexical_idf").float().cpu().numpy()
    bags = TextBags(ids, encoder.encode_ids(ids, batch_size=64, bag=False), idf)
    encoded = time.time() - t0
    log.info("token bag: %d texts of %d pairs encoded in %.0fs", len(texts),
             sum(map(len, pairs)), encoded)

    own = config.lexical_table
    start = (encoder.model.lexical if own else encoder.model.embed).weight.detach().float().cpu()
    table = torch.nn.Parameter(start.clone())
    opt = torch.optim.Adam([table], lr=o.lr)
    loss_fn = Matryoshka(InfoNCE(o.temperature), tuple(m for m in o.dims if m < config.d_model))
    rng = np.random.default_rng(o.seed + 1)
    p_source = weights / weights.sum()
    losses: list[float] = []
    t1 = time.time()
    for step in range(1, o.steps + 1):
        src = pairs[rng.choice(len(pairs), p=p_source)]
        batch = src[rng.choice(len(src), min(o.batch_size, len(src)), replace=False)]
        neg = batch[batch[:, 2] >= 0, 2]
        q = bags.served(batch[:, 0], table, config.lexical_weight)
        d = bags.served(batch[:, 1], table, config.lexical_weight)
        h = bags.served(neg, table, config.lexical_weight) if len(neg) else None
        same = duplicates(torch.from_numpy(batch[:, 1]),
                          torch.from_numpy(np.concatenate([batch[:, 1], neg])),
                          torch.from_numpy(batch[:, 0]))
        loss, _ = loss_fn(q, d, h, same)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            table[config.pad_id].zero_()
        losses.append(float(loss.detach()))
        if step % 100 == 0:
            log.info("token bag step %d/%d: loss %.4f", step, o.steps, np.mean(losses[-100:]))
    trained = time.time() - t1

    new = TransformerEncoder(dataclasses.replace(config, lexical_table=True))
    state = {k: v for k, v in encoder.model.state_dict().items() if not k.startswith("lexical.")}
    state["lexical.weight"] = table.detach().to(start.dtype)
    new.load_state_dict(state)
    k = max(1, min(50, len(losses) // 4))  # the mean loss over the first and last k steps
    first, last = losses[:k], losses[-k:]
    report = {**dataclasses.asdict(o), "pairs": int(sum(map(len, pairs))),
              "texts": len(texts), "encode_seconds": round(encoded, 1),
              "train_seconds": round(trained, 1), "loss_first": round(float(np.mean(first)), 4),
              "loss_last": round(float(np.mean(last)), 4), "from": "lexical" if own else "embed"}
    return new.eval(), report
