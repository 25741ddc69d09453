"""BEIR-layout retrieval sets (``corpus.jsonl``, ``queries.jsonl``, ``qrels/SPLIT.tsv``) and
the scores every retrieval evaluation here reports: nDCG@10 and Recall@100 (pytrec_eval)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

METRICS = {"ndcg_cut_10": "ndcg@10", "recall_100": "recall@100"}


def doc_text(doc: dict[str, str]) -> str:
    """The text a BEIR document is indexed as: title and text joined."""
    title, text = doc.get("title", "").strip(), doc.get("text", "").strip()
    return f"{title}. {text}" if title and not text.startswith(title) else text or title


def load_beir(folder: str | Path, split: str
              ) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """(corpus id → text, query id → text, qrels) for ``split``; only judged queries kept."""
    folder = Path(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        valid = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
        raise ValueError(f"no split {split!r} in {folder}; valid: {', '.join(valid)}")
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        corpus = {d["_id"]: doc_text(d) for d in map(json.loads, f)}
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        queries = {q["_id"]: q["text"] for q in map(json.loads, f) if q["_id"] in qrels}
    return corpus, queries, qrels


def score_run(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]
              ) -> dict[str, float]:
    """Mean nDCG@10 and Recall@100 over the judged queries (pytrec_eval)."""
    import pytrec_eval  # evaluation only: training reads BEIR files without it

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(METRICS))
    per_query = evaluator.evaluate(run)
    return {
        name: round(float(np.mean([per_query.get(q, {}).get(m, 0.0) for q in qrels])), 4)
        for m, name in METRICS.items()
    }
