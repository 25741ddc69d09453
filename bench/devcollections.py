"""Extra labelled retrieval collections carved from the shared data, in BEIR layout
(``corpus.jsonl``, ``queries.jsonl``, ``qrels/dev.tsv``), for choosing search calibration
on dev data only: none of them is a public test, and no score on them is reported as one.

Usage: python bench/devcollections.py --data ../shared/data --out var/devcoll [--only a,b]

Each collection keeps at most 300 queries (sampled with ``random.Random(0)``) and about
6,000 documents: every relevant document of the kept queries, then the others in the order
of a hash of their id. Texts have their whitespace collapsed; empty ones are dropped; a
document text seen twice (ignoring case) is one document, and a query text seen twice is one
query with every relevant document of both. Queries equal to one of their relevant documents
(ignoring case) are dropped as trivial.

- ``scitldr``: a paper's first TLDR (in file order, all splits) → its abstract (id: paper_id).
- ``wikiqa``: WikiQA question → each Wikipedia sentence that answers it; corpus = every answer.
- ``foldoc``, ``jargon``: dictionary term → its definition (first 1,500 characters, without
  the term), entries whose definition has at least 8 words.
- ``manpages``: a man page's NAME-line summary → the first paragraph of its DESCRIPTION.
- ``tldr-pages``: one example description per page → the page, ``"command: description"``
  (id: platform/command); only examples whose text belongs to one page ("Display help" does
  not), one sampled per page.
- ``bible``: a King James verse → the same verse in the World English Bible (id: ref).
- ``twitter``: Twitter URL corpus test split, tweet → tweets labelled its paraphrase; corpus =
  every distinct second tweet of the test split (paraphrase or not).
- ``parasci``: ParaSCI arXiv sentence → its paraphrase.
- ``wikisplit``: WikiSplit long sentence → the same content split into shorter sentences.

Licences are the upstream ones, listed in the data README (``/work/shared/data/README.md``);
twitter-url is non-commercial, WikiQA research use only, ParaSCI states none. The carved
folders stay under ``var/`` and are never committed.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from encoder.devsets import _write  # noqa: E402
from encoder.technical import cut_definition  # noqa: E402
from encoder.technical import rows as _rows  # noqa: E402
from index.beir import load_beir  # noqa: E402

MAX_QUERIES = 300
MAX_DOCS = 6000

Carved = tuple[list[dict[str, str]], dict[str, str], list[tuple[str, str]]]
Pair = tuple[str, str, str]  # (query text, doc id or "" for a hash of the text, doc text)


def _norm(text: str) -> str:
    return " ".join(text.split())


def _hash(prefix: str, text: str) -> str:
    return prefix + hashlib.sha256(text.encode()).hexdigest()[:12]



def _carve(pairs: Iterable[Pair], extra: Iterable[tuple[str, str]] = ()) -> Carved:
    """Queries (deduplicated, sampled), their qrels, and a capped corpus around them."""
    docs: dict[str, str] = {}  # id → text, in first-seen order
    by_text: dict[str, str] = {}  # lower-cased text → id

    def add(did: str, text: str) -> str | None:
        text = _norm(text)
        if not text:
            return None
        key = text.lower()
        if key not in by_text:
            did = did or _hash("d", key)
            docs.setdefault(did, text)
            by_text[key] = did
        return by_text[key]

    groups: dict[str, tuple[str, list[str]]] = {}  # lower-cased query → (query, doc ids)
    for query, did, text in pairs:
        query, rel = _norm(query), add(did, text)
        if query and rel is not None:
            dids = groups.setdefault(query.lower(), (query, []))[1]
            if rel not in dids:
                dids.append(rel)
    for did, text in extra:
        add(did, text)
    cands = [(key, q, dids) for key, (q, dids) in groups.items()
             if not any(docs[d].lower() == key for d in dids)]
    keep = sorted(random.Random(0).sample(range(len(cands)), min(MAX_QUERIES, len(cands))))
    queries: dict[str, str] = {}
    qrels: list[tuple[str, str]] = []
    relevant: set[str] = set()
    for i in keep:
        key, query, dids = cands[i]
        qid = _hash("q", key)
        queries[qid] = query
        qrels += [(qid, d) for d in dids]
        relevant.update(dids)
    others = sorted((d for d in docs if d not in relevant), key=lambda d: _hash("", d))
    ids = [d for d in docs if d in relevant] + others[:max(0, MAX_DOCS - len(relevant))]
    return [{"_id": d, "title": "", "text": docs[d]} for d in ids], queries, qrels


def scitldr(data: Path) -> Carved:
    seen: set[str] = set()
    pairs = []
    for row in _rows(data, "pairs/scitldr"):
        pid = str(row["paper_id"])
        if pid not in seen:
            seen.add(pid)
            pairs.append((row["summary"], pid, row["abstract"]))
    return _carve(pairs)


def wikiqa(data: Path) -> Carved:
    return _carve((r["question"], "", r["answer"]) for r in _rows(data, "qa/wikiqa"))


def _definitions(data: Path, folder: str) -> Carved:
    pairs = []
    for row in _rows(data, folder):
        text = _norm(row["definition"])
        if len(text.split()) >= 8:
            text = cut_definition(text)
            pairs.append((row["term"], "", text))
    return _carve(pairs)


def manpages(data: Path) -> Carved:
    return _carve((r["summary"], f"{r['page']}.{r['section']}", r["description"])
                  for r in _rows(data, "pairs/manpages"))


def tldr_pages(data: Path) -> Carved:
    rows = list(_rows(data, "pairs/tldr-pages"))
    owners: dict[str, set[str]] = {}  # lower-cased example → pages it appears on
    pages: dict[str, tuple[str, list[str]]] = {}  # page id → (page text, its examples)
    for r in rows:
        pid, example = f"{r['platform']}/{r['command']}", _norm(r["example"])
        owners.setdefault(example.lower(), set()).add(pid)
        pages.setdefault(pid, (r["query"], []))[1].append(example)
    rng = random.Random(0)
    pairs = []
    for pid, (text, examples) in pages.items():
        unique = [e for e in examples if e and len(owners[e.lower()]) == 1]
        if unique:
            pairs.append((rng.choice(unique), pid, text))
    return _carve(pairs, [(pid, text) for pid, (text, _) in pages.items()])


def bible(data: Path) -> Carved:
    return _carve((r["kjv"], r["ref"], r["web"]) for r in _rows(data, "pairs/bible-kjv-web"))


def twitter(data: Path) -> Carved:
    rows = [r for r in _rows(data, "pairs/twitter-url") if r["split"] == "test"]
    return _carve(((r["text1"], "", r["text2"]) for r in rows if int(r["label"]) == 1),
                  [("", r["text2"]) for r in rows])


def parasci(data: Path) -> Carved:
    return _carve((r["text1"], "", r["text2"])
                  for r in _rows(data, "pairs/parasci") if r["subset"] == "arxiv")


def wikisplit(data: Path) -> Carved:
    return _carve((r["complex"], "", r["simple"]) for r in _rows(data, "pairs/wiki-split"))


COLLECTIONS: dict[str, Callable[[Path], Carved]] = {
    "scitldr": scitldr,
    "wikiqa": wikiqa,
    "foldoc": lambda data: _definitions(data, "defs/foldoc"),
    "jargon": lambda data: _definitions(data, "defs/jargon"),
    "manpages": manpages,
    "tldr-pages": tldr_pages,
    "bible": bible,
    "twitter": twitter,
    "parasci": parasci,
    "wikisplit": wikisplit,
}


def write_dev_collections(data: str | Path, out: str | Path,
                          only: list[str] | None = None) -> dict[str, Path]:
    """Write the collections (all, or those in ``only``) under ``out``; name → folder.

    A folder that already has ``qrels/dev.tsv`` is left as it is."""
    data, out = Path(data), Path(out)
    names = list(COLLECTIONS) if only is None else only
    unknown = [n for n in names if n not in COLLECTIONS]
    if unknown:
        raise ValueError(f"unknown collections {unknown}; valid: {', '.join(COLLECTIONS)}")
    folders: dict[str, Path] = {}
    for name in names:
        folder = out / name
        if not (folder / "qrels" / "dev.tsv").is_file():
            corpus, queries, qrels = COLLECTIONS[name](data)
            _write(folder, corpus, queries, qrels)
        folders[name] = folder
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the shared data folder")
    parser.add_argument("--out", required=True, help="where the collections are written")
    parser.add_argument("--only", default="", help="comma-separated collection names")
    args = parser.parse_args()
    only = [n.strip() for n in args.only.split(",") if n.strip()] or None
    folders = write_dev_collections(args.data, args.out, only)
    print(f"{'collection':<12} {'docs':>6} {'queries':>7} {'qrels':>6}  folder")
    for name, folder in folders.items():
        corpus, queries, qrels = load_beir(folder, "dev")
        n_qrels = sum(len(r) for r in qrels.values())
        print(f"{name:<12} {len(corpus):>6} {len(queries):>7} {n_qrels:>6}  {folder}")


if __name__ == "__main__":
    main()
