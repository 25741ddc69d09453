"""The encoder's token bag: an idf-weighted bag of the text's tokens, added to the network's
vector (issue 15, item 1: "a lexical model beside the semantic one whose vectors are
concatenated or summed"; the BM25-imitation *pairs* are :mod:`encoder.lexical`).

A text's bag is the sum, over its distinct tokens, of the token's input embedding (the
network's own ``embed`` table) weighted as BM25 weighs a document term without length
normalisation, ``idf · tf·(k1 + 1)/(tf + k1)``, then normalised. :class:`TextEncoder`
returns ``normalise(n(v) + w·bag)`` where the checkpoint's ``lexical_weight`` w is above 0:
texts that share rare tokens move closer, which the network, trained on a few million
pairs, learnt only in part. The idf is a buffer of the network (``lexical_idf``: saved
with the weights, so the fingerprint changes with it), computed by :func:`add_lexical`
over training texts, never over a collection that will be searched. Chosen on the dev sets
(bench/history/, "An untrained token bag beside the encoder"): summed at w = 0.5 over the
input embeddings, against w = 0.7, a random sign table and concatenation.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import lzma
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import sparse

K1 = 1.2


def read_texts(path: Path, limit: int) -> list[str]:
    """Up to ``limit`` texts of a JSONL(.xz/.gz) file: a JSON string or {"text": ...} a line
    (a ``qkv build-pairs`` bundle's ``texts.jsonl.xz``, or a corpus)."""
    opener: Any = {".xz": lzma.open, ".gz": gzip.open}.get(path.suffix, open)
    texts: list[str] = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                obj = json.loads(line)
                texts.append(obj if isinstance(obj, str) else obj["text"])
                if len(texts) >= limit:
                    break
    return texts


def idf_of(ids: Iterable[Sequence[int]], vocab: int, specials: Iterable[int]) -> np.ndarray:
    """BM25's idf (``log((N - df + 0.5)/(df + 0.5) + 1)``) of each of ``vocab`` token ids over
    the token id lists ``ids``; the ``specials`` weigh 0."""
    df = np.zeros(vocab)
    n = 0
    for x in ids:
        df[np.unique(np.asarray(x, np.int64))] += 1
        n += 1
    idf = np.log((n - df + 0.5) / (df + 0.5) + 1.0)
    idf[list(specials)] = 0.0
    return idf.astype(np.float32)


def special_ids(tokenizer: Any) -> list[int]:
    """The ids of the tokenizer's special tokens (:data:`encoder.tokenizer.SPECIAL_TOKENS`)."""
    from encoder.tokenizer import SPECIAL_TOKENS

    return [i for t in SPECIAL_TOKENS if (i := tokenizer.token_to_id(t)) is not None]


def idf_over(tokenizer: Any, texts: Sequence[str], vocab: int) -> np.ndarray:
    """:func:`idf_of` the ``texts`` as the encoder tokenizes them (cleaned, not cut)."""
    from encoder.tokenizer import clean_text

    encs = tokenizer.encode_batch_fast([clean_text(t) for t in texts])
    return idf_of((e.ids for e in encs), vocab, special_ids(tokenizer))


def term_weights(ids: Sequence[Sequence[int]], idf: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(list row, token id, weight) of each distinct token of each token id list, ordered
    by row then token; the weight is BM25's for a document term without length
    normalisation, ``idf · tf·(k1 + 1)/(tf + k1)``, in float32."""
    lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
    flat = np.fromiter((t for x in ids for t in x), np.int64, int(lengths.sum()))
    rows = np.repeat(np.arange(len(ids)), lengths)
    keys, tf = np.unique(rows * len(idf) + flat, return_counts=True)  # (text, token) pairs
    r, c = np.divmod(keys, len(idf))
    return r, c, (idf[c] * tf * (K1 + 1) / (tf + K1)).astype(np.float32)


# Up to this many texts a bag is a row-by-row product over the texts' own table rows; from
# more, one sparse product. A served batch is often 1-8 texts (the API's dynamic batches),
# where building the sparse matrix cost more than the product: per call, 1 text 70 -> 23
# µs, 2 texts 72 -> 28, 8 texts 92 -> 53; at 32, 64 and 256 texts the sparse product
# made from the rows' offsets (no coordinate sort) 139 -> 97, 213 -> 147, 553 -> 458 µs
# (AMD EPYC, the shipped encoder's table, real sentences; ad hoc, 3 passes each)
ROWWISE_MAX = 8


def bags(ids: Sequence[Sequence[int]], idf: np.ndarray, table: np.ndarray) -> np.ndarray:
    """(B, table width) unit rows: each token id list's bag over ``table`` (module doc)."""
    if not ids:
        return np.zeros((0, table.shape[1]), np.float32)
    r, c, w = term_weights(ids, idf)
    # float32 throughout: a float64 product would copy the whole table to float64 per call
    table = table.astype(np.float32, copy=False)
    indptr = np.searchsorted(r, np.arange(len(ids) + 1))  # r is sorted: each text's terms
    if len(ids) <= ROWWISE_MAX:
        bag = np.zeros((len(ids), table.shape[1]), np.float32)
        for row, (s, e) in enumerate(zip(indptr[:-1], indptr[1:], strict=True)):
            if e > s:
                bag[row] = w[s:e] @ table[c[s:e]]
    else:
        m = sparse.csr_matrix((w, c, indptr), shape=(len(ids), len(idf)), dtype=np.float32)
        bag = np.asarray(m @ table, np.float32)
    return bag / np.maximum(np.linalg.norm(bag, axis=1, keepdims=True), 1e-12)


def mix(vectors: np.ndarray, bag: np.ndarray, weight: float) -> np.ndarray:
    """``n(vectors) + weight·bag`` (not normalised: the encoder normalises after)."""
    v = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return (v + weight * bag).astype(np.float32)


def add_lexical(model: Any, tokenizer: Any, texts: Sequence[str], weight: float) -> Any:
    """A copy of the network ``model`` with a lexical part of ``weight`` whose idf is taken
    over ``texts`` (tokenized by ``tokenizer`` as the encoder does); ``weight`` 0 removes it."""
    from encoder.model import TransformerEncoder

    if weight < 0:
        raise ValueError(f"the lexical weight must be >= 0, got {weight}")
    # weight 0 also drops a trained table (encoder.bag_train); above 0 a trained one is kept
    config = dataclasses.replace(model.config, lexical_weight=float(weight),
                                 lexical_table=model.config.lexical_table and weight > 0)
    new = TransformerEncoder(config)
    state = {k: v for k, v in model.state_dict().items()
             if k != "lexical_idf" and (weight > 0 or not k.startswith("lexical."))}
    if weight > 0:
        if not texts:
            raise ValueError("the idf needs texts")
        state["lexical_idf"] = torch.from_numpy(idf_over(tokenizer, texts, config.vocab_size))
    new.load_state_dict(state)
    return new.eval()
