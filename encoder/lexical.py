"""BM25-imitation pairs: teach the dense encoder what BM25 knows (SPAR, Chen et al. 2022,
"Salient Phrase Aware Dense Retrieval: Can a Dense Retriever Imitate a Sparse One?").

Pseudo-queries are cut from unlabelled passages (a few of a passage's content words, or a
short span of it); BM25 (bm25s: English stop words, Snowball stemmer, as our baseline)
ranks the passages of the same collection for each; its top hit is the positive and one
passage from its lower ranks the hard negative. The encoder then learns BM25's notion of
relevance (exact rare terms) beside the semantic pairs.
"""

from __future__ import annotations

import logging
import os
import random
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

Triple = tuple[str, str, str]  # (query, positive, hard negative)

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]*[A-Za-z0-9]|[0-9]+(?:\.[0-9]+)?")


def chunks(texts: Iterable[str], max_words: int = 100, min_words: int = 12) -> list[str]:
    """Passages of at most ``max_words`` words, cut from each text at word boundaries
    (the last piece joins the one before when it is shorter than ``min_words``)."""
    out = []
    for text in texts:
        words = text.split()
        pieces = [words[i:i + max_words] for i in range(0, len(words), max_words)]
        if len(pieces) > 1 and len(pieces[-1]) < min_words:
            last = pieces.pop()
            pieces[-1] += last
        out += [" ".join(p) for p in pieces if len(p) >= min_words]
    return out


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def pseudo_query(passage: str, rng: random.Random, stop: frozenset[str]) -> str:
    """A query cut from ``passage``: half the time 2–6 of its content words in their
    order (a keyword query), else a span of 4–12 words (a phrase)."""
    words = passage.split()
    if rng.random() < 0.5:
        content = [w for w in _WORD.findall(passage) if w.lower() not in stop and len(w) > 2]
        if len(content) >= 2:
            n = min(len(content), rng.randint(2, 6))
            picks = sorted(rng.sample(range(len(content)), n))
            return " ".join(content[i] for i in picks)
    n = min(len(words), rng.randint(4, 12))
    start = rng.randint(0, len(words) - n)
    return " ".join(words[start:start + n])


THREAD_MIN_DOCS = 4000  # below it one thread is faster (the GIL; see retrieve)
# The training pools' cap on pseudo-queries a distinct passage (``bm25_triples``'s
# ``per_passage``): the shared data's pools ask 0.3-3.1 a passage, so it never binds there;
# a small data directory's 20 passages were asked 80,000 near-duplicate queries (most of a
# minute of BM25 on 2 cores, in every test that built the training sources)
QUERIES_PER_PASSAGE = 5


def retrieve(retriever: Any, q_tokens: Any, k: int,
             threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``retriever.retrieve(q_tokens, k)``'s (top ids, scores). bm25s's own ``n_threads``
    hands its thread pool one task a query (``ThreadPoolExecutor.map`` ignores
    ``chunksize``), which on 2 cores cost more than the second thread gained. Here the
    queries are cut into one contiguous chunk a thread (``threads``, default every core),
    each retrieved on one thread, and only when the retriever holds :data:`THREAD_MIN_DOCS`
    passages or more: with fewer, a query's scoring is mostly Python under the GIL and one
    thread was faster (Reuters passages, 20,000 pseudo-queries, 2 cores). The rows are
    those of one ``retrieve`` over all the queries."""
    import bm25s

    ids, vocab = q_tokens.ids, q_tokens.vocab
    n = max(1, min(threads or os.cpu_count() or 1, len(ids) // 256))
    if n == 1 or retriever.scores["num_docs"] < THREAD_MIN_DOCS:
        top, scores = retriever.retrieve(q_tokens, k=k, show_progress=False, n_threads=0)
        return np.asarray(top), np.asarray(scores)
    step = -(-len(ids) // n)
    parts = [bm25s.tokenization.Tokenized(ids=ids[i:i + step], vocab=vocab)
             for i in range(0, len(ids), step)]
    with ThreadPoolExecutor(len(parts)) as pool:
        outs = list(pool.map(lambda part: retriever.retrieve(
            part, k=k, show_progress=False, n_threads=0), parts))
    return (np.concatenate([np.asarray(o[0]) for o in outs]),
            np.concatenate([np.asarray(o[1]) for o in outs]))


def bm25_triples(
    passages: list[str], n_queries: int, seed: int = 0, k: int = 30, neg_from: int = 3,
    encode: Callable[[list[str]], np.ndarray] | None = None, dense_weight: float = 0.5,
    per_passage: int | None = None,
) -> list[Triple]:
    """``n_queries`` (pseudo-query, BM25's top passage, a passage from BM25's ranks
    [``neg_from``, ``k``)) over ``passages``. Queries whose top hit scores nothing are
    dropped. With ``encode`` (unit vectors of texts: the encoder being adapted), the
    ranking is hybrid instead, BM25's and the encoder's top ``k`` fused as the service
    fuses them (convex, ``dense_weight``): the encoder then learns what the collection's
    hybrid search knows rather than BM25 alone, errors included. ``per_passage``: at most
    that many queries a distinct passage (fewer than ``n_queries`` on a small pool)."""
    import bm25s
    import Stemmer

    passages = list(dict.fromkeys(p for p in passages if p.strip()))
    if len(passages) <= neg_from:
        return []
    if per_passage is not None:
        n_queries = min(n_queries, per_passage * len(passages))
    rng = random.Random(seed)
    stop = _stopwords()
    stemmer = Stemmer.Stemmer("english")
    src = [rng.randrange(len(passages)) for _ in range(n_queries)]
    queries = [pseudo_query(passages[i], rng, stop) for i in src]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(passages, stopwords="en", stemmer=stemmer,
                                   show_progress=False), show_progress=False)
    q_tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    top, scores = retrieve(retriever, q_tokens, min(k, len(passages)))
    rows = [[int(j) for j in row] for row in np.asarray(top)]
    firsts = [float(sc[0]) for sc in np.asarray(scores)]
    if encode is not None:
        rows = _hybrid_rows(queries, passages, rows, np.asarray(scores), encode, k,
                            dense_weight)
    out = []
    for q, row, first in zip(queries, rows, firsts, strict=True):
        if first <= 0 or len(row) <= neg_from:
            continue
        neg = row[rng.randrange(neg_from, len(row))]
        out.append((q, passages[row[0]], passages[neg]))
    log.info("%s imitation: %d triples from %d passages",
             "hybrid" if encode is not None else "BM25", len(out), len(passages))
    return out


def _hybrid_rows(queries: list[str], passages: list[str], rows: list[list[int]],
                 scores: np.ndarray, encode: Callable[[list[str]], np.ndarray], k: int,
                 dense_weight: float, chunk: int = 1024) -> list[list[int]]:
    """Each query's top ``k`` passages by hybrid search: BM25's ``rows`` (with their
    ``scores``) and the encoder's own top ``k`` over all ``passages``, fused convexly."""
    from index.hybrid.fusion import fuse
    from index.store import Hit

    p_vecs = np.asarray(encode(passages), dtype=np.float32)
    out = []
    for s in range(0, len(queries), chunk):
        q_vecs = np.asarray(encode(queries[s:s + chunk]), dtype=np.float32)
        sims = q_vecs @ p_vecs.T
        best = np.argpartition(-sims, min(k, sims.shape[1] - 1), axis=1)[:, :k]
        for r in range(len(q_vecs)):
            cand = best[r][np.argsort(-sims[r, best[r]], kind="stable")]
            dense = [Hit(str(j), float(sims[r, j]), "", None, {}) for j in cand]
            lex = [Hit(str(j), float(sc), "", None, {})
                   for j, sc in zip(rows[s + r], scores[s + r], strict=True) if sc > 0]
            out.append([int(h.id) for h in fuse(dense, lex, k, "convex", dense_weight,
                                                 depth=k)])
    return out
