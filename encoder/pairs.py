"""Training pairs (query, positive) from the shared data directory.

Each source reads only training splits. A source is a list of pairs; the trainer draws
each batch from one source (homogeneous batches make in-batch negatives harder and keep a
batch from being solved by telling domains apart).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import html
import json
import logging
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

Pair = tuple[str, str]
Graded = tuple[str, str, float]  # two texts and their gold similarity in [0, 1]
MAX_WORDS = 160  # a text's words kept for training: more than the 192 tokens it reads


@dataclass
class PairSource:
    """A named list of (query, positive) pairs and its share of the training batches."""

    name: str
    pairs: list[Pair]
    weight: float
    retrieval: bool = False  # asymmetric query → document; hard negatives are mined here
    negatives: list[str] | None = None  # a fixed hard negative per pair ("" = none)


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


def stsb_graded(data: Path) -> list[Graded]:
    """STS-B train pairs with their score / 5 (the dev file is never read here)."""
    with open(data / "sts/stsbenchmark/sts-train.csv", encoding="utf-8") as f:
        return [(row[5], row[6], float(row[4]) / 5)
                for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if len(row) >= 7]


def sts_pairs(data: Path, min_score: float = 4.0) -> list[Pair]:
    """STS-B train pairs scored ≥ ``min_score`` (of 5)."""
    return [(a, b) for a, b, s in stsb_graded(data) if s >= min_score / 5]


def _sick_train(data: Path) -> list[dict[str, str]]:
    with open(data / "sts/sick2014/SICK_train.txt", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def sick_entailment_pairs(data: Path) -> list[Pair]:
    """SICK train pairs labelled ENTAILMENT."""
    return [(r["sentence_A"], r["sentence_B"]) for r in _sick_train(data)
            if r["entailment_judgment"] == "ENTAILMENT"]


def sick_graded(data: Path) -> list[Graded]:
    """SICK train pairs with their relatedness (1–5) mapped to [0, 1] (trial never read)."""
    return [(r["sentence_A"], r["sentence_B"], (float(r["relatedness_score"]) - 1) / 4)
            for r in _sick_train(data)]


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


def nli_triples(data: Path) -> list[tuple[str, str, str]]:
    """(premise, entailed hypothesis, contradicting hypothesis): supervised SimCSE's
    triples, the contradiction a hard negative."""
    with gzip.open(data / "nli/triples.csv.gz", "rt", encoding="utf-8") as f:
        return [(r["anchor"], r["entailment"], r["contradiction"]) for r in csv.DictReader(f)]


def in_dev(key: str, share: float = 0.1) -> bool:
    """Whether ``key`` falls in the dev split carved from a training source: a stable hash,
    the same on every machine and run."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) < share * 2**32


def medquad_pairs(data: Path, dev: bool = False) -> list[Pair]:
    """MedQuAD question → answer passage; questions whose focus is :func:`in_dev` are the
    dev split (a focus's questions all on one side, so dev asks about unseen topics)."""
    out = []
    with gzip.open(data / "qa/medquad/pairs.jsonl.gz", "rt", encoding="utf-8") as f:
        for row in map(json.loads, f):
            if in_dev(row.get("focus") or row["question"]) == dev:
                out.append((row["question"], " ".join(row["passage"].split())))
    return out


_B64 = {c: i for i, c in enumerate(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_GCIDE_DROP = re.compile(r"^\s*\[[^\]]*\]\s*$|^\s*Syn\.|^\s*Note:", re.M)


def _b64(s: str) -> int:
    n = 0
    for c in s:
        n = n * 64 + _B64[c]
    return n


def _gcide_senses(entry: str) -> list[str]:
    """The definitions of one GCIDE (dictd) entry: numbered senses, else the first
    paragraph after the headword, pronunciation, part of speech and etymology."""
    text = _GCIDE_DROP.sub("", entry)
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    if not paras:
        return []
    head = paras[0]
    cut = head.rfind("]", 0, 400) if "[" in head[:200] else -1
    if cut < 0:
        m = re.search(r"\b(?:n|v|a|adv|v\. t|v\. i|prep|conj|interj|pron)\.(?:\s|$)", head)
        cut = m.end() - 1 if m else -1
    first = head[cut + 1:] if cut >= 0 else ""
    senses = re.split(r"\n\s*\d+\.\s", "\n" + first) + [
        re.sub(r"^\s*\d+\.\s", "", p) for p in paras[1:] if re.match(r"^\s*\d+\.\s", p)]
    out = []
    for s in senses:
        s = re.sub(r"\(Zo[^)]*\)|\([A-Z][a-z]+\.\)|\{|\}|--\s*[A-Z][a-z]+\.?", "", s)
        s = re.sub(r"\[[^\]]*\]|\\\\[^\\\\]*\\\\", "", s)
        s = " ".join(s.split()).strip(" ;:,")
        if len(s.split()) >= 4 and not s.startswith(("See", "Same as", "Obs", '"')):
            out.append(s)
    return out


def gcide_definitions(data: Path, per_word: int = 2) -> list[Pair]:
    """Headword → definition from the GCIDE dictionary (up to ``per_word`` senses)."""
    folder = data / "text/gcide"
    with gzip.open(folder / "gcide.dict.dz", "rb") as f:
        raw = f.read()
    pairs, seen, offsets = [], set(), set()
    with open(folder / "gcide.index", encoding="utf-8", errors="replace") as f:
        for line in f:  # a phrase's line points at its head word's entry: first line only
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3 or parts[0].startswith("00") or not parts[0][:1].isalpha():
                continue
            start, length = _b64(parts[1]), _b64(parts[2])
            if start in offsets:
                continue
            offsets.add(start)
            entry = raw[start:start + length].decode("utf-8", errors="replace")
            for sense in _gcide_senses(entry)[:per_word]:
                if (parts[0].lower(), sense) not in seen:
                    seen.add((parts[0].lower(), sense))
                    pairs.append((parts[0], sense))
    return pairs


def beir_corpus(folder: Path) -> dict[str, dict[str, str]]:
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        return {d["_id"]: d for d in map(json.loads, f)}


def scifact_train_qrels(data: Path, dev: bool = False) -> list[Pair]:
    """SciFact claim → the abstract it cites (train qrels only); claims whose id is
    :func:`in_dev` are the dev split, the rest train."""
    from index.beir import doc_text  # here: importing index loads the stores (GPU runs lack them)

    folder = data / "beir/scifact"
    corpus = beir_corpus(folder)
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        queries = {q["_id"]: q["text"] for q in map(json.loads, f)}
    pairs = []
    with open(folder / "qrels/train.tsv", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if (int(row["score"]) > 0 and row["corpus-id"] in corpus
                    and in_dev(row["query-id"], 0.2) == dev):
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

