"""The bulk job in process: formats, rejects, shards, resume, and an unreachable store."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from store_backends import LiteServer

from index import (
    EncoderInfo,
    FaissStore,
    Fields,
    JobConfig,
    MilvusStore,
    StoreUnavailableError,
    VectorStore,
    bulk_index,
)

D = 8
ENC = EncoderInfo("hash-embed", "0", D)


def embed(texts: list[str]) -> np.ndarray:
    """A deterministic stand-in for the encoder: unit vectors from a hash of the text."""
    seeds = [int.from_bytes(hashlib.blake2b(t.encode(), digest_size=4).digest(), "big")
             for t in texts]
    x = np.stack([np.random.default_rng(s).standard_normal(D) for s in seeds]).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def rows(n: int, start: int = 0) -> list[dict[str, object]]:
    return [{"id": f"r{i}", "text": f"row number {i}", "tgt": f"value {i}", "lang": "en"}
            for i in range(start, start + n)]


def write_jsonl(path: Path, records: list[dict[str, object]], bad: dict[int, str]) -> Path:
    """``bad`` puts raw lines at 1-based line numbers."""
    lines = [json.dumps(r) for r in records]
    for line_no, raw in sorted(bad.items()):
        lines.insert(line_no - 1, raw)
    path.write_text("\n".join(lines) + "\n")
    return path


def config(tmp_path: Path, **kw: object) -> JobConfig:
    base: dict[str, object] = {"state_path": tmp_path / "job.json",
                               "rejects_path": tmp_path / "rejects.jsonl",
                               "batch_size": 7, "progress_bar": False}
    base.update(kw)
    return JobConfig(**base)  # type: ignore[arg-type]


def all_ids(store: VectorStore, collection: str) -> set[str]:
    n = store.count(collection)
    (hits,) = store.search(collection, embed(["x"]), k=max(n, 1), consistency="Strong")
    return {h.id for h in hits}


def test_jsonl_with_rejects(tmp_path: Path) -> None:
    bad = {3: "{not json", 6: json.dumps({"id": "x", "text": ""}),
           9: json.dumps({"id": "y" * 600, "text": "long id"}), 12: "[1, 2]",
           14: json.dumps({"text": "no id"})}
    src = write_jsonl(tmp_path / "in.jsonl", rows(40) + rows(5), bad)  # 5 duplicated ids
    store = FaissStore(tmp_path / "faiss")
    cfg = config(tmp_path, fields=Fields(value="tgt"))
    s = bulk_index(store, "docs", [src], embed, cfg, encoder=ENC)
    assert (s.read, s.written, s.rejected, s.complete) == (50, 45, 5, True)
    assert store.count("docs") == 40
    (r7,) = store.get("docs", ["r7"])
    assert (r7.text, r7.value, r7.metadata) == ("row number 7", "value 7", {"lang": "en"})
    np.testing.assert_allclose(r7.vector, embed(["row number 7"])[0], atol=1e-6)
    rejects = [json.loads(x) for x in (tmp_path / "rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"].split(":")[0]) for r in rejects] == [
        (3, "malformed JSON"), (6, "missing text field 'text'"), (9, "id longer than 512 bytes"),
        (12, "not a JSON object"), (14, "missing id field 'id'")]
    assert store.describe("docs").encoder == ENC
    again = bulk_index(store, "docs", [src], embed, cfg, encoder=ENC)  # done: a no-op
    assert (again.read, again.written, again.total_rejected) == (0, 0, 5)


def test_csv_and_parquet_inputs(tmp_path: Path) -> None:
    with open(tmp_path / "a.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["id", "text", "tgt", "lang"])
        w.writeheader()
        w.writerows(rows(20))
        f.write("short,row\n")
        w.writerow({"id": "multi", "text": "a text\nover two lines", "tgt": "", "lang": "fr"})
    pq.write_table(pa.Table.from_pylist(rows(30, start=100)), tmp_path / "b.parquet",
                   row_group_size=8)
    store = MilvusStore(str(tmp_path / "lite.db"))
    s = bulk_index(store, "docs", [tmp_path / "a.csv", tmp_path / "b.parquet"], embed,
                   config(tmp_path, fields=Fields(value="tgt")), encoder=ENC)
    assert (s.written, s.rejected) == (51, 1)
    assert store.count("docs") == 51
    (multi,) = store.get("docs", ["multi"])
    assert multi.text == "a text\nover two lines" and multi.value is None
    reject = json.loads((tmp_path / "rejects.jsonl").read_text())
    assert reject["line"] == 22 and "expected 4 fields" in reject["reason"]
    store.close()


def test_shards_split_the_input_exactly(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", rows(200), {50: "bad", 51: "bad"})
    store = FaissStore(tmp_path / "faiss")
    written, rejected = [], 0
    for i in range(3):
        cfg = config(tmp_path, shard=(i, 3), state_path=tmp_path / f"s{i}.json",
                     rejects_path=tmp_path / f"r{i}.jsonl")
        s = bulk_index(store, "docs", [src], embed, cfg, encoder=ENC)
        written.append(s.written)
        rejected += s.rejected
        assert s.skipped_other_shards == 200 - s.written
    assert sum(written) == 200 and min(written) > 40  # every id in exactly one shard
    assert rejected == 2
    assert all_ids(store, "docs") == {f"r{i}" for i in range(200)}


def test_resume_continues_from_saved_progress(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", rows(60), {10: "bad"})
    store = FaissStore(tmp_path / "faiss")
    calls = 0

    def failing_embed(texts: list[str]) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 4:
            raise RuntimeError("encoder crashed")
        return embed(texts)

    with pytest.raises(RuntimeError, match="encoder crashed"):
        bulk_index(store, "docs", [src], failing_embed, config(tmp_path), encoder=ENC)
    state = json.loads((tmp_path / "job.json").read_text())
    assert state["written"] == 21 and not state["done"]  # three batches of 7 acknowledged
    s = bulk_index(FaissStore(tmp_path / "faiss"), "docs", [src], embed, config(tmp_path),
                   encoder=ENC)
    assert s.written == 39 and s.total_written == 60 and s.total_rejected == 1
    assert len((tmp_path / "rejects.jsonl").read_text().splitlines()) == 1
    assert FaissStore(tmp_path / "faiss").count("docs") == 60


def test_other_arguments_do_not_reuse_progress(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", rows(5), {})
    bulk_index(FaissStore(tmp_path / "f"), "docs", [src], embed, config(tmp_path), encoder=ENC)
    with pytest.raises(ValueError, match="belongs to another job"):
        bulk_index(FaissStore(tmp_path / "f"), "other", [src], embed, config(tmp_path),
                   encoder=ENC)


def test_unreachable_store_retries_then_stops_and_resumes(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", rows(50), {})
    cfg = config(tmp_path, retries=2, backoff_s=0.1)
    server = LiteServer(tmp_path / "lite-data")
    uri = server.start()
    calls = 0

    def embed_then_lose_server(texts: list[str]) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 4:  # the server goes away while batch 3 is being written
            server.stop()
        return embed(texts)

    try:
        with pytest.raises(StoreUnavailableError, match="run the same command again"):
            bulk_index(MilvusStore(uri, timeout=2.0), "docs", [src], embed_then_lose_server, cfg,
                       encoder=ENC, store_name=uri)
        state = json.loads((tmp_path / "job.json").read_text())
        assert state["written"] in (14, 21) and not state["done"]
        server.start()  # back on the same port with the same data
        store = MilvusStore(uri)
        s = bulk_index(store, "docs", [src], embed, cfg, encoder=ENC, store_name=uri)
        assert s.written == 50 - state["written"] and s.complete
        assert all_ids(store, "docs") == {f"r{i}" for i in range(50)}
        store.close()
    finally:
        server.stop()


def test_parallel_encoders_write_in_input_order(tmp_path: Path) -> None:
    """With several encode workers, batches finishing out of order are still written (and
    progress saved) in input order: every saved position is after all rows written so far."""
    import threading
    import time

    src = write_jsonl(tmp_path / "in.jsonl", rows(60), {})
    seen: list[int] = []
    lock = threading.Lock()

    def slow_first_embed(texts: list[str]) -> np.ndarray:
        first = int(texts[0].split()[-1])
        if first % 14 == 0:  # every other batch of 7 is slow, so later ones finish first
            time.sleep(0.05)
        with lock:
            seen.append(first)
        return embed(texts)

    store = FaissStore(tmp_path / "faiss")
    positions: list[int] = []
    real_upsert = store.upsert

    def upsert(collection: str, items: list, encoder: EncoderInfo | None = None) -> int:
        positions.append(int(items[0].id[1:]))
        return real_upsert(collection, items, encoder)

    store.upsert = upsert  # type: ignore[method-assign]
    s = bulk_index(store, "docs", [src], slow_first_embed, config(tmp_path, encode_workers=3),
                   encoder=ENC)
    assert s.written == 60 and s.complete
    assert positions == sorted(positions) == list(range(0, 60, 7))
    assert seen != sorted(seen)  # the encoders really did finish out of order
    assert all_ids(store, "docs") == {f"r{i}" for i in range(60)}


def test_a_metadata_object_is_the_metadata() -> None:
    """A row in the API's document shape indexes as the API stores it: its ``metadata``
    object is the metadata (so a filter on ``course`` finds it), merged with any other
    field, its own keys winning."""
    from index.bulk.corpus import Fields, to_fields

    row = {"id": "r1", "text": "cake", "source": "book",
           "metadata": {"course": "dessert", "source": "web"}}
    assert to_fields(row, Fields()) == ("r1", "cake", None,
                                        {"source": "web", "course": "dessert"})
    kept = {"id": "r2", "text": "tea", "metadata": "not an object"}
    assert to_fields(kept, Fields()) == ("r2", "tea", None, {"metadata": "not an object"})
