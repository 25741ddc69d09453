"""A cross-encoder reranker: a query and a passage read together in one sequence, scored by
one number (issue 74).

The network is the encoder's (:class:`encoder.model.TransformerEncoder`, the same tokenizer,
blocks and attention pooling), fine-tuned on pairs (:mod:`encoder.rerank_train`), and a
linear head on its pooled vector, unnormalised: ``score = w · pool(<s> query <s> passage)
+ b``. Because the network is the encoder's, it runs on what the encoder runs on: the int8
ONNX Runtime graph on a CPU (:class:`encoder.text_encoder.TextEncoder`'s backends, its graph
cache, its length-sorted batches), torch with bf16 autocast on CUDA; the head is a dot
product in numpy.

A pair is the query's token ids (``<s>`` first, cut at :data:`QUERY_TOKENS`) followed by the
passage's (its own ``<s>`` first: the separator), the whole cut where training cut pairs
(``pair_tokens``, at most the encoder's ``max_tokens``): the passage loses its end, the
query nothing past its own cut.

Match-marked ids (``marked``, the default of :func:`from_encoder`): a token of one side that
the other side has too is given as its id plus the encoder's vocabulary size ``V``, whose
embedding starts as the plain token's (the table is doubled, ``V`` rows more), so at the
start nothing changes and training learns what a shared word adds: DrQA's exact-match
feature (Chen et al. 2017), as token ids, so the network and its graphs are the encoder's
unchanged. Without it, a linear head on the pooled vector of the pair starts out adding a
term of the query to a term of the passage, which ranks one query's passages by a prior of
the passage alone; every comparison had to come from attention across the two parts, which
an encoder that read one text at a time never learned (the first CPU-trained reranker,
unmarked: 0.33 × hybrid's nDCG@10 over its top 50, ``bench/rerank.py``).

The checkpoint is an encoder checkpoint directory (:func:`encoder.checkpoint.save_checkpoint`)
whose ``config.json`` also holds ``rerank_head`` (``weight``: d floats, ``bias``, the
pair's ``pair_tokens`` and ``query_tokens``); an encoder checkpoint without it is not a
reranker (:func:`load` says so).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from encoder.checkpoint import read_checkpoint, save_checkpoint
from encoder.config import EncoderConfig
from encoder.model import TransformerEncoder
from encoder.text_encoder import TextEncoder

log = logging.getLogger(__name__)

HEAD = "rerank_head"  # config.json's key: what makes an encoder checkpoint a reranker
QUERY_TOKENS = 48  # a query is cut here (<s> included); the passage gets the rest


class NotARerankerError(ValueError):
    """A checkpoint directory without ``rerank_head`` in its config.json."""


class CrossScorer(nn.Module):
    """The trainable reranker: the encoder's network and a linear head on its pooled vector
    (not normalised). ``forward(ids (B, T))`` → scores (B,). ``marked``: its ids are
    match-marked (see the module doc; the vocabulary is twice the tokenizer's)."""

    def __init__(self, encoder: TransformerEncoder, marked: bool = False) -> None:
        super().__init__()
        self.encoder = encoder
        self.config = encoder.config
        self.marked = marked
        self.head = nn.Linear(encoder.config.d_model, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pooled, _ = self.encoder(ids, normalize=False)
        return self.head(pooled.float()).squeeze(-1)

    def head_dict(self, pair_tokens: int | None = None,
                  query_tokens: int = QUERY_TOKENS) -> dict[str, Any]:
        return {"weight": [float(x) for x in self.head.weight.detach().float().cpu()[0]],
                "bias": float(self.head.bias.detach().float().cpu()[0]),
                "pair_tokens": pair_tokens or self.config.max_tokens,
                "query_tokens": query_tokens, "marked": self.marked}

    @property
    def vocab(self) -> int | None:
        """The tokenizer's vocabulary size where ids are match-marked, else None."""
        return self.config.vocab_size // 2 if self.marked else None


def from_encoder(encoder: TransformerEncoder, marked: bool = True) -> CrossScorer:
    """A reranker to train, its network a copy of ``encoder``'s without the token bag (a
    bag of the query's and the passage's tokens together says nothing of their match);
    ``marked``: with the match-marked half of the vocabulary (see the module doc), its
    embeddings starting as the plain tokens'."""
    vocab = encoder.config.vocab_size * (2 if marked else 1)
    config = EncoderConfig.from_dict({**encoder.config.to_dict(), "lexical_weight": 0.0,
                                      "lexical_table": False, "matryoshka": (),
                                      "vocab_size": vocab})
    net = TransformerEncoder(config)
    state = {k: v for k, v in encoder.state_dict().items()
             if not k.startswith("lexical")}  # the bag's table and idf
    if marked:
        state["embed.weight"] = torch.cat([state["embed.weight"], state["embed.weight"]])
    net.load_state_dict(state)
    return CrossScorer(net, marked)


FIRST_WORD_ID = 3  # <pad>, <s>, <unk> are never marked


def pair_ids(query: Sequence[int], passage: Sequence[int], max_tokens: int,
             query_tokens: int = QUERY_TOKENS, vocab: int | None = None) -> list[int]:
    """One pair's ids: the query's (cut at ``query_tokens``), then the passage's, the whole
    cut at ``max_tokens`` (see the module doc). Both start with ``<s>``. With ``vocab``
    (the tokenizer's size), each token the other side has too is marked: ``id + vocab``."""
    q = list(query[:query_tokens])
    p = list(passage[:max(0, max_tokens - len(q))])
    if vocab is not None:
        shared = (set(q) & set(p)) - set(range(FIRST_WORD_ID))
        q = [t + vocab if t in shared else t for t in q]
        p = [t + vocab if t in shared else t for t in p]
    return (q + p)[:max_tokens]


class Reranker:
    """A loaded reranker: :meth:`score` a query against passages (higher: more relevant)."""

    def __init__(self, encoder: TextEncoder, weight: np.ndarray, bias: float,
                 path: Path | None = None, pair_tokens: int | None = None,
                 query_tokens: int = QUERY_TOKENS, marked: bool = False) -> None:
        if weight.shape != (encoder.dim,):
            raise ValueError(f"the head has {weight.shape[0]} weights for a network of "
                             f"{encoder.dim} dimensions")
        self.encoder, self.weight, self.bias, self.path = encoder, weight, float(bias), path
        # a pair is cut where training cut them (its positions past that were never read)
        self.pair_tokens = min(pair_tokens or encoder.max_tokens, encoder.max_tokens)
        self.query_tokens = query_tokens
        self.vocab = encoder.config.vocab_size // 2 if marked else None  # the tokenizer's

    @property
    def name(self) -> str:
        return self.encoder.name

    @property
    def fingerprint(self) -> str:
        return self.encoder.fingerprint

    @property
    def backend(self) -> str:
        return self.encoder.backend

    def pairs(self, query: str, passages: Sequence[str]) -> list[list[int]]:
        """The token ids of each (query, passage) pair (see :func:`pair_ids`)."""
        return self.pairs_of(self.encoder.tokenize([query, *passages])[0])

    def pairs_of(self, ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """:meth:`pairs` of the query's and the passages' token ids, the query's first (as
        ``encoder.tokenize`` gives them, each cut at ``max_tokens``: a passage is cut again
        beside the query)."""
        return [pair_ids(ids[0], p, self.pair_tokens, self.query_tokens, self.vocab)
                for p in ids[1:]]

    def score_ids(self, pairs: Sequence[Sequence[int]], batch_size: int = 64) -> np.ndarray:
        """Scores (float32, (n,)) of pairs from :meth:`pairs`."""
        if not pairs:
            return np.zeros(0, np.float32)
        pooled = self.encoder.encode_ids(pairs, batch_size=batch_size, normalize=False,
                                         bag=False)
        return (pooled @ self.weight + self.bias).astype(np.float32)

    def score(self, query: str, passages: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Each passage's score for ``query`` (higher: more relevant; a logit, not a
        probability: compare scores of one query, not across queries)."""
        return self.score_ids(self.pairs(query, passages), batch_size)


def save(scorer: CrossScorer, tokenizer: Any, path: str | Path, extra: dict[str, Any],
         precision: str = "fp16+q8", pair_tokens: int | None = None,
         query_tokens: int = QUERY_TOKENS) -> None:
    """Write ``scorer`` as a reranker checkpoint directory (see the module doc), with the
    pair length it was trained on (``pair_tokens``; default the network's limit)."""
    save_checkpoint(path, scorer.encoder, tokenizer,
                    {**extra, HEAD: scorer.head_dict(pair_tokens, query_tokens)}, precision)


def is_reranker(path: str | Path) -> bool:
    """Whether ``path`` holds a reranker checkpoint (its config.json has the head)."""
    import json

    config = Path(path) / "config.json"
    try:
        return HEAD in json.loads(config.read_text())
    except (OSError, ValueError):
        return False


def load(path: str | Path, device: torch.device | str | None = None,
         backend: str | None = None) -> Reranker:
    """Load a reranker checkpoint directory, its network on ``backend`` as
    :func:`encoder.load` picks (int8 ONNX Runtime on a CPU, torch on CUDA)."""
    meta, state, tokenizer = read_checkpoint(path, "a reranker")
    head = meta.get(HEAD)
    if not isinstance(head, dict) or "weight" not in head:
        raise NotARerankerError(f"{path} is an encoder checkpoint, not a reranker (its "
                                f"config.json has no {HEAD!r}); train one with "
                                "`qkv train-reranker`")
    model = TransformerEncoder(EncoderConfig.from_dict(meta["architecture"]))
    model.load_state_dict(state)
    encoder = TextEncoder(model, tokenizer, device=device, meta=meta)
    encoder.use_backend(backend)
    return Reranker(encoder, np.asarray(head["weight"], np.float32), float(head["bias"]),
                    Path(path), head.get("pair_tokens"),
                    int(head.get("query_tokens", QUERY_TOKENS)), bool(head.get("marked")))

