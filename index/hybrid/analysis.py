"""English text analysis for BM25, the same on every store and in the evaluation.

``analyze(text)`` is what bm25s does with ``stopwords="en"`` and PyStemmer's English
Snowball stemmer (the reference ``qkv eval-encoder`` prints): lower-case, words of two or
more word characters (``(?u)\\b\\w\\w+\\b``, scikit-learn's pattern), Lucene's 33 English
stop words dropped, each word stemmed. Milvus' analyzers do not stem (Lite ignores the
stemmer filter), so a hybrid Milvus collection indexes ``analyzed(text)`` (the stems joined
by spaces) in a hidden field, and BM25 queries are analysed the same way; the FAISS store
indexes the same tokens in process. ``BM25_K1``/``BM25_B`` are bm25s' defaults, used by
both backends; both score as Milvus does, which is bm25s' score times (k1 + 1): the same
ranking.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import Any

# Lucene's English stop words (bm25s' "en" list).
STOP_WORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is",
    "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there",
    "these", "they", "this", "to", "was", "will", "with"))
BM25_K1 = 1.5
BM25_B = 0.75
_WORD = re.compile(r"(?u)\b\w\w+\b")
_local = threading.local()  # PyStemmer's Stemmer is not thread-safe: one per thread


def _stemmer() -> Any:
    st = getattr(_local, "stemmer", None)
    if st is None:
        import Stemmer  # PyStemmer

        st = _local.stemmer = Stemmer.Stemmer("english")
    return st


def analyze(text: str) -> list[str]:
    """The BM25 terms of ``text``: lower-cased words without stop words, stemmed."""
    words = [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]
    return [_stem_word(w) for w in words]


@lru_cache(maxsize=200_000)
def _stem_word(word: str) -> str:
    return str(_stemmer().stemWord(word))


def analyzed(text: str) -> str:
    """``analyze(text)`` as one string, stems separated by single spaces."""
    return " ".join(analyze(text))


def fit_terms(terms: str, limit: int) -> str:
    """Analysed ``terms`` (joined by spaces) cut at a space to at most ``limit`` bytes of
    UTF-8 (a store's text field)."""
    raw = terms.encode()
    if len(raw) <= limit:
        return terms
    cut = raw[:limit + 1].decode(errors="ignore")
    return cut.rsplit(" ", 1)[0] if " " in cut else raw[:limit].decode(errors="ignore")
