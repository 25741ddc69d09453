"""Pairs for adapting a trained encoder to a user's documents, without labels (issue 15,
item 5): ``qkv train-encoder --init models/encoder-default --corpus docs.jsonl``."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np

from encoder.pairs import MAX_WORDS, PairSource, span_pairs, title_body_pairs

TEACHER_QUERIES = 16_000  # hybrid imitation's pseudo-queries at most (a run uses fewer)


def read_corpus(path: str | Path) -> list[tuple[str, str]]:
    """(title, text) of each document of a user's corpus: JSONL with ``text`` (and an
    optional ``title``; BEIR's corpus.jsonl and ``qkv index``'s input are such), else a
    text file of one document a line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    docs = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if ".jsonl" in path.name:
                row = json.loads(line)
                if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                    raise ValueError(f"{path}:{n}: not a JSON object with a string 'text'")
                docs.append((str(row.get("title") or ""), row["text"]))
            else:
                docs.append(("", line.strip()))
    if not docs:
        raise ValueError(f"{path}: no documents")
    return docs


def corpus_sources(path: str | Path, seed: int = 0, n_queries: int | None = None,
                   teacher: str | Path | None = None) -> list[PairSource]:
    """Pairs for adapting the encoder to a user's documents, without labels (issue 15,
    item 5): BM25 imitation over the corpus (the lexical half) and, as the semantic half,
    title → text and two spans of one document. With ``teacher`` (a checkpoint: the
    encoder being adapted), the lexical half imitates hybrid search (BM25 fused with the
    teacher, at the teacher's hybrid weight) instead of BM25 alone, over at most
    :data:`TEACHER_QUERIES` pseudo-queries (each is encoded)."""
    from encoder.lexical import bm25_triples, chunks

    docs = read_corpus(path)
    rng = random.Random(seed)
    texts = [f"{t}. {b}" if t else b for t, b in docs]
    passages = chunks(texts, MAX_WORDS)
    n = n_queries or max(2_000, 4 * len(passages))
    if teacher is None:
        triples = bm25_triples(passages, n, seed=seed)
    else:
        from index.hybrid.fusion import model_dense_weight

        triples = bm25_triples(passages, min(n, TEACHER_QUERIES), seed=seed,
                               encode=encoder_fn(Path(teacher)),
                               dense_weight=model_dense_weight(teacher))
    sources = [PairSource("lex-corpus", [(q, p) for q, p, _ in triples], 0.5, True,
                          [neg for _, _, neg in triples]),
               PairSource("corpus-spans", span_pairs(texts, rng, 2), 0.3, True)]
    titled = title_body_pairs(iter(docs))
    if titled:
        sources.append(PairSource("corpus-title-body", titled, 0.2, True))
    return [s for s in sources if s.pairs]


def encoder_fn(path: Path) -> Callable[[list[str]], np.ndarray]:
    """Unit vectors of texts by the checkpoint at ``path``, as served on this machine."""
    from encoder.text_encoder import load

    enc = load(path)
    return lambda texts: np.asarray(enc.encode(texts, batch_size=64), dtype=np.float32)
