"""Every training source assembled, each with its batch share: the general pair sources of
:mod:`encoder.pairs`, the BM25-imitation sources over their texts (:mod:`encoder.lexical`)
and, for encoder v3, the technical ones (:mod:`encoder.technical`). Kept apart from the
pair sources themselves so that the technical sources can build on them without a
circle."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path

from encoder.pairs import (
    MAX_WORDS,
    Pair,
    PairSource,
    beir_corpus,
    gcide_definitions,
    medquad_pairs,
    msrp_positives,
    multi30k_paraphrases,
    nli_triples,
    python_doc_sections,
    reuters_articles,
    scifact_train_qrels,
    sick_entailment_pairs,
    span_pairs,
    sts_pairs,
    title_body_pairs,
    wordnet_glosses,
)
from encoder.technical import technical_sources

log = logging.getLogger(__name__)


def build_sources(data: str | Path, seed: int = 0, lexical: bool = True,
                  technical: bool = False, hold_out: list[Path] | None = None
                  ) -> list[PairSource]:
    """Every pair source with its batch share; missing folders are skipped with a warning.
    With ``lexical``, the BM25-imitation sources (:mod:`encoder.lexical`) too; with
    ``technical``, those of :mod:`encoder.technical` (v3), less ``hold_out``'s dev texts."""
    data = Path(data)
    rng = random.Random(seed)
    reuters: list[tuple[str, str]] = []
    scifact_docs: list[tuple[str, str]] = []
    pydocs: list[tuple[str, str]] = []
    try:
        reuters = reuters_articles(data)
    except OSError as e:
        log.warning("no Reuters articles: %s", e)
    try:
        corpus = beir_corpus(data / "beir/scifact")
        scifact_docs = [(d.get("title", ""), d.get("text", "")) for d in corpus.values()]
    except OSError as e:
        log.warning("no SciFact corpus: %s", e)
    try:
        pydocs = python_doc_sections(data)
    except OSError as e:
        log.warning("no Python docs: %s", e)
    semantic: list[tuple[str, float, bool, Callable[[], list[Pair]]]] = [
        ("multi30k-paraphrase", 0.08, False, lambda: multi30k_paraphrases(data, rng)),
        ("sts-b", 0.02, False, lambda: sts_pairs(data)),
        ("sick-entailment", 0.02, False, lambda: sick_entailment_pairs(data)),
        ("msrp", 0.02, False, lambda: msrp_positives(data)),
        ("wordnet-gloss", 0.04, True, lambda: wordnet_glosses(data)),
        ("gcide-definitions", 0.04, True, lambda: gcide_definitions(data)),
        ("scifact-train", 0.04, True, lambda: scifact_train_qrels(data)),
        ("medquad", 0.06, True, lambda: medquad_pairs(data)),
        ("reuters-title-body", 0.06, True, lambda: title_body_pairs(iter(reuters))),
        ("reuters-spans", 0.03, True, lambda: span_pairs([b for _, b in reuters], rng)),
        ("scifact-title-abstract", 0.04, True, lambda: title_body_pairs(iter(scifact_docs))),
        ("scifact-spans", 0.04, True, lambda: span_pairs([b for _, b in scifact_docs], rng, 2)),
        ("python-docs-sections", 0.02, True, lambda: title_body_pairs(iter(pydocs),
                                                                        min_words=12)),
    ]
    sources = []
    for name, weight, retrieval, build in semantic:
        try:
            pairs = [(q, d) for q, d in build() if q.strip() and d.strip()]
        except OSError as e:
            log.warning("skipping pair source %s: %s", name, e)
            continue
        if pairs:
            sources.append(PairSource(name, pairs, weight, retrieval))
    try:
        triples = nli_triples(data)
        sources.append(PairSource("nli-triples", [(a, e) for a, e, _ in triples], 0.04,
                                  False, [c for _, _, c in triples]))
    except OSError as e:
        log.warning("skipping pair source nli-triples: %s", e)
    if lexical:
        sources += _lexical_sources(sources, reuters, scifact_docs, pydocs, seed)
    if technical:
        sources += technical_sources(data, seed, hold_out, lexical)
    for s in sources:
        log.info("pair source %-24s %7d pairs, weight %.2f", s.name, len(s.pairs), s.weight)
    if not sources:
        raise FileNotFoundError(f"no training pairs found under {data}")
    return sources


def _lexical_sources(
    semantic: list[PairSource], reuters: list[tuple[str, str]],
    scifact_docs: list[tuple[str, str]], pydocs: list[tuple[str, str]], seed: int,
) -> list[PairSource]:
    """The BM25-imitation sources, one a collection (batches stay within a domain)."""
    from encoder.lexical import QUERIES_PER_PASSAGE, bm25_triples, chunks

    by_name = {s.name: s for s in semantic}
    defs = [d for name in ("wordnet-gloss", "gcide-definitions") if name in by_name
            for _, d in by_name[name].pairs]
    medquad = [d for _, d in by_name["medquad"].pairs] if "medquad" in by_name else []
    # passages of MAX_WORDS words: a text's first is the text as the semantic sources have
    # it (a bundle cuts every text there), so the bundle stores it once
    pools = [  # name, passages, pseudo-queries, batch share
        ("lex-reuters", chunks((b for _, b in reuters), MAX_WORDS), 80_000, 0.10),
        ("lex-python-docs", chunks((b for _, b in pydocs), MAX_WORDS), 30_000, 0.07),
        ("lex-scifact", chunks((b for _, b in scifact_docs), MAX_WORDS), 20_000, 0.08),
        ("lex-medquad", chunks(medquad, MAX_WORDS), 40_000, 0.08),
        ("lex-definitions", [d for d in defs if len(d.split()) >= 4], 60_000, 0.12),
    ]
    out = []
    for i, (name, passages, n, weight) in enumerate(pools):
        triples = (bm25_triples(passages, n, seed=seed + i, per_passage=QUERIES_PER_PASSAGE)
                   if passages else [])
        if triples:
            out.append(PairSource(name, [(q, p) for q, p, _ in triples], weight, True,
                                  [neg for _, _, neg in triples]))
    return out
