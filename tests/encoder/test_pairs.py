import random
from pathlib import Path

import pytest
from minidata import ANIMALS, PLACES

from encoder.pairs import (
    msrp_positives,
    reuters_articles,
    scifact_train_qrels,
    sick_entailment_pairs,
    span_pairs,
    sts_pairs,
    wordnet_glosses,
)
from encoder.sources import build_sources


def test_every_source_is_built_from_the_data_dir(data_dir: Path) -> None:
    names = {s.name for s in build_sources(data_dir)}
    assert names == {"multi30k-paraphrase", "sts-b", "sick-entailment", "msrp", "wordnet-gloss",
                     "gcide-definitions", "medquad", "nli-triples",
                     "scifact-train", "reuters-title-body", "reuters-spans",
                     "scifact-title-abstract", "scifact-spans", "python-docs-sections",
                     "lex-reuters", "lex-python-docs", "lex-scifact", "lex-medquad",
                     "lex-definitions"}


def test_sts_keeps_only_high_scores(data_dir: Path) -> None:
    pairs = sts_pairs(data_dir)
    assert len(pairs) == 40  # the 0.4-scored rows are dropped


def test_sick_msrp_wordnet_parsers(data_dir: Path) -> None:
    assert len(sick_entailment_pairs(data_dir)) == 30
    assert len(msrp_positives(data_dir)) == 30
    gloss = wordnet_glosses(data_dir)
    assert gloss[0] == ("dog", "a dog animal that lives in the park")


def test_scifact_uses_train_qrels_only(data_dir: Path) -> None:
    pairs = scifact_train_qrels(data_dir)
    dev = scifact_train_qrels(data_dir, dev=True)  # carved out of train, never trained on
    groups = [(a, p) for a in ANIMALS for p in PLACES]
    train_queries = {f"where does the {a} go {p}" for a, p in groups[0::2]}
    assert len(pairs) + len(dev) == 40 and dev and pairs
    assert {q for q, _ in pairs} | {q for q, _ in dev} == train_queries
    assert not {q for q, _ in pairs} & {q for q, _ in dev}


def test_reuters_title_body(data_dir: Path) -> None:
    arts = reuters_articles(data_dir)
    assert len(arts) == 20 and arts[0][0] == "Dog Prices Rise In The Park"
    assert "Reuter" not in arts[0][1]


def test_span_pairs_do_not_overlap() -> None:
    body = " ".join(f"w{i}" for i in range(300))
    for q, d in span_pairs([body] * 50, random.Random(0)):
        assert not set(q.split()) & set(d.split())
        assert 8 <= len(q.split()) <= 24 and len(d.split()) >= 16


def test_missing_data_dir_is_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no training pairs"):
        build_sources(tmp_path)
