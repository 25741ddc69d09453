"""An in-process BM25 index over analysed text (:func:`index.hybrid.analysis.analyze`), for stores
without their own (FAISS).

Scoring is BM25 with Lucene's idf, as Milvus' BM25 function computes it::

    idf(t)   = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
    score(d) = Σ_{t in query} idf(t) · tf · (k1 + 1) / (tf + k1 · (1 − b + b · |d| / avgdl))

with ``tf`` the count of ``t`` in ``d``, ``N`` the number of documents, ``|d|`` a document's
number of terms and ``avgdl`` their mean. The sum runs over the query's terms as they come,
so a term repeated in the query counts once per occurrence (as bm25s does). bm25s' ``lucene``
method leaves out the constant factor ``k1 + 1`` (:data:`TF_SCALE`, which Milvus keeps): its
scores are ours divided by it, in the same order.

The per-(document, term) weights are computed once into a sparse term × document matrix
(CSR: one row of postings per term); a query's scores are the sum of its terms' rows.
Only documents with a score above 0 (sharing a term with the query) are hits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from index.hybrid.analysis import BM25_B, BM25_K1, analyze

TF_SCALE = BM25_K1 + 1.0  # Milvus' (and Robertson's) numerator factor; bm25s leaves it out


def term_ids(terms: Sequence[str], vocab: dict[str, int]) -> np.ndarray:
    """``terms`` as ids in ``vocab``, adding the new ones to it."""
    return np.fromiter((vocab.setdefault(t, len(vocab)) for t in terms), np.int64, len(terms))


class BM25Index:
    """BM25 over a fixed list of documents, each given as its terms' ids in ``vocab`` (which
    may hold more terms, and may grow later: :func:`term_ids`). Documents are known by their
    position in the list."""

    def __init__(self, docs: Sequence[np.ndarray], vocab: dict[str, int],
                 k1: float = BM25_K1, b: float = BM25_B) -> None:
        self.k1, self.b, self.vocab = k1, b, vocab
        self.n_docs = n = len(docs)
        self.n_terms = v = max(len(vocab), 1)
        lengths = np.fromiter((len(d) for d in docs), np.int64, n)
        ids = np.concatenate(docs) if n else np.zeros(0, np.int64)
        # one key per (document, term) pair: how often it occurs is the term's frequency there
        pairs, counts = np.unique(np.repeat(np.arange(n, dtype=np.int64), lengths) * v + ids,
                                  return_counts=True)
        doc, term = np.divmod(pairs, v)
        tf = counts.astype(np.float64)
        df = np.bincount(term, minlength=v).astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        avgdl = float(lengths.mean()) if n and lengths.sum() > 0 else 1.0
        norm = k1 * (1.0 - b + b * lengths[doc].astype(np.float64) / avgdl)
        weight = idf[term] * tf * TF_SCALE / (tf + norm)
        self.matrix = sp.csr_matrix((weight.astype(np.float32), (term, doc)), shape=(v, n))
        self.matrix.sort_indices()

    @classmethod
    def from_texts(cls, texts: Sequence[str]) -> BM25Index:
        vocab: dict[str, int] = {}
        return cls([term_ids(analyze(t), vocab) for t in texts], vocab)

    def scores(self, terms: Sequence[str]) -> np.ndarray:
        """Every document's score for a query of ``terms`` (already analysed), (n_docs,)."""
        ids = [i for i in (self.vocab.get(t, -1) for t in terms) if 0 <= i < self.n_terms]
        if not ids:
            return np.zeros(self.n_docs, np.float64)
        m = self.matrix
        parts = [slice(m.indptr[i], m.indptr[i + 1]) for i in ids]
        docs = np.concatenate([m.indices[p] for p in parts])
        weights = np.concatenate([m.data[p] for p in parts]).astype(np.float64)
        return np.bincount(docs, weights=weights, minlength=self.n_docs)

    def top(self, text: str, k: int, keys: Sequence[str],
            keep: Callable[[int], bool] | None = None) -> list[tuple[int, float]]:
        """The best ``k`` documents for the query ``text`` as (position, score), best
        first: only those scoring above 0 and, given ``keep``, those it keeps. Equal scores
        are ordered by ``keys`` (the documents' ids), so the order is deterministic."""
        s = self.scores(analyze(text))
        hit = np.flatnonzero(s > 0)
        if keep is not None:
            hit = hit[np.fromiter((keep(int(j)) for j in hit), bool, len(hit))]
        if len(hit) > k:  # everything tied with the k-th best stays in, for the id order
            kth = np.partition(s[hit], len(hit) - k)[len(hit) - k]
            hit = hit[s[hit] >= kth]
        order = sorted(hit.tolist(), key=lambda j: (-s[j], keys[j]))[:k]
        return [(j, float(s[j])) for j in order]
