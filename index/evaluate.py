"""Retrieval through the store itself: a BEIR folder indexed into a hybrid Milvus Lite
collection, each query searched in each mode (dense, Milvus BM25, hybrid), scored with the
same nDCG@10 / Recall@100 as ``encoder.evaluate`` (:mod:`index.beir`). The vectors come
from an ``embed(texts) -> (n, d) unit rows`` callable, as in the bulk job: no torch here."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from index.beir import load_beir, score_run
from index.bulk.job import Embed
from index.hybrid.fusion import DEFAULT_DENSE_WEIGHT
from index.milvus.store import MilvusStore
from index.store import MAX_TEXT_BYTES, SEARCH_MODES, EncoderInfo, Item

log = logging.getLogger(__name__)

COLLECTION = "beir_eval"
BATCH = 256


def _fit(text: str) -> str:
    """The text cut to Milvus' VARCHAR limit (on a UTF-8 boundary)."""
    return text.encode()[:MAX_TEXT_BYTES].decode(errors="ignore")


def index_corpus(store: MilvusStore, embed: Embed, info: EncoderInfo, corpus: dict[str, str]
                 ) -> None:
    """Encode and upsert the corpus into a fresh hybrid collection, then seal it."""
    store.create(COLLECTION, info.dim, info, hybrid=True)
    ids = list(corpus)
    for start in tqdm(range(0, len(ids), BATCH), desc="index", unit="batch"):
        chunk = ids[start : start + BATCH]
        xb = embed([corpus[i] for i in chunk])
        store.upsert(COLLECTION, [Item(i, xb[r], _fit(corpus[i])) for r, i in enumerate(chunk)],
                     info)
    store.flush(COLLECTION)


def mode_runs(store: MilvusStore, embed: Embed, info: EncoderInfo, queries: dict[str, str],
              modes: Sequence[str], k: int = 100, fusion: str = "rrf",
              dense_weight: float = DEFAULT_DENSE_WEIGHT
              ) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, float]]:
    """Per mode, the run (query id → doc id → score) and the p50 single-query latency in ms."""
    q_ids = list(queries)
    xq = embed([queries[q] for q in q_ids])
    runs: dict[str, dict[str, dict[str, float]]] = {}
    p50: dict[str, float] = {}
    for mode in modes:
        run: dict[str, dict[str, float]] = {}
        times = []
        for r, q in enumerate(tqdm(q_ids, desc=mode, unit="query")):
            t0 = time.perf_counter()
            (hits,) = store.search(COLLECTION, xq[r : r + 1], k, encoder=info,
                                   consistency="Strong", query_text=[queries[q]], mode=mode,
                                   fusion=fusion, dense_weight=dense_weight)
            times.append(time.perf_counter() - t0)
            # rank-based scores: trec_eval breaks score ties by doc id, not in our order
            run[q] = {h.id: float(len(hits) - rank) for rank, h in enumerate(hits)}
        runs[mode] = run
        p50[mode] = round(float(np.median(times)) * 1e3, 2)
    return runs, p50


def evaluate_modes(embed: Embed, info: EncoderInfo, folder: str | Path, split: str,
                   modes: Sequence[str], fusion: str = "rrf",
                   dense_weight: float = DEFAULT_DENSE_WEIGHT) -> dict[str, object]:
    """nDCG@10 and Recall@100 of each mode on one BEIR folder, through Milvus Lite; the
    vectors are ``embed``'s, recorded as made by the encoder ``info``."""
    for m in modes:
        if m not in SEARCH_MODES:
            raise ValueError(f"mode must be one of {SEARCH_MODES}, got {m!r}")
    corpus, queries, qrels = load_beir(folder, split)
    report: dict[str, object] = {"queries": len(queries), "docs": len(corpus),
                                 "store": "milvus-lite", "fusion": fusion}
    if fusion == "weighted":
        report["dense_weight"] = dense_weight
    with tempfile.TemporaryDirectory(prefix="qkv-eval-") as tmp:
        store = MilvusStore(str(Path(tmp) / "eval.db"), index_type="FLAT", timeout=120.0)
        try:
            index_corpus(store, embed, info, corpus)
            runs, p50 = mode_runs(store, embed, info, queries, modes, fusion=fusion,
                                  dense_weight=dense_weight)
        finally:
            store.close()
    for mode, run in runs.items():
        report[f"milvus_{mode}"] = {**score_run(run, qrels), "p50_ms": p50[mode]}
    log.info("%s/%s through Milvus Lite: %s", Path(folder).name, split, report)
    return report
