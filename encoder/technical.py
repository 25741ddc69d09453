"""Technical and paraphrase training sources (issue 40: encoder v3), read like those of
:mod:`encoder.pairs` and held apart from the dev collections the recipe is chosen on.

Labelled pairs, upstream *train* splits only where a source has splits:

- ``parasci-acl``: ParaSCI ACL paraphrases (train split; the arXiv subset is a dev
  collection), ``scitldr``: TLDR → abstract (train split), ``twitter-paraphrase``: tweet
  pairs labelled paraphrase (train split), ``wikisplit``: long sentence → its split (the
  ``tune`` file), ``wikiqa``: question → answer sentence (train split).
- ``bible-kjv-web``: a verse in two translations, ``tldr-pages``: an example's description →
  its page, ``manpages``: NAME-line summary → description, ``foldoc``: computing term → its
  definition.

Unlabelled technical text (SPAR-style, as :mod:`encoder.lexical`): spans of FOLDOC
definitions, man pages and SciTLDR abstracts (``technical-spans``), and a BM25-imitation pool
over the same passages (``lex-technical``).

Hold-out: every text of the dev queries and of their judged documents in the folders given
(``bench/devcollections.py`` writes them; BEIR layout, split ``dev``) is left out of every
source here, so the dev collections stay unseen. The Jargon File is never read, but FOLDOC
took in much of it: most Jargon dev queries are FOLDOC terms with near-identical
definitions, so hold it out too (``--hold-out .../jargon``) where it must stay unseen.
:func:`rows` and :func:`cut_definition` are shared with ``bench/devcollections.py``, so a
dev text and its training twin are cut alike and the hold-out finds it.
"""

from __future__ import annotations

import csv
import gzip
import json
import logging
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from encoder.pairs import MAX_WORDS, Pair, PairSource, span_pairs

log = logging.getLogger(__name__)

DEF_CHARS = 1500  # a definition's first characters, as the dev collections cut them


def norm(text: str) -> str:
    """The key a text is held out by: whitespace collapsed, lower case."""
    return " ".join(text.split()).lower()


def held_out(folders: list[Path]) -> set[str]:
    """The normalised texts of the dev queries and their judged documents in ``folders``."""
    out: set[str] = set()
    for folder in folders:
        qrels = folder / "qrels" / "dev.tsv"
        if not qrels.is_file():
            raise FileNotFoundError(f"{folder}: no qrels/dev.tsv to hold out")
        with open(qrels, encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        qids = {r["query-id"] for r in rows}
        dids = {r["corpus-id"] for r in rows}
        with open(folder / "queries.jsonl", encoding="utf-8") as f:
            out |= {norm(q["text"]) for q in map(json.loads, f) if q["_id"] in qids}
        with open(folder / "corpus.jsonl", encoding="utf-8") as f:
            out |= {norm(d["text"]) for d in map(json.loads, f) if d["_id"] in dids}
    return out


def rows(data: Path, folder: str) -> Iterator[dict[str, Any]]:
    """The JSON rows of ``DATA/FOLDER/pairs.jsonl.gz``."""
    with gzip.open(data / folder / "pairs.jsonl.gz", "rt", encoding="utf-8") as f:
        yield from map(json.loads, f)


def cut_definition(text: str) -> str:
    """A definition with its whitespace collapsed, cut at a word before ``DEF_CHARS``."""
    text = " ".join(text.split())
    return text[:DEF_CHARS].rsplit(" ", 1)[0] if len(text) > DEF_CHARS else text


def parasci(data: Path) -> list[Pair]:
    return [(r["text1"], r["text2"]) for r in rows(data, "pairs/parasci")
            if r["subset"] == "acl" and r["split"] == "train"]


def scitldr(data: Path) -> list[Pair]:
    return [(r["summary"], r["abstract"]) for r in rows(data, "pairs/scitldr")
            if r["split"] == "train"]


def twitter(data: Path) -> list[Pair]:
    return [(r["text1"], r["text2"]) for r in rows(data, "pairs/twitter-url")
            if r["split"] == "train" and int(r["label"]) == 1]


def wikisplit(data: Path) -> list[Pair]:
    return [(r["complex"], r["simple"]) for r in rows(data, "pairs/wiki-split")
            if "tune" in str(r.get("file", ""))]


def wikiqa(data: Path) -> list[Pair]:
    return [(r["question"], r["answer"]) for r in rows(data, "qa/wikiqa")
            if r["split"] == "train"]


def bible(data: Path) -> list[Pair]:
    return [(r["kjv"], r["web"]) for r in rows(data, "pairs/bible-kjv-web")]


def tldr_pages(data: Path) -> list[Pair]:
    return [(r["example"], r["query"]) for r in rows(data, "pairs/tldr-pages")
            if r["example"].strip()]


def manpages(data: Path) -> list[Pair]:
    return [(r["summary"], r["description"]) for r in rows(data, "pairs/manpages")]


def foldoc(data: Path) -> list[Pair]:
    return [(r["term"], cut_definition(r["definition"])) for r in rows(data, "defs/foldoc")
            if len(r["definition"].split()) >= 4]


# name, batch share, retrieval (hard negatives mined), reader
LABELLED: list[tuple[str, float, bool, Callable[[Path], list[Pair]]]] = [
    ("parasci-acl", 0.02, False, parasci),
    ("scitldr", 0.02, True, scitldr),
    ("twitter-paraphrase", 0.01, False, twitter),
    ("wikisplit", 0.01, False, wikisplit),
    ("wikiqa", 0.01, True, wikiqa),
    ("bible-kjv-web", 0.01, False, bible),
    ("tldr-pages", 0.03, True, tldr_pages),
    ("manpages", 0.01, True, manpages),
    ("foldoc", 0.04, True, foldoc),
]


def technical_sources(data: str | Path, seed: int = 0, hold_out: list[Path] | None = None,
                      lexical: bool = True) -> list[PairSource]:
    """The sources above (missing folders skipped with a warning), without any pair that
    touches a held-out text."""
    data = Path(data)
    rng = random.Random(seed + 40)
    held = held_out(hold_out or [])
    sources: list[PairSource] = []
    dropped = 0
    for name, weight, retrieval, read in LABELLED:
        try:
            pairs = read(data)
        except OSError as e:
            log.warning("skipping pair source %s: %s", name, e)
            continue
        kept = [(q, d) for q, d in pairs if q.strip() and d.strip()
                and norm(q) not in held and norm(d) not in held]
        dropped += len(pairs) - len(kept)
        if kept:
            sources.append(PairSource(name, kept, weight, retrieval))
    log.info("technical sources: %d pairs held out", dropped)
    by_name = {s.name: s for s in sources}
    passages = [d for name in ("foldoc", "manpages", "scitldr") if name in by_name
                for d in dict.fromkeys(d for _, d in by_name[name].pairs)]
    spans = span_pairs(passages, rng)
    if spans:
        sources.append(PairSource("technical-spans", spans, 0.03, True))
    if lexical and passages:
        from encoder.lexical import QUERIES_PER_PASSAGE, bm25_triples, chunks

        pages = by_name["tldr-pages"].pairs if "tldr-pages" in by_name else []
        pool = chunks(passages + [d for _, d in pages], MAX_WORDS)
        triples = bm25_triples(pool, 40_000, seed=seed + 40,  # it drops duplicates
                               per_passage=QUERIES_PER_PASSAGE)
        if triples:
            sources.append(PairSource("lex-technical", [(q, p) for q, p, _ in triples], 0.08,
                                      True, [n for _, _, n in triples]))
    return sources

