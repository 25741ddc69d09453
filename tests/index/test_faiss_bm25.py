"""Hybrid FAISS collections: the in-process BM25 index (index.hybrid.bm25) checked against bm25s,
its stemming and stop words, filters, writes, fusion with the dense side, persistence, and
what is refused on a collection made without it."""

from __future__ import annotations

import json
from pathlib import Path

import bm25s
import numpy as np
import pytest
import Stemmer

from index import CollectionExistsError, Condition, FaissStore, Hit, Item, UnsupportedError
from index.hybrid.analysis import BM25_B, BM25_K1
from index.hybrid.bm25 import TF_SCALE, BM25Index, term_ids
from index.hybrid.fusion import candidates, fuse

DIM = 8
CORPUS = [
    "The cat runs across the garden every morning.",
    "A quick brown fox jumps over the lazy dog.",
    "Stock markets fell sharply on Monday after the interest rate decision.",
    "The central bank raised interest rates to fight inflation.",
    "Heavy rain caused flooding in the city centre and closed several roads.",
    "The football team won the championship after a dramatic penalty shootout.",
    "Children are playing in the snow near the frozen lake.",
    "A chef is cooking pasta with fresh tomatoes and basil in the kitchen.",
    "The physician examined the patient and ordered a blood test.",
    "Researchers discovered a new species of frog in the rainforest.",
    "The spacecraft entered orbit around Mars after a seven month journey.",
    "Solar panels convert sunlight into electricity for the village.",
    "The museum opened a new exhibition of impressionist paintings.",
    "Running shoes with good cushioning reduce the risk of knee injuries.",
    "Cats and dogs can live together peacefully if introduced slowly.",
    "The recipe calls for two cups of flour, sugar and three eggs.",
    "Firmware build kq7zeta fails on startup with a memory error.",
    "The train to Paris was delayed by two hours because of a strike.",
    "Vaccines train the immune system to recognise viruses.",
    "The old library holds rare manuscripts from the fifteenth century.",
    "Electric cars need charging stations along the highway.",
    "The orchestra performed Beethoven's ninth symphony to a full hall.",
    "Bees pollinate flowers and help crops such as apples grow.",
    "The mountain climbers reached the summit before the storm arrived.",
    "Machine learning models need large amounts of labelled data.",
    "The river flooded the farmland after weeks of heavy rain.",
    "A cat sleeps on the warm windowsill in the afternoon sun.",
    "Interest in running marathons has grown among older adults.",
    "The bakery sells fresh bread, croissants and cakes every morning.",
    "Engineers tested the bridge for earthquake resistance.",
]
QUERIES = [
    "running cats",
    "interest rates and inflation",
    "heavy rain flooding",
    "fresh bread every morning",
    "train train delayed",  # a repeated query term counts twice
    "kq7zeta firmware",
    "symphony zzzunknownword",
    "the dog and the cat",
]


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


VECTORS = unit(np.random.default_rng(0), len(CORPUS))


def doc_id(i: int) -> str:
    return f"d{i:02d}"


def items() -> list[Item]:
    return [Item(doc_id(i), VECTORS[i], t, metadata={"n": i, "even": i % 2 == 0})
            for i, t in enumerate(CORPUS)]


@pytest.fixture
def store(tmp_path: Path) -> FaissStore:
    s = FaissStore(tmp_path / "faiss")
    info = s.create("docs", DIM, hybrid=True)
    assert info.hybrid
    s.upsert("docs", items())
    return s


def bm25(store: FaissStore, text: str, k: int = len(CORPUS), **kw: object) -> list[Hit]:
    return store.search("docs", VECTORS[:1], k, query_text=[text], mode="bm25", **kw)[0]


def reference() -> tuple[bm25s.BM25, Stemmer.Stemmer]:
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(CORPUS, stopwords="en", stemmer=stemmer,
                                   show_progress=False), show_progress=False)
    return retriever, stemmer


def test_scores_are_bm25s_scores_times_k1_plus_1(store: FaissStore) -> None:
    retriever, stemmer = reference()
    assert (retriever.k1, retriever.b, retriever.method) == (BM25_K1, BM25_B, "lucene")
    for q in QUERIES:
        tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, return_ids=False,
                                show_progress=False)[0]
        ref = retriever.get_scores(tokens) * TF_SCALE
        hits = bm25(store, q)
        got = {h.id: h.score for h in hits}
        expected = {doc_id(i): float(s) for i, s in enumerate(ref) if s > 0}
        assert expected, q  # every query shares a term with some document
        assert got.keys() == expected.keys(), q
        for i, s in expected.items():
            assert got[i] == pytest.approx(s, abs=1e-4), (q, i)
        assert all(h.sources == {"bm25": h.score} for h in hits)
        assert [h.id for h in hits] == sorted(got, key=lambda i: (-got[i], i))  # best first
        top3 = bm25(store, q, k=3)
        assert [h.id for h in top3] == [h.id for h in hits[:3]]


def test_repeated_query_terms_count_once_per_occurrence(store: FaissStore) -> None:
    once = {h.id: h.score for h in bm25(store, "delayed strike")}
    twice = {h.id: h.score for h in bm25(store, "delayed delayed strike")}
    delayed = {h.id: h.score for h in bm25(store, "delayed")}
    assert twice["d17"] == pytest.approx(once["d17"] + delayed["d17"], rel=1e-6)


def test_stemming_and_stop_words(store: FaissStore) -> None:
    hits = bm25(store, "running cats")
    assert "d00" in {h.id for h in hits}  # "The cat runs across the garden"
    assert {h.id for h in hits} >= {"d13", "d14", "d26", "d27"}  # running, cats, cat
    assert bm25(store, "the and of to is") == []
    assert bm25(store, "zzzunknown") == []


def test_equal_scores_are_ordered_by_id(tmp_path: Path) -> None:
    s = FaissStore(tmp_path / "f")
    s.create("docs", DIM, hybrid=True)
    v = unit(np.random.default_rng(1), 4)
    s.upsert("docs", [Item("z", v[0], "red apple"), Item("b", v[1], "red apple"),
                      Item("m", v[2], "red apple"), Item("x", v[3], "green pear")])
    hits = s.search("docs", v[:1], 2, query_text=["apple"], mode="bm25")[0]
    assert [h.id for h in hits] == ["b", "m"]
    assert hits[0].score == hits[1].score > 0


def test_filters_restrict_bm25_and_hybrid(store: FaissStore) -> None:
    even = Condition("even", "eq", True)
    unfiltered = {h.id for h in bm25(store, "cat dog running")}
    assert any(int(i[1:]) % 2 for i in unfiltered)  # the filter has something to remove
    filtered = bm25(store, "cat dog running", filter=even)
    assert filtered and {h.id for h in filtered} == {i for i in unfiltered if int(i[1:]) % 2 == 0}
    assert all(h.metadata["even"] for h in filtered)
    for mode in ("hybrid", None):
        hyb = store.search("docs", VECTORS[1:2], 10, query_text=["cat dog running"],
                           mode=mode, filter=Condition("n", "lt", 10))[0]
        assert hyb and all(h.metadata["n"] < 10 for h in hyb)
    assert bm25(store, "cat", filter=Condition("n", "gt", 100)) == []


def test_writes_change_bm25_results_at_once(store: FaissStore) -> None:
    assert bm25(store, "kq7zeta")[0].id == "d16"
    before = bm25(store, "garden")
    assert [h.id for h in before] == ["d00"]
    store.upsert("docs", [Item("d16", VECTORS[16], "The garden shed needs a new roof.")])
    assert bm25(store, "kq7zeta") == []
    after = {h.id: h.score for h in bm25(store, "garden")}
    assert after.keys() == {"d00", "d16"}
    assert after["d00"] < before[0].score  # df rose: "garden" is worth less now
    store.delete("docs", ["d00"])
    assert [h.id for h in bm25(store, "garden")] == ["d16"]
    store.upsert("docs", [Item("new", VECTORS[0], "kq7zeta returns")])
    assert [h.id for h in bm25(store, "kq7zeta")] == ["new"]


def test_hybrid_fuses_both_sides(store: FaissStore) -> None:
    q, text = VECTORS[26:27], "cat sleeps windowsill"  # d26 on both sides
    default = store.search("docs", q, 5, query_text=[text])[0]
    hybrid = store.search("docs", q, 5, query_text=[text], mode="hybrid")[0]
    assert [(h.id, h.score) for h in default] == [(h.id, h.score) for h in hybrid]
    assert hybrid[0].id == "d26"
    assert hybrid[0].sources is not None and hybrid[0].sources.keys() == {"dense", "bm25"}
    assert hybrid[0].sources["dense"] == pytest.approx(1.0, abs=1e-5)
    depth = candidates(5)
    dense = store.search("docs", q, depth, mode="dense")[0]
    lexical = store.search("docs", q, depth, query_text=[text], mode="bm25")[0]
    expected = fuse(dense, lexical, 5)
    assert [(h.id, h.score, h.sources) for h in hybrid] == [
        (h.id, h.score, h.sources) for h in expected]
    rrf = store.search("docs", q, 5, query_text=[text], fusion="rrf")[0]
    assert [h.score for h in rrf] == [h.score for h in fuse(dense, lexical, 5, fusion="rrf")]
    assert store.search("docs", q, 3)[0][0].sources == {"dense": pytest.approx(1.0, abs=1e-5)}
    with pytest.raises(ValueError, match="fusion"):
        store.search("docs", q, 5, query_text=[text], fusion="nope")


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_vectors_on_every_hit_in_every_mode(store: FaissStore, mode: str) -> None:
    hits = store.search("docs", VECTORS[:2], 40, query_text=["cat", "rain"], mode=mode,
                        with_vectors=True)
    assert all(row for row in hits)
    for row in hits:
        for h in row:
            assert h.vector is not None
            np.testing.assert_array_equal(h.vector, VECTORS[int(h.id[1:])])


def test_bm25_survives_close_reopen_and_compact(store: FaissStore, tmp_path: Path) -> None:
    store.upsert("docs", [Item("d05", VECTORS[5], "The chess club won the championship.")])
    store.delete("docs", ["d09"])
    want = [[(h.id, h.score) for h in bm25(store, q)] for q in QUERIES]
    want_hybrid = store.search("docs", VECTORS[:3], 4, query_text=QUERIES[:3])
    store.close()
    for _ in range(2):
        again = FaissStore(tmp_path / "faiss")
        assert again.describe("docs").hybrid
        assert [[(h.id, h.score) for h in bm25(again, q)] for q in QUERIES] == want
        hyb = again.search("docs", VECTORS[:3], 4, query_text=QUERIES[:3])
        assert [[h.id for h in r] for r in hyb] == [[h.id for h in r] for r in want_hybrid]
        again.compact("docs")
        again.close()
    assert json.loads((tmp_path / "faiss" / "docs" / "collection.json").read_text())["hybrid"]


def test_refused_without_bm25_and_on_a_different_hybrid_flag(tmp_path: Path) -> None:
    s = FaissStore(tmp_path / "f")
    assert s.bm25_available()
    assert not s.create("dense", DIM).hybrid
    s.upsert("dense", items()[:3])
    for mode in ("bm25", "hybrid"):
        with pytest.raises(UnsupportedError, match="no BM25 index"):
            s.search("dense", VECTORS[:1], 3, query_text=["cat"], mode=mode)
    hits = s.search("dense", VECTORS[:1], 1, query_text=["cat"])[0]  # default: dense
    assert hits[0].sources == {"dense": pytest.approx(1.0, abs=1e-5)}
    with pytest.raises(CollectionExistsError, match=r"hybrid False \(asked: True\)"):
        s.create("dense", DIM, hybrid=True)
    s.create("hyb", DIM, hybrid=True)
    with pytest.raises(CollectionExistsError, match=r"hybrid True \(asked: False\)"):
        s.create("hyb", DIM)
    assert s.create("hyb", DIM, hybrid=True).hybrid
    with pytest.raises(ValueError, match="query text"):
        s.search("hyb", VECTORS[:1], 3, mode="bm25")


def test_old_collection_json_without_the_flag_is_dense(tmp_path: Path) -> None:
    s = FaissStore(tmp_path / "f")
    s.create("old", DIM)
    path = tmp_path / "f" / "old" / "collection.json"
    meta = json.loads(path.read_text())
    del meta["hybrid"]
    path.write_text(json.dumps(meta))
    s.close()
    again = FaissStore(tmp_path / "f")
    assert again.describe("old").hybrid is False
    with pytest.raises(CollectionExistsError):
        again.create("old", DIM, hybrid=True)


def test_index_alone() -> None:
    vocab: dict[str, int] = {}
    idx = BM25Index([term_ids(d, vocab) for d in (["a", "b"], ["a"], [])], vocab)
    assert idx.n_docs == 3
    s = idx.scores(["a"])
    assert s[2] == 0 and s[1] > s[0] > 0  # shorter document, same tf: higher
    assert not idx.scores(["zz"]).any()
    term_ids(["later"], vocab)  # a term the index was built without is no hit
    assert not idx.scores(["later"]).any()
    assert idx.top("nothing", 5, ["x", "y", "z"]) == []
    cats = BM25Index.from_texts(["The cat runs", "dogs bark", "cats and dogs"])
    assert [j for j, _ in cats.top("running cat", 5, ["x", "y", "z"])] == [0, 2]


def test_same_scores_and_rankings_as_milvus_lite(store: FaissStore, tmp_path: Path) -> None:
    """``hybrid`` means the same on both backends: BM25 scores (to float32 precision) and
    fused rankings agree with a hybrid Milvus Lite collection of the same items."""
    from index import MilvusStore

    lite = MilvusStore(str(tmp_path / "lite.db"))
    try:
        lite.create("docs", DIM, hybrid=True)
        lite.upsert("docs", items())
        for q in QUERIES:
            theirs = {h.id: h.score for h in lite.search(
                "docs", VECTORS[:1], 30, query_text=[q], mode="bm25", consistency="Strong")[0]}
            ours = {h.id: h.score for h in bm25(store, q)}
            assert ours and theirs == {i: pytest.approx(s, rel=1e-5) for i, s in ours.items()}
            fused = [[h.id for h in row] for row in (s.search(
                "docs", VECTORS[3:4], 5, query_text=[q], consistency="Strong")[0]
                for s in (lite, store))]
            assert fused[0] == fused[1], q
    finally:
        lite.close()


def test_writes_racing_searches_leave_no_stale_index(store: FaissStore) -> None:
    import threading

    rng = np.random.default_rng(2)
    vecs = unit(rng, 40)
    done = threading.Event()
    errors: list[BaseException] = []

    def search() -> None:
        try:
            while not done.is_set():
                bm25(store, "cat tokenword")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    reader = threading.Thread(target=search)
    reader.start()
    try:
        for i in range(40):
            store.upsert("docs", [Item(f"w{i:02d}", vecs[i], f"tokenword{i} cat")])
    finally:
        done.set()
        reader.join()
    assert not errors
    for i in range(40):
        assert [h.id for h in bm25(store, f"tokenword{i}")] == [f"w{i:02d}"]
