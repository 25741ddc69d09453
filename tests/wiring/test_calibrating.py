"""wiring.calibrating on a real in-process store (FAISS): the fallbacks to the encoder default,
multi-tenant collections, labels read from a file, and a weight kept with the collection."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from index import EncoderInfo, FaissStore, Item
from index.hybrid.calibration import Mapping
from wiring.calibrating import calibrate, read_labels

D = 64
ENC = EncoderInfo("bag", "f00d", D)
MAPPING = Mapping(0.9, 0.5, 0.0, 0.9, 10.0, 0.03, 0.95)


def embed(texts: list[str] | tuple[str, ...]) -> np.ndarray:
    x = np.zeros((len(texts), D), np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().replace(".", " ").split():
            x[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % D] += 1.0
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def docs(n: int, words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(300)]
    return [" ".join(rng.choices(vocab, k=words)) + "." for _ in range(n)]


def filled(tmp_path: Path, texts: list[str], multi_tenant: bool = False) -> FaissStore:
    store = FaissStore(tmp_path / "faiss")
    store.create("c", D, ENC, hybrid=True, multi_tenant=multi_tenant)
    x = embed(texts)
    store.upsert("c", [Item(f"d{i}", x[i], t, tenant=f"t{i % 3}" if multi_tenant else None)
                       for i, t in enumerate(texts)], ENC)
    return store


def test_documents_too_short_to_cut_queries_keep_the_default(tmp_path: Path) -> None:
    store = filled(tmp_path, docs(250, 3))
    cal = calibrate(store, "c", embed, MAPPING, 0.92)
    assert (cal.source, cal.dense_weight, cal.method) == ("encoder default", 0.92,
                                                          "too few pseudo-queries")
    assert store.describe("c").calibration["note"].startswith("0 documents long enough")  # type: ignore[index]


def test_a_multi_tenant_collection_tunes_over_every_tenant_but_refuses_labels(
        tmp_path: Path) -> None:
    texts = [f"{a} {b}" for a, b in zip(docs(240, 8, 1), docs(240, 8, 2), strict=True)]
    store = filled(tmp_path, texts, multi_tenant=True)
    cal = calibrate(store, "c", embed, MAPPING, 0.92, seed=3)
    assert cal.source == "collection" and cal.docs == 240 and cal.signals["pool"] == 240
    assert calibrate(store, "c", embed, MAPPING, 0.92, seed=3).dense_weight == cal.dense_weight
    with pytest.raises(ValueError, match="multi-tenant"):
        calibrate(store, "c", embed, MAPPING, 0.92, labels={"q": ("w1", {"d1": 1})})


def test_labels_from_jsonl_and_beir_and_duplicate_ids(tmp_path: Path) -> None:
    jsonl = tmp_path / "l.jsonl"
    jsonl.write_text(json.dumps({"query": "a b", "relevant": ["d1"], "id": "x"}) + "\n\n"
                     + json.dumps({"query": "c", "relevant": {"d2": 2, "d3": 0}}) + "\n")
    assert read_labels(jsonl) == {"x": ("a b", {"d1": 1}), "q1": ("c", {"d2": 2})}
    jsonl.write_text(2 * (json.dumps({"query": "a", "relevant": ["d1"], "id": "x"}) + "\n"))
    with pytest.raises(ValueError, match="given twice"):
        read_labels(jsonl)
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "1", "text": "q one"}) + "\n"
                                        + json.dumps({"_id": "2", "text": "q two"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n2\td2\t0\n")
    assert read_labels(beir) == {"1": ("q one", {"d1": 1})}
