"""Adapting a trained encoder to a user's documents (issue 15, item 5)."""

from pathlib import Path

import pytest
from minidata import write_corpus
from tokenizers import Tokenizer

import encoder
from encoder.adapt import corpus_sources, read_corpus
from encoder.train import TrainConfig, train


def test_read_corpus_jsonl_and_lines(tmp_path: Path) -> None:
    docs = read_corpus(write_corpus(tmp_path))
    assert len(docs) == 30 and docs[0][0] == "copper report 0"
    (tmp_path / "docs.txt").write_text("first document\n\nsecond one\n")
    assert read_corpus(tmp_path / "docs.txt") == [("", "first document"), ("", "second one")]
    (tmp_path / "bad.jsonl").write_text('{"title": "no text"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_corpus(tmp_path / "bad.jsonl")


def test_corpus_sources_are_unlabelled_pairs(tmp_path: Path) -> None:
    sources = {s.name: s for s in corpus_sources(write_corpus(tmp_path), n_queries=200)}
    assert set(sources) == {"lex-corpus", "corpus-spans", "corpus-title-body"}
    lex = sources["lex-corpus"]
    assert lex.negatives is not None and len(lex.negatives) == len(lex.pairs) > 100


def test_corpus_sources_can_imitate_hybrid_search(tiny_encoder_dir: Path,
                                                  tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path)
    plain = {s.name: s for s in corpus_sources(corpus, n_queries=200)}
    hybrid = {s.name: s for s in corpus_sources(corpus, n_queries=200,
                                                teacher=tiny_encoder_dir)}
    assert set(hybrid) == set(plain)
    lex, base = hybrid["lex-corpus"], plain["lex-corpus"]
    assert len(lex.pairs) == len(base.pairs) > 100  # the same pseudo-queries
    assert [q for q, _ in lex.pairs] == [q for q, _ in base.pairs]
    assert lex.negatives is not None
    assert all(n != p for (_, p), n in zip(lex.pairs, lex.negatives, strict=True))


def test_adapting_goes_on_from_the_checkpoint(tiny_encoder_dir: Path, tmp_path: Path) -> None:
    cfg = TrainConfig(data_dir="", out_dir=str(tmp_path / "run"), steps=4, batch_size=8,
                      warmup_steps=1, device="cpu", hard_negatives=True, mine_at=1.0,
                      init_from=str(tiny_encoder_dir), corpus=str(write_corpus(tmp_path)))
    out = train(cfg)
    base, adapted = encoder.load(tiny_encoder_dir), encoder.load(out)
    assert adapted.config.d_model == base.config.d_model  # the checkpoint's architecture
    tok = Tokenizer.from_file(str(tiny_encoder_dir / "tokenizer.json"))
    assert adapted.tokenizer.get_vocab() == tok.get_vocab()  # and its tokenizer
    assert adapted.fingerprint != base.fingerprint  # trained on
