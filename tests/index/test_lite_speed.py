"""Milvus Lite's fast search paths (:mod:`index.milvus.lite.speed`) answer what Lite's own
answer: on one engine, through random upserts (new keys and overwrites, sealed and in the
memtable), deletes (sealed and pending), flushes, compactions and filters, every dense and
BM25 search is run both ways and compared field by field: the same keys in the same order
with the same fields, BM25 scores to the last bit, inner products to float32 rounding
(:func:`same_hits`)."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from milvus_lite.analyzer.sparse import sparse_to_bytes
from milvus_lite.index.sparse_inverted import SparseInvertedIndex

from index import MilvusStore
from index.hybrid.analysis import analyzed
from index.milvus.lite import speed as lite_speed
from index.milvus.lite.bm25 import FastBM25Index
from index.store import Item

WORDS = ("dog cat man woman child ball street red blue green runs jumps sits plays water "
         "grass snow beach bike guitar park").split()


def test_fast_paths_are_installed_for_lite(tmp_path: Path) -> None:
    MilvusStore(str(tmp_path / "m.db")).list_collections()
    assert lite_speed.installed(), "the installed milvus-lite is not the one patched for"
    assert lite_speed.source_hashes() == lite_speed.KNOWN_SOURCES


@pytest.mark.parametrize("seed", range(12))
def test_bm25_index_scores_as_lite(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, vocab = int(rng.integers(1, 300)), int(rng.integers(2, 30))
    docs = [{int(t) * 7919 + 3: float(rng.integers(1, 4))
             for t in rng.choice(vocab, size=min(int(rng.integers(0, 8)), vocab), replace=False)}
            for _ in range(n)]
    mask = rng.random(n) > 0.3 if seed % 2 else None
    lite = SparseInvertedIndex()
    lite.build(docs)
    column = pa.chunked_array([pa.array([sparse_to_bytes(d) for d in docs], type=pa.binary())])
    from_column, from_dicts = FastBM25Index(), FastBM25Index()
    from_column.build_from_column(column)
    from_dicts.build(docs)
    queries = [{int(t) * 7919 + 3: float(rng.integers(1, 3))
                for t in rng.choice(vocab, size=int(rng.integers(1, 5)))} for _ in range(6)]
    for k in (1, 7, 50):
        want = lite.search([*queries, {}], k, valid_mask=mask)
        for fast in (from_column, from_dicts):
            got = fast.search([*queries, {}], k, valid_mask=mask)
            assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1])


def _engine_collection(uri: str, name: str) -> Any:
    from milvus_lite.server_manager import server_manager_instance

    db = server_manager_instance._servers[os.path.abspath(uri)][1]
    return db.get_collection(name)


def random_writes(store: MilvusStore, rnd: random.Random, write: Callable[[list[str]], None],
                  written: set[str], tenants: tuple[str | None, ...],
                  compare: Callable[[int], None], first: int, steps: int,
                  most: tuple[int, int, int], actions: tuple[str, ...]) -> None:
    """Collection ``c``'s random workload: ``first`` documents written, then ``steps`` random
    actions (new keys, overwrites, deletes in each tenant, flushes; at most ``most`` keys
    a new, overwrite and delete), ``compare(step)`` after each."""
    write([f"d{i}" for i in range(first)])
    for step in range(steps):
        action = rnd.choice(actions)
        if action == "new":
            write([f"d{len(written) + i}" for i in range(rnd.randint(1, most[0]))])
        elif action == "overwrite":
            write(rnd.sample(sorted(written), rnd.randint(1, most[1])))
        elif action == "delete":
            for tenant in tenants:
                store.delete("c", rnd.sample(sorted(written), rnd.randint(1, most[2])),
                             tenant=tenant)
        else:
            store.flush("c")
        compare(step)


# An inner product's last bit depends on the matrix BLAS is handed: Lite multiplies only a
# segment's visible rows, the fast path all of them (no copy), and OpenBLAS's AVX-512
# kernels sum in another order for another width (Intel Xeon: 758 of 1,959 random small
# filtered products differed in some last bit; earlier CI runs had found no difference)
DENSE_RTOL = 8 * float(np.finfo(np.float32).eps)


def same_hits(fast: list[list[dict]], own: list[list[dict]], exact: bool) -> str | None:
    """Where two searches' hits differ (None: nowhere): keys, order and fields exactly,
    distances exactly or (``exact`` false) to float32 rounding."""
    if len(fast) != len(own):
        return f"{len(fast)} result lists against {len(own)}"
    for q, (a, b) in enumerate(zip(fast, own, strict=True)):
        if [(h["id"], h["entity"]) for h in a] != [(h["id"], h["entity"]) for h in b]:
            return f"query {q}: {a} != {b}"
        da, db = np.array([h["distance"] for h in a]), np.array([h["distance"] for h in b])
        if exact and not np.array_equal(da, db):
            return f"query {q}: distances {da.tolist()} != {db.tolist()}"
        if not np.allclose(da, db, rtol=DENSE_RTOL, atol=DENSE_RTOL):
            return f"query {q}: distances {da.tolist()} far from {db.tolist()}"
    return None


def test_same_hits_tells_rounding_from_a_difference() -> None:
    hit = {"id": "a", "distance": 1.978008508682251, "entity": {"n": 1}}
    ulp = {**hit, "distance": 1.9780086278915405}  # the next float32 up
    assert same_hits([[hit]], [[ulp]], exact=False) is None
    assert same_hits([[hit]], [[ulp]], exact=True) is not None
    assert same_hits([[hit]], [[{**hit, "distance": 1.9781}]], exact=False) is not None
    assert same_hits([[hit]], [[{**hit, "entity": {"n": 2}}]], exact=False) is not None
    assert same_hits([[hit, ulp]], [[ulp, hit]], exact=False) is None  # same key twice
    assert same_hits([[hit, {**hit, "id": "b"}]], [[{**hit, "id": "b"}, hit]],
                     exact=False) is not None
    assert same_hits([[hit]], [[hit], []], exact=True) is not None


def _both_ways(col: Any, search: Any) -> tuple[Any, Any]:
    """One search through the fast paths and through Lite's own, on the same state."""
    col._bg_executor.submit(lambda: None).result()  # compaction and index builds done
    with col._maintenance_lock:
        fast = search()
        lite_speed.uninstall()
        try:
            own = search()
        finally:
            assert lite_speed.install()
    return fast, own


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[MilvusStore]:
    s = MilvusStore(str(tmp_path / "m.db"))
    s._sealer.rows, s._sealer.quiet_s = 10**9, 10**9  # flushes happen when the test says
    yield s
    s.close()


@pytest.mark.parametrize("seed", range(3))
def test_searches_equal_lites_own_through_writes(store: MilvusStore, seed: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from index.milvus.lite import dense

    if seed % 2:  # the sources searched side by side (index.milvus.lite.dense.each)
        monkeypatch.setattr(dense, "SIDE_BY_SIDE_ROWS", 0)
        monkeypatch.setattr(dense.os, "cpu_count", lambda: 3)
    rnd, rng = random.Random(seed), np.random.default_rng(seed)
    multi = seed == 2
    store.create("c", 8, hybrid=True, multi_tenant=multi)
    col = _engine_collection(store.uri, "c")
    tenants = ("acme", "zeta") if multi else (None,)
    written: set[str] = set()

    def write(ids: list[str]) -> None:
        xb = rng.standard_normal((len(ids), 8)).astype(np.float32)
        xb /= np.linalg.norm(xb, axis=1, keepdims=True)
        items = [Item(id=i, vector=xb[j], text=" ".join(rnd.choices(WORDS, k=rnd.randint(1, 6))),
                      metadata={"n": rnd.randint(0, 9)}, tenant=rnd.choice(tenants))
                 for j, i in enumerate(ids)]
        for tenant in tenants:
            store.upsert("c", [it for it in items if it.tenant == tenant])
        written.update(ids)

    def compare(step: int) -> None:
        xq = rng.standard_normal((3, 8)).astype(np.float32)
        texts = [analyzed(" ".join(rnd.choices(WORDS, k=3))) for _ in range(3)]
        expr = rnd.choice(["", "metadata[\"n\"] >= 4"] + (['tenant == "acme"'] if multi else []))
        # the fields a search shows: the fast paths read only their columns (None: all)
        fields = rnd.choice([["id", "text", "metadata"], ["id"], ["text", "value"], None,
                             ["id", "vector"]])
        for exact, search in (
            (False, lambda: col.search(xq.tolist(), 10, anns_field="vector", metric_type="IP",
                                       expr=expr or None, output_fields=fields)),
            (True, lambda: col.search(texts, 10, anns_field="sparse", metric_type="BM25",
                                      expr=expr or None, output_fields=fields)),
        ):
            fast, own = _both_ways(col, search)
            differs = same_hits(fast, own, exact)
            assert differs is None, f"step {step}, filter {expr!r}: {differs}"

    random_writes(store, rnd, write, written, tenants, compare, first=300, steps=14,
                  most=(80, 60, 40), actions=("new", "overwrite", "delete", "flush", "flush"))
    # the cached views of this collection: its latest generation's, never a pile of old ones
    from index.milvus.lite.dense import VIEWS

    home = f"{Path(store.uri).resolve()}/collections/c"
    mine = [v for v in VIEWS._views.values() if home in v.home]
    assert 1 <= len(mine) <= 2, [v.home for v in VIEWS._views.values()]


@pytest.mark.parametrize("numpy_vectors", [False, True])
def test_a_few_rows_read_by_cells_equal_them_taken(numpy_vectors: bool) -> None:
    """A segment's few hits are read cell by cell, many in one take (lite.dense.rows_of):
    the two give the same records, nulls, vectors and tables of several chunks included."""
    from index.milvus.lite import dense as lite_dense

    rng = np.random.default_rng(3)
    n, dim = 40, 4
    vectors = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.standard_normal(n * dim).astype(np.float32)), dim)
    vectors = pa.array([None if i % 7 == 3 else v for i, v in enumerate(vectors.to_pylist())],
                       pa.list_(pa.float32(), dim))
    part = pa.table({"id": [f"d{i}" for i in range(n)], "_seq": pa.array(range(n), pa.uint64()),
                     "text": [None if i % 5 == 0 else f"text {i}" for i in range(n)],
                     "metadata": [f'{{"k": {i}}}' for i in range(n)], "vector": vectors})
    table = pa.concat_tables([part.slice(0, 13), part.slice(13, 20), part.slice(33)])
    assert table.column("text").num_chunks == 3
    cols = ["id", "text", "metadata", "vector"]
    token = lite_dense.NUMPY_VECTORS.set(numpy_vectors)
    try:
        for rows in ([0], [3, 12, 13, 39], [39, 0, 20, 7, 33, 32], list(range(n))[::-3]):
            cells = lite_dense._cells(table, cols, rows)
            taken = lite_dense.rows_of(table, cols, [*rows, *range(lite_dense.CELL_ROWS)])
            taken = taken[:len(rows)]
            assert [r["id"] for r in cells] == [f"d{i}" for i in rows]
            for a, b in zip(cells, taken, strict=True):
                assert a.keys() == b.keys() and a["text"] == b["text"]
                assert a["metadata"] == b["metadata"]
                if b["vector"] is None:
                    assert a["vector"] is None
                else:
                    assert type(a["vector"]) is type(b["vector"])
                    assert np.array_equal(np.asarray(a["vector"]), np.asarray(b["vector"]))
            if not numpy_vectors:  # lists of floats compare as they are
                assert lite_dense.rows_of(table, cols, rows) == cells
    finally:
        lite_dense.NUMPY_VECTORS.reset(token)


def test_a_hits_projection_equals_lites_own() -> None:
    """lite.projection.project_record gives Lite's result for records with and without
    dynamic fields, for each kind of read and of output fields."""
    from milvus_lite.engine import projection
    from milvus_lite.schema.types import CollectionSchema, DataType, FieldSchema

    from index.milvus.lite import projection as lite_projection

    own = projection.project_record  # Lite's (speed.install rebinds collection's name only)
    assert own is not lite_projection.project_record
    saved, passed_on = lite_projection.ORIGINAL.get("project_record"), []

    def counted(record: dict, schema: Any, plan: Any) -> dict:
        passed_on.append(record)
        return own(record, schema, plan)

    fields = [FieldSchema("id", DataType.VARCHAR, is_primary=True, max_length=64),
              FieldSchema("vector", DataType.FLOAT_VECTOR, dim=2),
              FieldSchema("text", DataType.VARCHAR, max_length=64),
              FieldSchema("value", DataType.VARCHAR, max_length=64)]
    records: list[dict[str, Any]] = [
        {"id": "a", "text": "t", "value": "v", "_seq": 3},
        {"id": "b", "text": "t", "vector": [0.5, 0.5], "_partition": "_default"},
        {"text": "no key"}, {},
        {"id": "c", "text": "t", "$meta": '{"colour": "red", "text": "x"}'},
        {"id": "d", "text": "t", "colour": "blue"},
        {"id": "e", "$meta": "not json", "extra": 1}]
    for dynamic in (False, True):
        schema = CollectionSchema(fields=fields, enable_dynamic_field=dynamic)
        for kind in ("search", "query", "get"):
            for output in (None, ["text"], ["id", "text", "value"], ["*"], ["$meta"],
                           ["text", "colour"], ["vector", "nothing"]):
                plan = projection.build_projection_plan(output, schema, api_kind=kind)
                for record in records:
                    want = own(dict(record), schema, plan)
                    lite_projection.ORIGINAL["project_record"] = counted
                    try:
                        got = lite_projection.project_record(dict(record), schema, plan)
                    finally:
                        lite_projection.ORIGINAL["project_record"] = saved
                    assert got == want, (dynamic, kind, output, record)
    # only the records with a dynamic field or $meta were passed on to Lite's own
    assert len(passed_on) == 2 * 3 * 7 * 3
    assert all({"$meta", "colour", "extra"} & set(r) for r in passed_on)


def _filter_schema() -> Any:
    from milvus_lite.schema.types import CollectionSchema, DataType, FieldSchema

    return CollectionSchema(fields=[
        FieldSchema("id", DataType.VARCHAR, is_primary=True, max_length=64),
        FieldSchema("vector", DataType.FLOAT_VECTOR, dim=4),
        FieldSchema("text", DataType.VARCHAR, max_length=64),
        FieldSchema("n", DataType.INT64),
        FieldSchema("metadata", DataType.JSON)], enable_dynamic_field=True)


def _filter_rows(seed: int, mixed: bool) -> pa.Table:
    """Rows whose metadata holds each key with values of one JSON type (or, ``mixed``, of
    several: ints, floats, strings, booleans, nulls, lists, objects), or not at all."""
    rng = random.Random(seed)
    kinds = {"lang": ["en", "fr", "de", None], "k": [0, 1, 2, 3, 7],
             "x": [0.5, 1.5, -2.0, 3.25], "tag": ["a", "ab", "b_c", "%"]}
    if mixed:
        kinds = {key: [*v, 1, True, "1", 2.0, None, [1, "en"], {"lang": "en"}]
                 for key, v in kinds.items()}
    rows = []
    for i in range(300):
        meta = {key: rng.choice(v) for key, v in kinds.items() if rng.random() < 0.8}
        if rng.random() < 0.05:
            meta["_qkv_p"] = ["d", "s", 1, 0, 5]
        rows.append({"id": f"d{i}", "vector": [rng.random() for _ in range(4)],
                     "text": rng.choice(WORDS), "n": i,
                     "metadata": rng.choice([None, "[1, 2]", '"en"']) if rng.random() < 0.06
                     else json.dumps(meta),
                     "$meta": rng.choice([None, '{"colour": "red"}', '{"colour": "blue"}'])})
    return pa.Table.from_pylist(rows)


FILTERS = ['not (exists metadata["_qkv_p"])', 'exists metadata["lang"]',
           'metadata["lang"] == "en"', 'metadata["lang"] != "en"',
           '(not (exists metadata["lang"])) or (metadata["lang"] != "en")',
           'metadata["lang"] == "en" or metadata["lang"] == "fr"',
           'metadata["lang"] == "en" and n > 50', 'metadata["k"] == 1', 'metadata["k"] > 1',
           'metadata["k"] >= 2 and metadata["k"] < 7', 'metadata["x"] < 1.0',
           'metadata["x"] == 0.5', 'metadata["k"] + 1 > 3', 'metadata["tag"] like "a%"',
           'metadata["tag"] >= "ab" and metadata["tag"] < "ac"',
           'metadata["k"] == 1 or metadata["k"] == 3',
           'not (metadata["lang"] == "de")', 'array_contains(metadata["tag"], "x")',
           'metadata["lang"]["lang"] == "en"', 'metadata["tag"][0] == 1',
           'id like "d1%" or metadata["lang"] == "fr"',
           'colour == "red" or metadata["lang"] == "fr"',
           'text == "dog" and exists metadata["lang"]']
# more than a JSON field's top-level keys: Lite's own evaluation, row by row
ROW_BY_ROW = {'array_contains(metadata["tag"], "x")', 'metadata["lang"]["lang"] == "en"',
              'metadata["tag"][0] == 1'}


@pytest.mark.parametrize("mixed", [False, True])
def test_a_filter_on_a_json_field_equals_lites_own(mixed: bool) -> None:
    """lite.filters.evaluate_python gives the mask of Lite's own row-by-row evaluation for
    every kind of expression, on keys of one JSON type and of many, on tables and batches;
    it hands Lite's own only the columns the expression reads (never the vectors), and an
    expression on the JSON field's top-level keys of one type not at all (it is evaluated
    in Arrow)."""
    from milvus_lite.search.filter import compile_filter
    from milvus_lite.search.filter.eval import python_backend

    from index.milvus.lite import filters as lite_filters

    own = lite_filters.ORIGINAL.get("evaluate_python") or python_backend.evaluate_python
    assert own is not lite_filters.evaluate_python
    schema, table = _filter_schema(), _filter_rows(0 if mixed else 1, mixed)
    passed: dict[str, list[list[str]]] = {}
    current = [""]

    def counted(compiled: Any, data: Any) -> Any:
        passed.setdefault(current[0], []).append(list(data.column_names))
        return own(compiled, data)

    saved = lite_filters.ORIGINAL.get("evaluate_python")
    lite_filters.ORIGINAL["evaluate_python"] = counted
    try:
        for expr in FILTERS:
            compiled = compile_filter(expr, schema)
            for data in (table, table.to_batches(max_chunksize=64)[1]):
                want = own(compiled, data).to_pylist()
                current[0] = expr
                got = lite_filters.evaluate_python(compiled, data).to_pylist()
                assert got == want, expr
                if data is table and expr not in ROW_BY_ROW:
                    assert any(want) and not all(want), expr  # tells the rows apart
    finally:
        if saved is None:
            lite_filters.ORIGINAL.pop("evaluate_python")
        else:
            lite_filters.ORIGINAL["evaluate_python"] = saved
    assert not any("vector" in cols for calls in passed.values() for cols in calls)
    assert ROW_BY_ROW | {'colour == "red" or metadata["lang"] == "fr"'} <= set(passed)
    assert passed['array_contains(metadata["tag"], "x")'][0] == ["metadata"]
    if not mixed:  # one type a key: evaluated in Arrow, not row by row
        assert {'metadata["lang"] == "en"', 'not (exists metadata["_qkv_p"])',
                'metadata["k"] >= 2 and metadata["k"] < 7',
                'metadata["lang"] == "en" and n > 50'}.isdisjoint(passed)
