"""Milvus Lite's write path without its per-value loops (:mod:`index.milvus.lite.writes`)
gives what Lite's own gives: the record check accepts and refuses the same records with the
same message and leaves them the same, and a flushed segment's table is equal column for
column, on real memtables (dense, BM25, JSON, tenants, overwrites, deletes); a BM25 term's
id is the one Lite's hash gives, remembered or not."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from milvus_lite.schema import validation
from test_lite_speed import WORDS, _engine_collection

from index import MilvusStore
from index.milvus.lite import speed as lite_speed
from index.milvus.lite import writes as lite_writes
from index.milvus.schema import BM25_FIELD
from index.store import Item


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[MilvusStore]:
    s = MilvusStore(str(tmp_path / "m.db"))
    s._sealer.rows, s._sealer.quiet_s = 10**9, 10**9  # flushes happen when the test says
    yield s
    s.close()


def test_the_write_path_is_installed(store: MilvusStore) -> None:
    from milvus_lite.engine import collection
    from milvus_lite.storage import memtable

    store.list_collections()
    assert lite_speed.installed()
    assert collection.validate_record is lite_writes.validate_record
    assert memtable.MemTable._build_data_table is lite_writes.build_data_table
    from milvus_lite.analyzer import protocol

    assert protocol.term_to_id is lite_writes.term_to_id


def test_a_terms_id_is_lites_hash_remembered_or_not(store: MilvusStore,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The ids of random terms (ASCII, accented, CJK, emoji, empty) are Lite's FNV-1a of
    them, the first time, again from memory, and after the memory filled and started again;
    a hybrid collection's BM25 finds a text by a word that needs its id."""
    from milvus_lite.analyzer.hash import term_to_id as lites

    store.list_collections()  # installs the fast paths
    monkeypatch.setattr(lite_writes, "TERM_IDS_MAX", 50)
    monkeypatch.setattr(lite_writes, "_term_ids", {})
    rnd = random.Random(11)
    alphabet = "abcxyzéüßжπ漢字🙂-_0"
    terms = ["", *WORDS, *("".join(rnd.choices(alphabet, k=rnd.randint(1, 12)))
                          for _ in range(300))]
    for _ in range(3):
        assert [lite_writes.term_to_id(t) for t in terms] == [lites(t) for t in terms]
        assert len(lite_writes._term_ids) <= 50
    xb = np.eye(8, dtype=np.float32)
    store.create("h", 8, None, hybrid=True)
    store.upsert("h", [Item(f"d{i}", xb[i], text) for i, text in
                       enumerate(["zebras graze", "straße café", "漢字 text"])])
    for word, want in (("zebras", "d0"), ("café", "d1")):
        hits = store.search("h", xb[:1], k=3, mode="bm25", query_text=[word])[0]
        assert [h.id for h in hits] == [want]


def _outcome(check: Any, record: dict, schema: Any) -> tuple[str, dict]:
    """What a record check said of ``record`` (a copy), and the record after it."""
    mine = copy.deepcopy(record)
    try:
        check(mine, schema)
        return "ok", mine
    except Exception as e:  # the same class and message both ways
        return f"{type(e).__name__}: {e}", mine


def test_records_are_checked_as_lite_checks_them(store: MilvusStore) -> None:
    store.create("c", 8, hybrid=True, multi_tenant=True)
    schema = _engine_collection(store.uri, "c").schema
    good = {"id": "a:1", "vector": [0.5] * 8, "text": "dog", "value": "", "metadata": {"n": 1},
            "tenant": "a", BM25_FIELD: "dog"}
    cases: list[dict[str, Any]] = [good, {**good, "vector": [1, 2, 3, 4, 5, 6, 7, 8]},  # ints pass
             {**good, "vector": [0.5] * 7}, {**good, "vector": [0.5] * 9},
             {**good, "vector": [0.5] * 7 + ["x"]}, {**good, "vector": [0.5] * 7 + [True]},
             {**good, "vector": [0.5] * 7 + [np.float32(1)]},  # not a float: refused
             {**good, "vector": [0.5] * 7 + [np.float64(1)]},  # a float subclass: passes
             {**good, "vector": tuple([0.5] * 8)}, {**good, "vector": np.ones(8).tolist()},
             {**good, "vector": None}, {k: v for k, v in good.items() if k != "vector"},
             {k: v for k, v in good.items() if k != "id"}, {**good, "text": 3},
             {**good, "vector": [0.5] * 8, "extra": 1}, {**good, "metadata": None}]
    for record in cases:
        mine = _outcome(lite_writes.validate_record, record, schema)
        own = _outcome(lite_writes.ORIGINAL["validate_record"], record, schema)
        assert mine == own, record
    said = [_outcome(lite_writes.validate_record, r, schema)[0] for r in cases]
    assert said[0] == said[1] == "ok" and said[2].startswith("SchemaValidationError")
    assert "[7] must be numeric" in said[5]  # the bool, by Lite's own loop
    # the vector check is back on once a record is through
    assert validation._find_float_vector(schema) is not None


def test_a_float32_numpy_vector_passes_and_other_arrays_are_lites_to_judge(
        store: MilvusStore) -> None:
    """The store's direct upserts pass float32 numpy rows (Lite's own loop refuses their
    elements, which are not Python floats); any other array is Lite's to judge, as before;
    the vectors stored are the rows given."""
    store.create("c", 8, hybrid=True)
    schema = _engine_collection(store.uri, "c").schema
    good = {"id": "a", "vector": np.full(8, 0.5, np.float32), "text": "dog", "value": "",
            "metadata": {}, BM25_FIELD: "dog"}
    assert _outcome(lite_writes.validate_record, good, schema)[0] == "ok"
    assert _outcome(lite_writes.ORIGINAL["validate_record"], good, schema)[0] != "ok"
    for vector in (np.full(7, 0.5, np.float32), np.full((1, 8), 0.5, np.float32),
                   np.full(8, 0.5, np.float16)):
        record = {**good, "vector": vector}
        mine = _outcome(lite_writes.validate_record, record, schema)[0]
        assert mine == _outcome(lite_writes.ORIGINAL["validate_record"], record, schema)[0]
        assert mine != "ok"
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((50, 8)).astype(np.float32)
    store.upsert("c", [Item(id=f"d{i}", vector=v, text=f"a {WORDS[i % len(WORDS)]}")
                       for i, v in enumerate(xb)])
    for flush in (False, True):  # from the memtable, then from a sealed segment
        if flush:
            store.flush("c")
        got = store.get("c", [f"d{i}" for i in range(50)])
        np.testing.assert_array_equal(np.stack([g.vector for g in got]), xb)


@pytest.mark.parametrize("seed", range(3))
def test_a_flushed_segment_is_the_table_lite_builds(store: MilvusStore, seed: int) -> None:
    rnd, rng = random.Random(seed), np.random.default_rng(seed)
    multi = seed == 2
    store.create("c", 8, hybrid=True, multi_tenant=multi)
    col = _engine_collection(store.uri, "c")
    tenants = ("acme", "zeta") if multi else (None,)
    for step in range(6):  # several insert batches, overwrites and deletes among them
        ids = [f"d{rnd.randrange(300)}" for _ in range(rnd.randint(1, 120))]
        xb = rng.standard_normal((len(ids), 8)).astype(np.float32)
        items = [Item(id=i, vector=xb[j], text=" ".join(rnd.choices(WORDS, k=rnd.randint(0, 6))),
                      value=rnd.choice(["", "v"]), metadata=rnd.choice([{}, {"n": step}]),
                      tenant=rnd.choice(tenants)) for j, i in enumerate(ids)]
        for tenant in tenants:
            store.upsert("c", [it for it in items if it.tenant == tenant])
        if step % 3 == 2:
            store.delete("c", rnd.sample(ids, min(5, len(ids))), tenant=tenants[0])
    mt = col._memtable
    rows = [(b, r) for b, r, _ in mt._pk_index.values()]
    assert len({b for b, _ in rows}) > 1  # rows of several batches
    rnd.shuffle(rows)
    for chosen in (rows, rows[:1], sorted(rows)):
        mine = lite_writes.build_data_table(mt, chosen)
        own = lite_writes.ORIGINAL["build_data_table"](mt, chosen)
        assert mine.schema.equals(own.schema) and mine.equals(own)
        assert mine.num_rows == len(chosen)
    assert lite_writes.build_data_table(mt, []).equals(
        lite_writes.ORIGINAL["build_data_table"](mt, []))
    # and the flush that uses it keeps every row readable
    before = [store.count("c", tenant=t) for t in tenants]
    store.flush("c")
    assert [store.count("c", tenant=t) for t in tenants] == before
    assert len(col._memtable._pk_index) == 0
