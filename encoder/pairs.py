"""Training pairs (query, positive) from the shared data directory.

Each source reads only training splits. A source is a list of pairs; the trainer draws
each batch from one source (homogeneous batches make in-batch negatives harder and keep a
batch from being solved by telling domains apart).
"""

from __future__ import annotations

import csv
import gzip
import html
import json
import logging
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from index.beir import doc_text

log = logging.getLogger(__name__)

Pair = tuple[str, str]


@dataclass
class PairSource:
    """A named list of (query, positive) pairs and its share of the training batches."""

    name: str
    pairs: list[Pair]
    weight: float
    retrieval: bool = False  # asymmetric query → document; hard negatives are mined here


def _gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def multi30k_paraphrases(data: Path, rng: random.Random) -> list[Pair]:
    """Two different captions of the same image (Multi30k task2 train, 5 per image)."""
    files = [_gz_lines(data / "multi30k/task2" / f"train.{i}.en.gz") for i in range(1, 6)]
    pairs = []
    for caps in zip(*files, strict=True):
        caps_ = [c for c in caps if c.strip()]
        rng.shuffle(caps_)
        pairs += [(caps_[i], caps_[i + 1]) for i in range(0, len(caps_) - 1, 2)]
    return pairs


def sts_pairs(data: Path, min_score: float = 4.0) -> list[Pair]:
    """STS-B train pairs scored ≥ ``min_score`` (of 5)."""
    pairs = []
    with open(data / "sts/stsbenchmark/sts-train.csv", encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) >= 7 and float(row[4]) >= min_score:
                pairs.append((row[5], row[6]))
    return pairs


def sick_entailment_pairs(data: Path) -> list[Pair]:
    """SICK train pairs labelled ENTAILMENT."""
    pairs = []
    with open(data / "sts/sick2014/SICK_train.txt", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row["entailment_judgment"] == "ENTAILMENT":
                pairs.append((row["sentence_A"], row["sentence_B"]))
    return pairs


def msrp_positives(data: Path) -> list[Pair]:
    """MSRP train and val pairs labelled paraphrase (the test file is never read)."""
    pairs = []
    for split in ("train", "val"):
        path = data / f"pairs/msrp/msr-para-{split}.tsv"
        if not path.exists():
            continue
        with open(path, encoding="utf-8-sig") as f:
            for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                if len(row) >= 5 and row[0] == "1":
                    pairs.append((row[3], row[4]))
    return pairs


def wordnet_glosses(data: Path) -> list[Pair]:
    """Lemma(s) → gloss, and an example sentence → gloss, from WordNet 3.0 data files."""
    pairs = []
    for pos in ("noun", "verb", "adj", "adv"):
        with open(data / f"text/wordnet/data.{pos}", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue
                head, gloss = line.split("|", 1)
                parts = head.split()
                n_words = int(parts[3], 16)
                lemmas = [w.replace("_", " ") for w in parts[4 : 4 + 2 * n_words : 2]]
                lemmas = [re.sub(r"\(.*\)$", "", w) for w in lemmas]
                pieces = [p.strip() for p in gloss.split(";")]
                definition = "; ".join(p for p in pieces if not p.startswith('"'))
                if definition:
                    pairs.append((", ".join(lemmas[:3]), definition))
    return pairs


def _beir_corpus(folder: Path) -> dict[str, dict[str, str]]:
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        return {d["_id"]: d for d in map(json.loads, f)}


def scifact_train_qrels(data: Path) -> list[Pair]:
    """SciFact claim → the abstract it cites (train qrels only)."""
    folder = data / "beir/scifact"
    corpus = _beir_corpus(folder)
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        queries = {q["_id"]: q["text"] for q in map(json.loads, f)}
    pairs = []
    with open(folder / "qrels/train.tsv", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if int(row["score"]) > 0 and row["corpus-id"] in corpus:
                pairs.append((queries[row["query-id"]], doc_text(corpus[row["corpus-id"]])))
    return pairs


def title_body_pairs(docs: Iterator[tuple[str, str]], min_words: int = 20) -> list[Pair]:
    """Title → body of the same document."""
    return [(t, b) for t, b in docs if t.strip() and len(b.split()) >= min_words]


def span_pairs(bodies: list[str], rng: random.Random, per_doc: int = 1) -> list[Pair]:
    """Two non-overlapping spans of the same document (Contriever's cropping, simplified):
    a short span (a sentence-sized query) and a longer one (a passage)."""
    pairs = []
    for body in bodies:
        words = body.split()
        if len(words) < 40:
            continue
        for _ in range(per_doc):
            q_len, d_len = rng.randint(8, 24), rng.randint(32, 96)
            if rng.random() < 0.5:  # query before passage, or after
                q0 = rng.randint(0, max(0, len(words) - q_len - 16))
                rest = words[q0 + q_len :]
            else:
                q0 = rng.randint(min(16, len(words) - q_len), len(words) - q_len)
                rest = words[:q0]
            d0 = rng.randint(0, max(0, len(rest) - d_len))
            passage = rest[d0 : d0 + d_len]
            if len(passage) >= 16:
                pairs.append((" ".join(words[q0 : q0 + q_len]), " ".join(passage)))
    return pairs


_REUTERS = re.compile(r"<REUTERS.*?</REUTERS>", re.S)
_TAG = {k: re.compile(rf"<{k}>(.*?)</{k}>", re.S) for k in ("TITLE", "BODY")}


def reuters_articles(data: Path) -> list[tuple[str, str]]:
    """(title, body) of Reuters-21578 articles that have both."""
    out = []
    for path in sorted((data / "text/reuters21578").glob("reut2-*.sgm")):
        raw = path.read_text(encoding="latin-1")
        for art in _REUTERS.findall(raw):
            t, b = _TAG["TITLE"].search(art), _TAG["BODY"].search(art)
            if t and b:
                body = html.unescape(b.group(1)).replace("\x03", "")
                body = re.sub(r"\s*Reuter\s*$", "", body.strip())
                out.append((html.unescape(t.group(1)).strip().title(), " ".join(body.split())))
    return out


def python_doc_sections(data: Path) -> list[tuple[str, str]]:
    """(section title, section text) from the Python docs reST sources."""
    out = []
    underline = re.compile(r"^([=\-~^\"'*#+])\1{3,}\s*$")
    for path in sorted((data / "text/python-docs").rglob("*.txt")):
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        title, body = "", []  # type: tuple[str, list[str]]
        for i, line in enumerate(lines):
            if underline.match(line) and i > 0 and lines[i - 1].strip():
                if title and body:
                    out.append((title, " ".join(" ".join(body).split())))
                title, body = lines[i - 1].strip(), []
            elif i + 1 < len(lines) and underline.match(lines[i + 1]):
                continue
            elif line.strip() and not line.lstrip().startswith(".."):
                body.append(line.strip())
        if title and body:
            out.append((title, " ".join(" ".join(body).split())))
    return out


def build_sources(data: str | Path, seed: int = 0) -> list[PairSource]:
    """Every pair source with its batch share; missing folders are skipped with a warning."""
    data = Path(data)
    rng = random.Random(seed)
    reuters: list[tuple[str, str]] = []
    scifact_docs: list[tuple[str, str]] = []
    builders: list[tuple[str, float, bool, Callable[[], list[Pair]]]] = [
        ("multi30k-paraphrase", 0.16, False, lambda: multi30k_paraphrases(data, rng)),
        ("sts-b", 0.04, False, lambda: sts_pairs(data)),
        ("sick-entailment", 0.04, False, lambda: sick_entailment_pairs(data)),
        ("msrp", 0.04, False, lambda: msrp_positives(data)),
        ("wordnet-gloss", 0.10, True, lambda: wordnet_glosses(data)),
        ("scifact-train", 0.12, True, lambda: scifact_train_qrels(data)),
        ("reuters-title-body", 0.14, True, lambda: title_body_pairs(iter(reuters))),
        ("reuters-spans", 0.06, True, lambda: span_pairs([b for _, b in reuters], rng)),
        ("scifact-title-abstract", 0.12, True, lambda: title_body_pairs(iter(scifact_docs))),
        ("scifact-spans", 0.10, True, lambda: span_pairs([b for _, b in scifact_docs], rng, 2)),
        ("python-docs-sections", 0.04, True, lambda: title_body_pairs(
            iter(python_doc_sections(data)), min_words=12)),
    ]
    try:
        reuters = reuters_articles(data)
    except OSError as e:
        log.warning("no Reuters articles: %s", e)
    try:
        corpus = _beir_corpus(data / "beir/scifact")
        scifact_docs = [(d.get("title", ""), d.get("text", "")) for d in corpus.values()]
    except OSError as e:
        log.warning("no SciFact corpus: %s", e)
    sources = []
    for name, weight, retrieval, build in builders:
        try:
            pairs = [(q, d) for q, d in build() if q.strip() and d.strip()]
        except OSError as e:
            log.warning("skipping pair source %s: %s", name, e)
            continue
        if pairs:
            sources.append(PairSource(name, pairs, weight, retrieval))
            log.info("pair source %-24s %7d pairs, weight %.2f", name, len(pairs), weight)
    if not sources:
        raise FileNotFoundError(f"no training pairs found under {data}")
    return sources


def tokenizer_corpus(sources: list[PairSource], limit_chars: int = 40_000_000) -> Iterator[str]:
    """Texts to train the BPE on: both sides of every pair, up to ``limit_chars``."""
    total = 0
    for src in sources:
        for q, d in src.pairs:
            total += len(q) + len(d)
            if total > limit_chars:
                return
            yield q
            yield d
