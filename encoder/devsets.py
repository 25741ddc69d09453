"""The dev sets the encoder is chosen on (issue 15: never on test), carved from training
sources by :func:`encoder.pairs.in_dev` and written in BEIR layout, so that ``qkv
eval-encoder --split dev`` and ``bench/encoder_dev.py`` score them like any collection:

- ``scifact-dev``: the SciFact *train* claims whose id falls in dev (20 %), over the whole
  SciFact corpus; those claims are left out of training.
- ``medquad-dev``: MedQuAD questions whose focus falls in dev (10 %), over every MedQuAD
  passage; those questions and passages are left out of training.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import shutil
from pathlib import Path

from encoder.pairs import in_dev


def _write(folder: Path, corpus: list[dict[str, str]], queries: dict[str, str],
           qrels: list[tuple[str, str]]) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d in corpus:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with open(folder / "qrels" / "dev.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, did in qrels:
            f.write(f"{qid}\t{did}\t1\n")
    return folder


def scifact_dev(data: Path, out: Path) -> Path:
    src = data / "beir/scifact"
    folder = out / "scifact-dev"
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "corpus.jsonl", folder / "corpus.jsonl")
    shutil.copyfile(src / "queries.jsonl", folder / "queries.jsonl")
    with open(src / "qrels/train.tsv", encoding="utf-8") as f, \
            open(folder / "qrels/dev.tsv", "w", encoding="utf-8") as g:
        g.write("query-id\tcorpus-id\tscore\n")
        for row in csv.DictReader(f, delimiter="\t"):
            if int(row["score"]) > 0 and in_dev(row["query-id"], 0.2):
                g.write(f"{row['query-id']}\t{row['corpus-id']}\t1\n")
    return folder


def medquad_dev(data: Path, out: Path) -> Path:
    corpus: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels = []
    with gzip.open(data / "qa/medquad/pairs.jsonl.gz", "rt", encoding="utf-8") as f:
        for row in map(json.loads, f):
            passage = " ".join(row["passage"].split())
            did = "p" + hashlib.sha256(passage.encode()).hexdigest()[:12]
            corpus[did] = passage
            if in_dev(row.get("focus") or row["question"]):
                qid = "q" + hashlib.sha256(row["question"].encode()).hexdigest()[:12]
                queries[qid] = row["question"]
                qrels.append((qid, did))
    docs = [{"_id": i, "title": "", "text": t} for i, t in corpus.items()]
    return _write(out / "medquad-dev", docs, queries, sorted(set(qrels)))


def write_dev_sets(data: str | Path, out: str | Path) -> list[Path]:
    """Write the dev sets under ``out``; returns their folders."""
    data, out = Path(data), Path(out)
    return [scifact_dev(data, out), medquad_dev(data, out)]
