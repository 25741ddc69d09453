"""One contract, four backends: FaissStore, Milvus Lite file, Milvus 2.3.5 server, and
``milvus-lite server``. Every test here runs unchanged against each of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from store_backends import open_backend, unit_rows

from index import (
    And,
    CollectionExistsError,
    CollectionNotFoundError,
    Condition,
    EncoderInfo,
    EncoderMismatchError,
    Item,
    Or,
    UnsupportedError,
    VectorStore,
    matches,
)

D = 16
ENC = EncoderInfo("enc-a", "f00d", D)
STRONG = "Strong"  # the tests read right after writing
SESSION = "Session"  # sees this client's own writes; much faster than Strong on a server


def make_items(n: int, seed: int = 0) -> list[Item]:
    xb = unit_rows(n, D, seed)
    langs = ["en", "fr", "de"]
    return [Item(id=f"doc-{i}", vector=xb[i], text=f"text {i}",
                 value=f"value {i}" if i % 2 else None,
                 metadata={"n": i, "lang": langs[i % 3], "even": i % 2 == 0, "score": i / 10})
            for i in range(n)]


def test_create_is_idempotent_and_checks_dim_and_encoder(store: VectorStore,
                                                         collection: str) -> None:
    info = store.create(collection, D, ENC)
    assert (info.dim, info.encoder) == (D, ENC)
    assert store.create(collection, D, ENC) == info
    assert collection in store.list_collections()
    with pytest.raises(CollectionExistsError):
        store.create(collection, D + 1)
    with pytest.raises(CollectionExistsError):
        store.create(collection, D, EncoderInfo("enc-b", "beef", D))
    with pytest.raises(CollectionExistsError):
        store.create(collection, D, ENC, exist_ok=False)


def test_round_trip_count_and_get(store: VectorStore, collection: str) -> None:
    store.create(collection, D, ENC)
    assert store.count(collection) == 0
    items = make_items(30)
    assert store.upsert(collection, items, ENC) == 30
    assert store.count(collection) == 30
    got = store.get(collection, ["doc-3", "missing", "doc-0", "doc-3"])
    assert [g.id for g in got] == ["doc-3", "doc-0"]
    g3 = got[0]
    assert g3.text == "text 3" and g3.value == "value 3" and got[1].value is None
    assert g3.metadata == {"n": 3, "lang": "en", "even": False, "score": 0.3}
    assert g3.vector.dtype == np.float32
    np.testing.assert_allclose(g3.vector, items[3].vector, atol=1e-6)


def test_scan_pages_every_item_in_id_order_and_resumes_after_an_id(
        store: VectorStore, collection: str) -> None:
    store.create(collection, D, ENC)
    items = make_items(45)
    store.upsert(collection, items[::2], ENC)  # written in two rounds, out of id order
    store.upsert(collection, items[1::2], ENC)
    store.delete(collection, ["doc-7"])
    pages = list(store.scan(collection, batch_size=10))
    ids = [it.id for page in pages for it in page]
    want = sorted(it.id for it in items if it.id != "doc-7")
    assert ids == want and max(len(p) for p in pages) <= 10 and len(pages) >= 5
    got = {it.id: it for page in pages for it in page}
    assert got["doc-3"].value == "value 3" and got["doc-3"].metadata["n"] == 3
    np.testing.assert_allclose(got["doc-3"].vector, items[3].vector, atol=1e-6)
    rest = [it.id for page in store.scan(collection, after=want[19], batch_size=7) for it in page]
    assert rest == want[20:]
    assert list(store.scan(collection, after=want[-1])) == []


def test_ids_page_in_id_order_after_a_cursor_with_a_filter_and_a_tenant(
        store: VectorStore, collection: str) -> None:
    """The store call under a collection's pages (``GET .../documents?cursor=``)."""
    store.create(collection, D, ENC)
    items = make_items(45)
    store.upsert(collection, items[1::2], ENC)
    store.upsert(collection, items[::2], ENC)
    store.delete(collection, ["doc-7"])
    want = sorted(it.id for it in items if it.id != "doc-7")
    assert store.ids(collection, None, 10) == want[:10]
    assert store.ids(collection, want[9], 10) == want[10:20]
    assert store.ids(collection, want[-3], 10) == want[-2:]
    assert store.ids(collection, want[-1], 10) == []
    fr = Condition("lang", "eq", "fr")
    assert store.ids(collection, "doc-2", 100, fr) == sorted(
        i for i in want if items[int(i[4:])].metadata["lang"] == "fr" and i > "doc-2")
    mt = collection + "_mt"
    store.create(mt, D, ENC, multi_tenant=True)
    try:
        for t in ("a", "b"):
            store.upsert(mt, [Item(f"i{k:02d}", it.vector, t, None, {"k": k}, t)
                              for k, it in enumerate(items[:12]) if t == "a" or k % 2], ENC)
        assert store.ids(mt, None, 5, tenant="a") == [f"i{k:02d}" for k in range(5)]
        assert store.ids(mt, "i05", 100, tenant="b") == ["i07", "i09", "i11"]
        assert store.ids(mt, None, 100, Condition("k", "gte", 9), "b") == ["i09", "i11"]
        with pytest.raises(ValueError, match="multi-tenant"):
            store.ids(mt, None, 5)
    finally:
        store.drop(mt)


def test_upsert_replaces_and_last_duplicate_wins(store: VectorStore, collection: str) -> None:
    store.create(collection, D)
    items = make_items(10)
    store.upsert(collection, items)
    xb = unit_rows(3, D, seed=9)
    batch = [Item("doc-1", xb[0], "first"), Item("doc-1", xb[1], "second"),
             Item("new", xb[2], "new one")]
    assert store.upsert(collection, batch) == 2
    assert store.count(collection) == 11
    (doc1,) = store.get(collection, ["doc-1"])
    assert doc1.text == "second" and doc1.metadata == {}
    np.testing.assert_allclose(doc1.vector, xb[1], atol=1e-6)
    store.upsert(collection, items)  # re-running a write is harmless
    assert store.count(collection) == 11


def test_delete(store: VectorStore, collection: str) -> None:
    store.create(collection, D)
    store.upsert(collection, make_items(10))
    store.delete(collection, ["doc-2", "doc-5", "never-there", 'x" or id != "'])
    assert store.count(collection) == 8
    assert store.get(collection, ["doc-2", "doc-5"]) == []


def test_search_finds_each_item_first_in_score_order(store: VectorStore,
                                                    collection: str) -> None:
    store.create(collection, D, ENC)
    items = make_items(40)
    store.upsert(collection, items)
    xq = np.stack([items[i].vector for i in (0, 7, 33)])
    results = store.search(collection, xq, k=5, encoder=ENC, consistency=STRONG)
    assert len(results) == 3
    for hits, i in zip(results, (0, 7, 33), strict=True):
        assert len(hits) == 5
        assert hits[0].id == f"doc-{i}" and hits[0].score == pytest.approx(1.0, abs=1e-4)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert hits[0].text == f"text {i}" and hits[0].metadata["n"] == i
        assert hits[0].vector is None
    # scores are inner products: check one against numpy
    h = results[1][3]
    (stored,) = store.get(collection, [h.id])
    assert h.score == pytest.approx(float(stored.vector @ xq[1]), abs=1e-4)


def test_search_k_larger_than_collection_and_with_vectors(store: VectorStore,
                                                          collection: str) -> None:
    store.create(collection, D)
    items = make_items(6)
    store.upsert(collection, items)
    (hits,) = store.search(collection, items[2].vector, k=50, with_vectors=True,
                           consistency=STRONG)
    assert sorted(h.id for h in hits) == sorted(it.id for it in items)
    np.testing.assert_allclose(hits[0].vector, items[2].vector, atol=1e-6)


FILTERS = [
    Condition("lang", "eq", "fr"),
    Condition("n", "in", [1, 4, 9, 100]),
    Condition("n", "gte", 20),
    Condition("score", "lt", 0.45),
    Condition("even", "eq", True),
    And((Condition("lang", "in", ["en", "de"]), Condition("n", "lt", 12))),
    Or((Condition("lang", "eq", "de"), And((Condition("n", "gt", 25),
                                            Condition("even", "eq", False))))),
    Condition("missing", "eq", "x"),
]


@pytest.mark.parametrize("flt", FILTERS, ids=[str(i) for i in range(len(FILTERS))])
def test_filtered_search_returns_exactly_the_matching_items(store: VectorStore, collection: str,
                                                            flt: object) -> None:
    store.create(collection, D)
    items = make_items(30)
    store.upsert(collection, items)
    expected = {it.id for it in items if matches(flt, it.metadata)}  # type: ignore[arg-type]
    (hits,) = store.search(collection, items[0].vector, k=30, filter=flt,  # type: ignore[arg-type]
                           consistency=STRONG)
    assert {h.id for h in hits} == expected


HOSTILE = ['it\'s', 'say "hi"', "back\\slash", "trailing\\", '" or 1==1 or "', "' or 1==1 --",
           'x"] == "x" or metadata["n', "new\nline", "tab\there", "émoji 🚀", "\\\"", "",
           "ctl\x19\x7f", "cr\rand\x0c\x08", "\\u0019"]


def test_hostile_filter_values_match_literally(store: VectorStore, collection: str) -> None:
    store.create(collection, D)
    xb = unit_rows(len(HOSTILE) + 1, D, seed=3)
    items = [Item(f"h{i}", xb[i], "t", metadata={"tag": v, 'we"ird\\key': v})
             for i, v in enumerate(HOSTILE)]
    items.append(Item("plain", xb[-1], "t", metadata={"tag": "plain", 'we"ird\\key': "plain"}))
    store.upsert(collection, items)
    for i, v in enumerate(HOSTILE):
        for key in ("tag", 'we"ird\\key'):
            (hits,) = store.search(collection, xb[0], k=20, filter=Condition(key, "eq", v),
                                   consistency=SESSION)
            assert [h.id for h in hits] == [f"h{i}"], (key, v)
    for v in ['" or 1==1 or "x', "1 == 1", "plain\\"]:  # values stored nowhere match nothing
        (hits,) = store.search(collection, xb[0], k=20, filter=Condition("tag", "eq", v),
                               consistency=SESSION)
        assert hits == []
    (hits,) = store.search(collection, xb[0], k=20, consistency=SESSION,
                           filter=Condition("tag", "in", [HOSTILE[4], HOSTILE[5]]))
    assert {h.id for h in hits} == {"h4", "h5"}


def test_ids_with_control_characters_get_and_delete(store: VectorStore, collection: str
                                                    ) -> None:
    store.create(collection, D)
    ids = ["a\x19b", "nul\x00x", "line\nbreak\r", "bs\\u0019", "ff\x0cbs\x08"]
    xb = unit_rows(len(ids), D, seed=4)
    store.upsert(collection, [Item(i, xb[n], "t") for n, i in enumerate(ids)])
    assert [it.id for it in store.get(collection, ids)] == ids
    store.delete(collection, ids[:2])
    assert [it.id for it in store.get(collection, ids)] == ids[2:]


def test_other_encoder_is_refused(store: VectorStore, collection: str) -> None:
    store.create(collection, D, ENC)
    other = EncoderInfo("enc-b", "beef", D)
    it = make_items(1)
    with pytest.raises(EncoderMismatchError):
        store.upsert(collection, it, other)
    with pytest.raises(EncoderMismatchError):
        store.search(collection, it[0].vector, k=1, encoder=other)
    with pytest.raises(EncoderMismatchError):
        store.search(collection, np.ones((1, D + 1), np.float32), k=1)
    with pytest.raises(ValueError, match="consistency must be one of"):
        store.search(collection, it[0].vector, k=1, consistency="Sloppy")


def test_drop_and_missing_collection(store: VectorStore, collection: str) -> None:
    store.create(collection, D)
    store.drop(collection)
    assert collection not in store.list_collections()
    with pytest.raises(CollectionNotFoundError):
        store.count(collection)
    store.drop(collection)  # dropping twice is fine


def test_reopened_store_sees_data_and_encoder(store: VectorStore, collection: str, backend: str,
                                              request: pytest.FixtureRequest,
                                              tmp_path: Path) -> None:
    store.create(collection, D, ENC)
    items = make_items(12)
    store.upsert(collection, items)
    store.delete(collection, ["doc-0"])
    store.close()
    again = open_backend(backend, request, tmp_path)
    try:
        assert again.describe(collection).encoder == ENC
        assert again.count(collection) == 11
        (hits,) = again.search(collection, items[5].vector, k=1, consistency=STRONG)
        assert hits[0].id == "doc-5"
    finally:
        again.close()


def test_calibration_is_stored_with_the_collection_and_read_back_after_reopening(
        store: VectorStore, collection: str, backend: str, request: pytest.FixtureRequest,
        tmp_path: Path) -> None:
    store.create(collection, D, ENC)
    assert store.describe(collection).calibration is None
    cal = {"dense_weight": 0.3, "source": "manual", "signals": {"dense": 0.5}}
    store.set_calibration(collection, cal)
    assert store.describe(collection).calibration == cal
    store.upsert(collection, make_items(3))  # writes keep it
    store.close()
    again = open_backend(backend, request, tmp_path)
    try:
        assert again.describe(collection).calibration == cal
        again.set_calibration(collection, None)
        assert again.describe(collection).calibration is None
        # the last calibration job's state, beside it (what every replica answers)
        job = {"collection": collection, "state": "done", "queued_at": 1.5,
               "calibration": cal}
        again.set_calibration_job(collection, job)
        assert again.describe(collection).calibration_job == job
        assert again.describe(collection).calibration is None  # one does not touch the other
    finally:
        again.close()
    with pytest.raises(CollectionNotFoundError):
        store.set_calibration("t_missing_" + collection[2:], cal)


def test_sample_draws_seeded_items_with_vectors_and_the_total(store: VectorStore,
                                                              collection: str) -> None:
    store.create(collection, D, ENC)
    items = {it.id: it for it in make_items(30)}
    store.upsert(collection, list(items.values()))
    got, total = store.sample(collection, 8, seed=5)
    assert total == 30 and len(got) == 8 and len({it.id for it in got}) == 8
    assert [it.id for it in store.sample(collection, 8, seed=5)[0]] == [it.id for it in got]
    for it in got:
        assert it.text == items[it.id].text
        np.testing.assert_allclose(it.vector, items[it.id].vector, atol=1e-6)
    everything, _ = store.sample(collection, 100)
    assert sorted(it.id for it in everything) == sorted(items)


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_hybrid_collection_keeps_the_contract_in_every_mode(store: VectorStore, collection: str,
                                                            mode: str) -> None:
    """Where the backend has BM25 (all but Milvus 2.3.5, which refuses it by name): filters,
    idempotent upserts, replaced texts, deletes and exact counts behave the same in every
    search mode of a hybrid collection."""
    if not store.bm25_available():
        with pytest.raises(UnsupportedError, match="BM25"):
            store.create(collection, D, hybrid=True)
        return
    assert store.create(collection, D, hybrid=True).hybrid
    items = make_items(30)
    for it in items:
        it.text = f"common words {it.metadata['lang']} number{it.metadata['n']}"
    store.upsert(collection, items)
    store.upsert(collection, items)  # idempotent
    assert store.count(collection) == 30
    store.delete(collection, ["doc-0", "doc-1", "doc-2"])
    replaced = Item("doc-3", items[3].vector, "replaced zebra", metadata=items[3].metadata)
    store.upsert(collection, [replaced])
    assert store.count(collection) == 27
    live = items[4:]
    flt = Condition("lang", "eq", "fr")
    (hits,) = store.search(collection, items[5].vector, k=30, filter=flt, consistency=STRONG,
                           query_text=["common words"], mode=mode)
    expected = {it.id for it in live if it.metadata["lang"] == "fr"}  # doc-3 is "en"
    assert {h.id for h in hits} == expected
    assert all(h.metadata["lang"] == "fr" for h in hits)
    assert not {"doc-0", "doc-1", "doc-2"} & {h.id for h in hits}
    (zebra,) = store.search(collection, items[5].vector, k=5, consistency=STRONG,
                            query_text=["zebras"], mode=mode)
    if mode == "dense":
        assert zebra[0].id == "doc-5"  # its own vector
    else:
        assert zebra[0].id == "doc-3" and zebra[0].text == "replaced zebra"
    (gone,) = store.search(collection, items[6].vector, k=5, consistency=STRONG,
                           query_text=["number0"], mode=mode)
    assert "doc-0" not in {h.id for h in gone}
