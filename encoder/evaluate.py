"""Evaluation: retrieval on BEIR-layout folders (with a BM25 baseline) and STS Spearman.

The BEIR reader and the nDCG/Recall scoring live with the index (``index.beir``): the
store's own search modes are scored by the same functions (``index.evaluate``)."""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path

import bm25s
import faiss
import numpy as np
from scipy.stats import spearmanr

from encoder.mining import Embedder
from index.beir import load_beir, score_run

__all__ = ["bm25_run", "dense_run", "evaluate_beir", "evaluate_sts", "load_beir", "load_sts",
           "score_run"]

log = logging.getLogger(__name__)

def dense_run(enc: Embedder, corpus: dict[str, str], queries: dict[str, str], k: int = 100
              ) -> dict[str, dict[str, float]]:
    """Exact inner-product search (FAISS flat) of every query over the corpus."""
    doc_ids, q_ids = list(corpus), list(queries)
    xb = enc.encode([corpus[i] for i in doc_ids], batch_size=64)
    xq = enc.encode([queries[i] for i in q_ids], batch_size=64)
    index = faiss.IndexFlatIP(xb.shape[1])
    index.add(xb)
    D, I = index.search(xq, min(k, len(doc_ids)))
    return {q: {doc_ids[j]: float(s) for s, j in zip(D[r], I[r], strict=True) if j >= 0}
            for r, q in enumerate(q_ids)}


def bm25_run(corpus: dict[str, str], queries: dict[str, str], k: int = 100
             ) -> dict[str, dict[str, float]]:
    """BM25 (bm25s, English stop words, Snowball stemmer) on the same corpus and queries."""
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    doc_ids, q_ids = list(corpus), list(queries)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([corpus[i] for i in doc_ids], stopwords="en",
                                   stemmer=stemmer, show_progress=False), show_progress=False)
    q_tokens = bm25s.tokenize([queries[i] for i in q_ids], stopwords="en", stemmer=stemmer,
                              show_progress=False)
    docs, scores = retriever.retrieve(q_tokens, k=min(k, len(doc_ids)), show_progress=False)
    return {q: {doc_ids[int(j)]: float(s) for j, s in zip(docs[r], scores[r], strict=True)}
            for r, q in enumerate(q_ids)}


def evaluate_beir(enc: Embedder, folder: str | Path, split: str = "test", bm25: bool = True
                  ) -> dict[str, object]:
    """Dense (and BM25) nDCG@10 / Recall@100 on one BEIR folder and split."""
    corpus, queries, qrels = load_beir(folder, split)
    t0 = time.time()
    report: dict[str, object] = {"queries": len(queries), "docs": len(corpus)}
    report["dense"] = score_run(dense_run(enc, corpus, queries), qrels)
    report["dense_seconds"] = round(time.time() - t0, 1)
    if bm25:
        report["bm25"] = score_run(bm25_run(corpus, queries), qrels)
    log.info("%s/%s: %s", Path(folder).name, split, report)
    return report


def load_sts(path: str | Path) -> tuple[list[str], list[str], np.ndarray]:
    """STS-B format: tab-separated, score in column 5, sentences in columns 6 and 7."""
    a, b, gold = [], [], []
    with open(path, encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) >= 7:
                a.append(row[5])
                b.append(row[6])
                gold.append(float(row[4]))
    if not gold:
        raise ValueError(f"{path}: no STS-B-format rows (score in column 5, texts in 6 and 7)")
    return a, b, np.array(gold)


def evaluate_sts(enc: Embedder, path: str | Path) -> dict[str, float]:
    """Spearman correlation (×1, not ×100) between cosine similarity and the gold scores."""
    a, b, gold = load_sts(path)
    ea, eb = enc.encode(a), enc.encode(b)
    cos = (ea * eb).sum(axis=1)
    rho = spearmanr(cos, gold).statistic
    return {"pairs": len(gold), "spearman": round(float(rho), 4)}
