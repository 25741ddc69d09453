"""A store on a Lite file calls Lite's engine directly for searches and upserts
(:mod:`index.milvus.lite.direct`): through random upserts, overwrites, deletes, flushes and
filters, on plain and multi-tenant collections, every dense, BM25 and hybrid search and every
read by id answers what the same call through gRPC answers (ids, scores, texts, metadata,
vectors), and so does every list of the stored keys (``scan``, ``sample``, ``ids``, with and
without a filter) and every count with a filter; rows
upserted directly read back through gRPC as written; a direct call that fails is made
through gRPC; a collection the engine does not have is gRPC's to refuse (its error kept)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_lite_speed import WORDS, random_writes

from index import CollectionNotFoundError, MilvusStore
from index.filters import parse_filter
from index.milvus.lite import direct as lite_direct
from index.milvus.lite import speed as lite_speed
from index.store import EncoderInfo, Item

ENC = EncoderInfo("test", "0" * 16, 8)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[MilvusStore]:
    s = MilvusStore(str(tmp_path / "m.db"))
    s._sealer.rows, s._sealer.quiet_s = 10**9, 10**9  # flushes happen when the test says
    yield s
    s.close()


def _through_grpc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lite_direct, "collection", lambda uri, name: None)


def _same(a: list[list[Any]], b: list[list[Any]]) -> None:
    assert [[h.id for h in row] for row in a] == [[h.id for h in row] for row in b]
    for ra, rb in zip(a, b, strict=True):
        for x, y in zip(ra, rb, strict=True):
            assert (x.score, x.text, x.value, x.metadata, x.sources, x.floor) == (
                y.score, y.text, y.value, y.metadata, y.sources, y.floor)
            assert (x.vector is None) == (y.vector is None)
            if x.vector is not None:
                assert np.array_equal(x.vector, y.vector)


def test_the_engine_is_reached_directly(store: MilvusStore) -> None:
    store.create("c", 8, ENC, hybrid=True)
    assert store._engine("c") is not None
    assert store._engine("nope") is None  # gRPC says there is no such collection
    with pytest.raises(CollectionNotFoundError):
        store.search("nope", np.ones((1, 8), np.float32), 3)


@pytest.mark.parametrize("seed", range(3))
def test_direct_answers_equal_grpcs(store: MilvusStore, seed: int,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rnd, rng = random.Random(seed), np.random.default_rng(seed)
    multi = seed == 2
    store.create("c", 8, ENC, hybrid=True, multi_tenant=multi)
    tenants = ("acme", "zeta") if multi else (None,)
    written: set[str] = set()

    def write(ids: list[str]) -> None:
        xb = rng.standard_normal((len(ids), 8)).astype(np.float32)
        xb /= np.linalg.norm(xb, axis=1, keepdims=True)
        items = [Item(id=i, vector=xb[j], text=" ".join(rnd.choices(WORDS, k=rnd.randint(1, 6))),
                      value=rnd.choice([None, "v"]),
                      metadata={"n": rnd.randint(0, 9),
                                **({"tags": rnd.sample(WORDS, 2)} if rnd.random() < 0.7
                                   else {})},
                      tenant=rnd.choice(tenants)) for j, i in enumerate(ids)]
        for tenant in tenants:
            store.upsert("c", [it for it in items if it.tenant == tenant], ENC)
        written.update(ids)

    def compare(step: int) -> None:
        xq = rng.standard_normal((2, 8)).astype(np.float32)
        texts = [" ".join(rnd.choices(WORDS, k=3)) for _ in range(2)]
        flt = rnd.choice([None, parse_filter({"key": "n", "op": "gte", "value": 4})])
        tenant = rnd.choice(tenants)
        for mode in ("dense", "bm25", "hybrid"):
            kw: dict[str, Any] = {"k": rnd.choice([3, 10]), "filter": flt, "encoder": ENC,
                                      "query_text": texts, "mode": mode, "tenant": tenant,
                                      "with_vectors": rnd.random() < 0.5}
            direct = store.search("c", xq, **kw)
            with monkeypatch.context() as m:
                _through_grpc(m)
                grpc = store.search("c", xq, **kw)
            assert sum(map(len, direct)) > 0 or flt is not None, (step, mode)
            _same(direct, grpc)
        asked = rnd.sample(sorted(written), 20) + ["never-written"]
        for tenant in tenants:
            for brief in (False, True):
                direct_items = store.get("c", asked, tenant=tenant, brief=brief)
                with monkeypatch.context() as m:
                    _through_grpc(m)
                    grpc_items = store.get("c", asked, tenant=tenant, brief=brief)
                assert [(x.id, x.text, x.value, x.metadata, x.tenant) for x in direct_items] == [
                    (x.id, x.text, x.value, x.metadata, x.tenant) for x in grpc_items]
                assert all(np.array_equal(x.vector, y.vector)
                           for x, y in zip(direct_items, grpc_items, strict=True))

        # every key (sample, scan and the paged id list read them from the engine)
        def keys() -> tuple[Any, ...]:
            every = [it.id for page in store.scan("c", every_tenant=True) for it in page]
            sample = [(it.id, it.tenant) for it in store.sample("c", 25, seed)[0]]
            pages = [store.ids("c", after=rnd_after, limit=7, tenant=t, filter=f)
                     for t in tenants for f in (None, *filters)]
            counts = [store.count("c", tenant=t, filter=f) for t in tenants for f in filters]
            return every, sample, store.sample("c", 25, seed)[1], pages, counts

        filters = [parse_filter({"key": "n", "op": "gte", "value": 4}),
                   parse_filter({"key": "tags", "op": "exists", "value": False})]

        rnd_after = rnd.choice(["", *sorted(written)])
        direct_keys = keys()
        with monkeypatch.context() as m:
            _through_grpc(m)
            assert keys() == direct_keys
        assert len(direct_keys[0]) == direct_keys[2] == sum(store.count("c", tenant=t)
                                                            for t in tenants)
        assert len(direct_keys[0]) > 0 and all(0 < n for n in direct_keys[4][1::2])

    random_writes(store, rnd, write, written, tenants, compare, first=200, steps=10,
                  most=(60, 40, 30), actions=("new", "overwrite", "delete", "flush"))


def test_direct_upserts_read_back_as_grpcs(store: MilvusStore,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    xb = rng.standard_normal((50, 8)).astype(np.float32)
    xb /= np.linalg.norm(xb, axis=1, keepdims=True)
    items = [Item(id=f"n{i}", vector=xb[i], text=f"note {i} — ünïcode",
                  value="v" if i % 3 else None,
                  metadata={"i": i, "nested": {"a": [1, 2.5, None, "x"]}, "b": i % 2 == 0})
             for i in range(50)]
    for name in ("direct", "grpc"):
        store.create(name, 8, ENC, hybrid=True)
    store.upsert("direct", items, ENC)
    with monkeypatch.context() as m:
        _through_grpc(m)
        store.upsert("grpc", items, ENC)
    ids = [it.id for it in items]
    a, b = store.get("direct", ids), store.get("grpc", ids)
    assert [(x.id, x.text, x.value, x.metadata) for x in a] == [
        (x.id, x.text, x.value, x.metadata) for x in b]
    assert all(np.array_equal(x.vector, y.vector) for x, y in zip(a, b, strict=True))
    assert store.count("direct") == 50


def test_a_failed_direct_call_goes_through_grpc(store: MilvusStore,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    store.create("c", 8, ENC, hybrid=True)
    v = np.ones((1, 8), np.float32) / np.sqrt(8)
    calls: list[str] = []

    def broken(*args: Any, **kwargs: Any) -> Any:
        calls.append("direct")
        raise RuntimeError("engine busy")

    monkeypatch.setattr(lite_direct, "upsert", broken)
    monkeypatch.setattr(lite_direct, "search", broken)
    store.upsert("c", [Item("a", v[0], "red ball")], ENC)
    assert store.get("c", ["a"])[0].text == "red ball"
    (hits,) = store.search("c", v, 1, encoder=ENC, query_text=["red ball"], mode="hybrid")
    assert [h.id for h in hits] == ["a"] and calls == ["direct"] * 3


@pytest.mark.parametrize("multi", [False, True])
def test_whole_rows_inserted_answer_as_upserted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                multi: bool) -> None:
    """Whole rows go to the engine's insert, which its upsert ends in (lite.direct.upsert):
    two files written alike through new keys, overwrites, deletes and flushes, one through
    insert and one through the engine's upsert, answer every search, read and count alike;
    a partial row is still the engine's upsert's, merged into the key's record."""
    from milvus_lite.engine.collection import Collection

    upserts = [0]
    own_upsert = Collection.upsert

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        upserts[0] += 1
        return own_upsert(self, *a, **kw)

    monkeypatch.setattr(Collection, "upsert", counted)
    rnd, rng = random.Random(5), np.random.default_rng(5)
    tenants = ("acme", "zeta") if multi else (None,)
    stores = {way: MilvusStore(str(tmp_path / f"{way}.db")) for way in ("insert", "upsert")}
    for s in stores.values():
        s._sealer.rows, s._sealer.quiet_s = 10**9, 10**9  # flushes happen when the test says
        s.create("c", 8, ENC, hybrid=not multi, multi_tenant=multi)
    assert lite_speed.installed()  # the Lite whose upsert this was written for

    def each(act: Any) -> None:
        for way, s in stores.items():
            before = upserts[0]
            with monkeypatch.context() as m:
                if way == "upsert":
                    m.setattr(lite_direct, "_whole", lambda col, rows: False)
                act(s)
            assert (upserts[0] > before) == (way == "upsert" and wrote), way

    written: list[str] = []
    for step in range(12):
        action = "new" if step < 2 else rnd.choice(["new", "overwrite", "overwrite", "delete",
                                                    "flush"])
        wrote = action in ("new", "overwrite")
        if wrote:
            ids = ([f"d{len(written) + i}" for i in range(rnd.randint(20, 60))]
                   if action == "new" else rnd.sample(written, rnd.randint(5, 30)))
            xb = rng.standard_normal((len(ids), 8)).astype(np.float32)
            xb /= np.linalg.norm(xb, axis=1, keepdims=True)
            items = [Item(id=i, vector=xb[j],
                          text=" ".join(rnd.choices(WORDS, k=rnd.randint(1, 6))),
                          value=rnd.choice([None, "v"]),
                          metadata={"n": rnd.randint(0, 9)} if rnd.random() < 0.5 else {},
                          tenant=rnd.choice(tenants)) for j, i in enumerate(ids)]
            for tenant in tenants:
                part = [it for it in items if it.tenant == tenant]
                if part:
                    each(lambda s, part=part: s.upsert("c", part, ENC))
            written += [i for i in ids if i not in written]
        elif action == "delete":
            gone = rnd.sample(written, 5)
            for tenant in tenants:
                each(lambda s, tenant=tenant, gone=gone: s.delete("c", gone, tenant=tenant))
        else:
            each(lambda s: s.flush("c"))
        xq = rng.standard_normal((3, 8)).astype(np.float32)
        texts = [" ".join(rnd.choices(WORDS, k=3)) for _ in range(3)]
        for tenant in tenants:
            for mode in ("dense",) if multi else ("dense", "bm25", "hybrid"):
                kw: dict[str, Any] = {"k": 10, "encoder": ENC, "query_text": texts,
                                      "mode": mode, "tenant": tenant, "with_vectors": True}
                _same(stores["insert"].search("c", xq, **kw),
                      stores["upsert"].search("c", xq, **kw))
            a, b = (s.get("c", written, tenant=tenant) for s in stores.values())
            assert [(x.id, x.text, x.value, x.metadata) for x in a] == [
                (x.id, x.text, x.value, x.metadata) for x in b]
            assert all(np.array_equal(x.vector, y.vector) for x, y in zip(a, b, strict=True))
            assert stores["insert"].count("c", tenant=tenant) == stores["upsert"].count(
                "c", tenant=tenant) > 0
    if not multi:  # a partial row: the engine's upsert fills in the fields it lacks
        old = stores["insert"].get("c", [written[0]])[0]
        before = upserts[0]
        lite_direct.upsert(lite_direct.collection(stores["insert"].uri, "c"),
                           [{"id": old.id, "text": "a partial row"}])
        new = stores["insert"].get("c", [old.id])[0]
        assert upserts[0] == before + 1
        assert (new.text, new.value, new.metadata) == ("a partial row", old.value, old.metadata)
        assert np.array_equal(new.vector, old.vector)
    for s in stores.values():
        s.close()
