"""The reranker's training examples from the shared data (``qkv reranker-pairs``): (query,
relevant passage, negatives) as JSON lines, for :mod:`encoder.rerank_train`.

Sources: the labelled retrieval pairs the encoder trains on (MedQuAD and SciFact train
qrels on their train sides, and :data:`encoder.technical.LABELLED`: SciTLDR, WikiQA,
tldr-pages, manual pages, FOLDOC, ParaSCI, tweets, WikiSplit, Bible translations), titles
to bodies (Reuters, the Python docs), and sentence pairs (Multi30k train captions of one
image, STS-B train pairs scored 4 or more, SICK train entailments, MSRP paraphrases, NLI
entailments with their contradiction as a negative). Every pair that touches a text of a
held-out folder (the dev collections, :func:`encoder.technical.held_out`) is dropped, so
what the reranker is chosen on stays unseen. At most ``per_source`` queries a source.

Negatives, from the source's own passages: BM25's (:class:`index.hybrid.bm25.BM25Index`)
and the encoder's (cosine) top :data:`DEPTH`, less the query's positives and the first
:data:`SKIP` of the rest on each side (most likely unjudged positives), sampled.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from encoder.pairs import (
    Pair,
    medquad_pairs,
    msrp_positives,
    multi30k_paraphrases,
    nli_triples,
    python_doc_sections,
    reuters_articles,
    scifact_train_qrels,
    sick_entailment_pairs,
    sts_pairs,
    title_body_pairs,
)
from encoder.technical import LABELLED, held_out, norm

log = logging.getLogger(__name__)
DEPTH, SKIP = 30, 2
CHARS = 1200  # a text's first characters (about 250 tokens: more than a pair holds)
BM25_NEGATIVES, DENSE_NEGATIVES = 4, 3


def sources(data: Path, seed: int = 0) -> dict[str, Callable[[], list[Pair]]]:
    """Each source's reader (see the module doc)."""
    data = Path(data)
    out: dict[str, Callable[[], list[Pair]]] = {
        "medquad": lambda: medquad_pairs(data),
        "scifact-train": lambda: scifact_train_qrels(data),
        "reuters": lambda: title_body_pairs(iter(reuters_articles(data))),
        "python-docs": lambda: title_body_pairs(iter(python_doc_sections(data)), min_words=12),
        "multi30k-train": lambda: multi30k_paraphrases(data, random.Random(seed)),
        "stsb-train": lambda: sts_pairs(data),
        "sick-train": lambda: sick_entailment_pairs(data),
        "msrp": lambda: msrp_positives(data),
    }
    for name, _, _, read in LABELLED:
        out[name] = (lambda r: lambda: r(data))(read)
    return out


def _mine(queries: list[str], pool: list[str], positives: list[set[int]], scores: Any,
          k: int, rng: random.Random) -> list[list[int]]:
    """Per query, ``k`` of the pool's best by ``scores(query index) -> ranked positions``,
    less its positives and the first SKIP of the rest."""
    out = []
    for i in range(len(queries)):
        ranked = [j for j in scores(i) if j not in positives[i]][SKIP:]
        out.append(rng.sample(ranked, min(k, len(ranked))))
    return out


def examples_of(pairs: list[Pair], encode: Callable[[list[str]], np.ndarray] | None,
                rng: random.Random, fixed: dict[tuple[str, str], list[str]] | None = None
                ) -> list[dict[str, Any]]:
    """One example per query of ``pairs`` (its first positive), with mined negatives."""
    from index.hybrid.bm25 import BM25Index

    pool = list(dict.fromkeys(d for _, d in pairs))
    at = {d: j for j, d in enumerate(pool)}
    first: dict[str, int] = {}
    positives: dict[str, set[int]] = {}
    for q, d in pairs:
        first.setdefault(q, at[d])
        positives.setdefault(q, set()).add(at[d])
    queries = list(first)
    pos = [positives[q] for q in queries]
    keys = [str(j) for j in range(len(pool))]
    bm25 = BM25Index.from_texts(pool)
    negs = _mine(queries, pool, pos, lambda i: [j for j, _ in bm25.top(queries[i], DEPTH, keys)],
                 BM25_NEGATIVES, rng)
    if encode is not None and len(pool) > DEPTH:
        xb, xq = encode(pool), encode(queries)
        dense = _mine(queries, pool, pos,
                      lambda i: np.argsort(-(xb @ xq[i]), kind="stable")[:DEPTH].tolist(),
                      DENSE_NEGATIVES, rng)
        negs = [list(dict.fromkeys(a + b)) for a, b in zip(negs, dense, strict=True)]
    out = []
    for q, n in zip(queries, negs, strict=True):
        d = pool[first[q]]
        extra = (fixed or {}).get((q, d), [])
        out.append({"query": q[:CHARS], "positive": d[:CHARS],
                    "negatives": [t[:CHARS] for t in extra + [pool[j] for j in n]]})
    return out


def build(data: Path, out: Path, hold_out: list[Path], per_source: int = 4000,
          encode: Callable[[list[str]], np.ndarray] | None = None, seed: int = 0,
          only: list[str] | None = None) -> dict[str, int]:
    """Write ``out`` (JSON lines, shuffled); the examples of each source."""
    rng = random.Random(seed)
    held = held_out(hold_out)
    rows: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    readers = sources(data, seed)
    triples: list[tuple[str, str, str]] = []  # NLI's, read once: pairs and contradictions

    def nli() -> list[Pair]:
        triples[:] = nli_triples(Path(data))
        return [(a, b) for a, b, _ in triples]
    readers["nli"] = nli
    for name, read in readers.items():
        if only and name not in only:
            continue
        try:
            pairs = read()
        except OSError as e:
            log.warning("skipping %s: %s", name, e)
            continue
        pairs = [(q, d) for q, d in pairs if q.strip() and d.strip()
                 and norm(q) not in held and norm(d) not in held]
        queries = list(dict.fromkeys(q for q, _ in pairs))
        rng.shuffle(queries)
        keep = set(queries[:per_source])
        pairs = [(q, d) for q, d in pairs if q in keep]
        fixed = None
        if name == "nli":  # the contradiction first among the negatives
            fixed = {(a, b): [c] for a, b, c in triples if a in keep}
        made = examples_of(pairs, encode, rng, fixed) if pairs else []
        for r in made:
            r["source"] = name
        rows += made
        counts[name] = len(made)
        log.info("%s: %d examples", name, len(made))
    rng.shuffle(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    tmp.replace(out)
    return counts
