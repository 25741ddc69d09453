"""Calibrating a collection's hybrid search (:mod:`index.hybrid.calibration`) as a job: from
its own documents (no labels), from judged queries, or set by hand; stored with the
collection. (Inside the code "calibrate" is this, and "graded" the encoder's graded
fine-tuning, :mod:`encoder.graded`; the HTTP route and the command keep the word "tune".)

Used by ``qkv tune``, at the end of ``qkv index``, by ``POST /v1/collections/{name}/tune``
and by the service when an API-written collection has grown enough (:func:`due`). Never on
a search's path.
"""

from __future__ import annotations

import csv
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from index.hybrid.calibration import (
    MIN_DOCS,
    POOL,
    Calibration,
    Labels,
    Mapping,
    from_labels,
    measure,
)
from index.hybrid.fusion import CANDIDATES
from index.passages import count_filter, group
from index.store import CollectionInfo, Item, UnsupportedError, VectorStore

log = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], np.ndarray]
AUTO_MIN_DOCS = 1000  # an API-written collection is first calibrated when it holds this many
AUTO_GROWTH = 2.0  # and again when it has grown this many times since
MAX_LABELS = 5000  # judged queries one calibration reads


def check_calibratable(info: CollectionInfo) -> None:
    """Refuse a collection without BM25: it has no hybrid to calibrate."""
    if not info.hybrid:
        raise UnsupportedError(
            f"collection {info.name!r} has no BM25 index (created without hybrid, or on a "
            "store without BM25), so it has no hybrid search to calibrate")


def manual(store: VectorStore, collection: str, weight: float) -> Calibration:
    """Set the collection's weight by hand."""
    info = store.describe(collection)
    check_calibratable(info)
    cal = Calibration(weight, "manual", "set by hand", note="set by hand")
    store.set_calibration(info.name, cal.to_dict())
    return cal


def check_labels(store: VectorStore, info: CollectionInfo, labels: Labels) -> None:
    """Refuse empty labels, too many, or judged ids the collection does not hold
    (``ValueError`` naming a few)."""
    if not labels:
        raise ValueError("labels: no judged queries (each needs a query and relevant ids)")
    if len(labels) > MAX_LABELS:
        raise ValueError(f"labels: {len(labels)} judged queries; at most {MAX_LABELS}")
    if info.multi_tenant:
        raise ValueError(f"labels: collection {info.name!r} is multi-tenant, and judged "
                         "queries are searched per tenant; tune it from its documents or "
                         "set its weight by hand")
    ids = sorted({d for _, rel in labels.values() for d in rel})
    found = {it.id for start in range(0, len(ids), 1000)
             for it in store.get(info.name, ids[start:start + 1000])}
    missing = [i for i in ids if i not in found]
    if missing:
        raise ValueError(f"labels: {len(missing)} judged document id(s) are not in collection "
                         f"{info.name!r}: {', '.join(map(repr, missing[:5]))}"
                         f"{' ...' if len(missing) > 5 else ''}")


def calibrate(store: VectorStore, collection: str, embed: Embed, mapping: Mapping,
         default_weight: float, labels: Labels | None = None, seed: int = 0,
         held: Sequence[str] | None = None) -> Calibration:
    """Calibrate ``collection`` and store the result with it (see the module docstring);
    with ``held`` (ids), the pseudo-queries come from those documents only (see
    :func:`index.hybrid.calibration.measure`)."""
    t0 = time.perf_counter()
    info = store.describe(collection)
    check_calibratable(info)
    if labels is not None:
        check_labels(store, info, labels)
        cal = _with_labels(store, info, embed, labels, default_weight, seed)
    else:
        items, total = store.sample(info.name, POOL, seed)  # passages, in one with passages
        if total and info.passages and not info.multi_tenant:
            total = documents(store, info)
        if total == 0:
            raise ValueError(f"collection {info.name!r} has no documents to calibrate on")
        kept, where = [it for it in items if it.text.strip()], None
        if held:
            mine = [it for it in store.get(info.name, list(held)) if it.text.strip()]
            ids = {it.id for it in mine}
            kept = mine + [it for it in kept if it.id not in ids]
            where = list(range(len(mine)))
        cal = _from_documents(kept, total, embed, mapping, default_weight, seed, where)
    cal.seconds = round(time.perf_counter() - t0, 2)
    store.set_calibration(info.name, cal.to_dict())
    log.info("calibrated %s: dense weight %.3f (%s) in %.1f s", info.name, cal.dense_weight,
             cal.source, cal.seconds)
    return cal


def _labels_note(queries: int, signals: dict[str, Any]) -> str:
    """What a calibration on judged queries decided, in words."""
    if signals["kept_default"]:
        return (f"the encoder default kept: no weight scored better on {queries} judged "
                f"queries (nDCG@10 {signals['ndcg@10_default']:.3f})")
    return (f"best nDCG@10 over {queries} judged queries ({signals['ndcg@10']:.3f} against "
            f"{signals['ndcg@10_default']:.3f} at the default); better than the encoder "
            f"default in {signals['beats_default']:.0%} of bootstrap resamples, the same in "
            f"{signals['ties_default']:.0%}")


def documents(store: VectorStore, info: CollectionInfo) -> int:
    """The documents of a single-tenant collection (with passages: its documents' first
    rows, :mod:`index.passages`)."""
    return store.count(info.name, None, count_filter() if info.passages else None)


def _from_documents(items: list[Item], total: int, embed: Embed, mapping: Mapping,
                    default_weight: float, seed: int, held: list[int] | None = None
                    ) -> Calibration:
    """The label-free calibration from a sample of the collection's ``total`` documents;
    the encoder's default where too few of them (or too few long enough) to calibrate."""
    if len(items) < MIN_DOCS:
        return Calibration(default_weight, "encoder default", "too few documents",
                           docs=total, seed=seed,
                           note=f"{len(items)} documents with text: too few to calibrate (at "
                                f"least {MIN_DOCS}); the encoder's default weight")
    signals = measure([it.text for it in items], np.stack([it.vector for it in items]),
                      embed, seed, held=held)
    if signals["queries"] < (MIN_DOCS // 2 if held is None else min(MIN_DOCS // 2,
                                                                    len(held) // 2)):
        return Calibration(default_weight, "encoder default", "too few pseudo-queries",
                           docs=total, seed=seed, signals=signals,
                           note=f"{signals['queries']} documents long enough (4 words) to cut "
                                "a query from: too few; the encoder's default weight")
    return Calibration(mapping.weight(signals), "collection", "pseudo-queries", docs=total,
                       queries=int(signals["queries"]), seed=seed,
                       signals=signals | {"mapping": vars(mapping)},
                       note=f"{signals['queries']} pseudo-queries over {signals['pool']} of "
                            f"{total} documents")


def _with_labels(store: VectorStore, info: CollectionInfo, embed: Embed, labels: Labels,
                 default_weight: float, seed: int) -> Calibration:
    qids = sorted(labels)
    texts = [labels[q][0] for q in qids]
    xq = embed(texts)
    dense = store.search(info.name, xq, CANDIDATES, mode="dense")
    bm25 = store.search(info.name, xq, CANDIDATES, query_text=texts, mode="bm25")
    if info.passages:  # the judged ids are documents': each side's passages as documents
        dense = [group(store, info.name, h, None, "Strong") for h in dense]
        bm25 = [group(store, info.name, h, None, "Strong") for h in bm25]
    sides = {q: (d, b) for q, d, b in zip(qids, dense, bm25, strict=True)}
    w, signals = from_labels(sides, labels, default_weight, seed)
    return Calibration(w, "labels", "judged queries (nDCG@10)", docs=documents(store, info),
                       queries=len(qids), seed=seed,
                       signals=signals,
                       note=_labels_note(len(qids), signals))


def due(info: CollectionInfo, count: int, min_docs: int = AUTO_MIN_DOCS) -> bool:
    """Whether an API-written collection of ``count`` documents should be (re)calibrated
    by itself: hybrid, at least ``min_docs``, and never calibrated, or calibrated from its
    documents when it had under 1/:data:`AUTO_GROWTH` of them. A weight set by hand or chosen on
    labels is kept."""
    if not info.hybrid or count < min_docs:
        return False
    cal = info.calibration
    if cal is None:
        return True
    if cal.get("source") not in ("collection", "encoder default"):
        return False
    return count >= AUTO_GROWTH * max(int(cal.get("docs", 0)), 1)


def read_labels(path: Path, split: str = "test") -> Labels:
    """Judged queries from a file: JSONL, one ``{"query": TEXT, "relevant": [ID, ...] or
    {ID: GRADE}}`` a line (an optional ``"id"``), or a BEIR folder (``queries.jsonl`` and
    ``qrels/SPLIT.tsv``)."""
    if path.is_dir():
        qrels: dict[str, dict[str, int]] = {}
        with open(path / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                if int(row["score"]) > 0:
                    qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
        with open(path / "queries.jsonl", encoding="utf-8") as f:
            texts = {q["_id"]: q["text"] for q in map(json.loads, f) if q["_id"] in qrels}
        return {q: (texts[q], qrels[q]) for q in sorted(texts)}
    out: Labels = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                one = labels_from([json.loads(line)], f"{path}:{n}", start=len(out))
                if set(one) & set(out):
                    raise ValueError(f"{path}:{n}: query id {next(iter(one))!r} given twice")
                out.update(one)
    return out


def labels_from(rows: Sequence[dict[str, Any]], where: str = "labels", start: int = 0
                ) -> Labels:
    """Judged queries from rows ``{"query", "relevant", "id"?}`` (``ValueError`` naming a
    bad one)."""
    out: Labels = {}
    for i, row in enumerate(rows):
        query, rel = row.get("query"), row.get("relevant")
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"{where}: row {i}: `query` must be a non-empty string")
        if isinstance(rel, list):
            rel = {str(d): 1 for d in rel}
        if not isinstance(rel, dict) or not rel:
            raise ValueError(f"{where}: row {i}: `relevant` must be a non-empty list of ids "
                             "or an object id → grade")
        grades = {str(d): int(g) for d, g in rel.items() if int(g) > 0}
        if not grades:
            raise ValueError(f"{where}: row {i}: no relevant id has a grade above 0")
        qid = str(row.get("id") or f"q{start + i}")
        if qid in out:
            raise ValueError(f"{where}: row {i}: query id {qid!r} given twice")
        out[qid] = (query, grades)
    return out


def embed_at(encode: Embed, dim: int) -> Embed:
    """``encode`` cut to a collection's ``dim`` (a Matryoshka size) and renormalised."""
    def embed(texts: Sequence[str]) -> np.ndarray:
        x = encode(list(texts))[:, :dim]
        return np.ascontiguousarray(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True),
                                                   1e-12), dtype=np.float32)
    return embed


def calibrate_collection(store: str, collection: str, model: Path, token: str = "",
                    timeout: float = 10.0, labels: Labels | None = None,
                    weight: float | None = None, seed: int = 0) -> Calibration:
    """``qkv tune``: calibrate ``collection`` of the store at URI ``store`` with the encoder
    at ``model`` (by hand with ``weight``; on judged queries with ``labels``)."""
    import os

    from index import open_store
    from index.hybrid.calibration import model_mapping
    from index.hybrid.fusion import model_dense_weight
    from wiring.components import encoder_info, load_encoder

    vector_store = open_store(store, token=token, timeout=timeout)
    try:
        if weight is not None:
            return manual(vector_store, collection, weight)
        info = vector_store.describe(collection)
        check_calibratable(info)
        text_encoder = load_encoder(model, cpu_threads=os.cpu_count())
        if info.encoder is not None and info.encoder.fingerprint != \
                encoder_info(text_encoder).fingerprint:
            raise ValueError(f"collection {info.name!r} was made by encoder "
                             f"{info.encoder.name!r} ({info.encoder.fingerprint}), not the "
                             f"one at {model}: give its --model")
        return calibrate(vector_store, collection, embed_at(text_encoder.encode, info.dim),
                    model_mapping(model), model_dense_weight(model), labels, seed)
    finally:
        vector_store.close()
