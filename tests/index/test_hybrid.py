"""Hybrid search: Milvus' own BM25 (over stemmed text) beside the dense vectors, fused (on
Milvus Lite, with the shipped encoder so paraphrases mean something); refused where there is
no BM25; Lite collections sealed without anyone asking."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from index import (
    CollectionExistsError,
    Condition,
    EncoderInfo,
    FaissStore,
    Hit,
    Item,
    MilvusStore,
    UnsupportedError,
    fuse,
)
from index.hybrid.analysis import BM25_K1, analyzed
from index.hybrid.fusion import candidates, query_weight
from index.milvus.schema import BM25_FIELD, bm25_query

MODEL = Path(__file__).resolve().parents[2] / "models" / "encoder-default"
DOCS = ["a physician examined the patient in the hospital",
        "the stock market fell sharply on monday",
        "a kitten is sleeping on the sofa",
        "heavy rain caused flooding in the city",
        "the football team won the championship",
        "firmware build kq7zeta fails on startup",
        "children are playing in the snow",
        "a chef is cooking pasta in the kitchen",
        "firmware build kq8zeda fails on startup"]  # a near miss for the keyword
KEYWORD = "kq7zeta"  # in doc-5 only: a rare token the encoder never saw
PARAPHRASE = "kids enjoying winter"  # doc-6, and no word shared with any document
K = len(DOCS)  # every document on the dense side: fused scores differ wherever both sides do


@pytest.fixture(scope="module")
def embed():  # type: ignore[no-untyped-def]
    import encoder

    enc = encoder.load(MODEL)
    return enc.encode, EncoderInfo(enc.name, enc.fingerprint, enc.dim)


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory, embed) -> Iterator[MilvusStore]:  # type: ignore[no-untyped-def]
    encode, info = embed
    store = MilvusStore(str(tmp_path_factory.mktemp("hybrid") / "lite.db"))
    store.create("docs", info.dim, info, hybrid=True)
    xb = encode(DOCS)
    store.upsert("docs", [Item(f"doc-{i}", xb[i], t, metadata={"n": i})
                          for i, t in enumerate(DOCS)], info)
    yield store
    store.close()


def search(store: MilvusStore, embed, query: str, **kw) -> list[Hit]:  # type: ignore[no-untyped-def]
    encode, info = embed
    kw.setdefault("k", K)
    (hits,) = store.search("docs", encode([query]), encoder=info, query_text=[query],
                           consistency="Strong", **kw)
    return hits


def test_describe_says_hybrid_and_create_checks_it(hybrid: MilvusStore, embed) -> None:  # type: ignore[no-untyped-def]
    _, info = embed
    assert hybrid.describe("docs").hybrid
    assert hybrid.create("docs", info.dim, info, hybrid=True).hybrid
    with pytest.raises(CollectionExistsError, match="hybrid"):
        hybrid.create("docs", info.dim, info)
    reopened = MilvusStore(hybrid.uri)
    try:
        assert reopened.describe("docs").hybrid
    finally:
        reopened.close()


def test_rare_keyword_found_by_bm25_and_hybrid(hybrid: MilvusStore, embed) -> None:  # type: ignore[no-untyped-def]
    bm25 = search(hybrid, embed, KEYWORD, mode="bm25")
    assert [h.id for h in bm25] == ["doc-5"]  # the only document with the word
    assert bm25[0].score > 0 and bm25[0].sources == {"bm25": bm25[0].score}
    for fusion in ("convex", "rrf", "weighted"):
        top = search(hybrid, embed, KEYWORD, mode="hybrid", fusion=fusion)[0]
        assert top.id == "doc-5", fusion
        assert set(top.sources or {}) == {"dense", "bm25"}
        assert top.sources["bm25"] == pytest.approx(bm25[0].score)  # type: ignore[index]


def test_paraphrase_found_by_dense_and_hybrid(hybrid: MilvusStore, embed) -> None:  # type: ignore[no-untyped-def]
    assert search(hybrid, embed, PARAPHRASE, mode="bm25") == []  # no shared word
    dense = search(hybrid, embed, PARAPHRASE, mode="dense")
    assert dense[0].id == "doc-6" and dense[0].sources == {"dense": dense[0].score}
    fused = search(hybrid, embed, PARAPHRASE, mode="hybrid")
    assert fused[0].id == "doc-6" and set(fused[0].sources or {}) == {"dense"}
    # convex: no BM25 hit leaves the dense side all the weight, whatever w: 1 · 1
    assert fused[0].score == pytest.approx(1.0)
    rrf = search(hybrid, embed, PARAPHRASE, mode="hybrid", fusion="rrf")
    assert rrf[0].id == "doc-6" and rrf[0].score == pytest.approx(1 / 61)  # rank 1 on one side


def test_default_mode_is_hybrid_with_text_dense_without(hybrid: MilvusStore, embed) -> None:  # type: ignore[no-untyped-def]
    encode, info = embed
    with_text = search(hybrid, embed, KEYWORD)
    assert with_text == search(hybrid, embed, KEYWORD, mode="hybrid")
    (no_text,) = hybrid.search("docs", encode([KEYWORD]), K, encoder=info)
    assert [h.id for h in no_text] == [h.id for h in search(hybrid, embed, KEYWORD,
                                                            mode="dense")]
    with pytest.raises(ValueError, match="query text"):
        hybrid.search("docs", encode([KEYWORD]), K, mode="bm25")
    with pytest.raises(ValueError, match="mode must be one of"):
        search(hybrid, embed, KEYWORD, mode="sparse")
    with pytest.raises(ValueError, match="fusion must be one of"):
        search(hybrid, embed, KEYWORD, fusion="max")


def test_fusion_is_deterministic_and_agrees_with_milvus_rrf(hybrid: MilvusStore, embed) -> None:  # type: ignore[no-untyped-def]
    """Ours against Milvus' own ``hybrid_search`` with ``RRFRanker(60)``: same hits, same
    scores; ours is also the same on every run."""
    from pymilvus import AnnSearchRequest, RRFRanker

    encode, _ = embed
    query = "a cat sleeping in the snow on monday"  # both sides find several documents
    ours = search(hybrid, embed, query, mode="hybrid", k=5, fusion="rrf")
    assert all(search(hybrid, embed, query, mode="hybrid", k=5, fusion="rrf") == ours
               for _ in range(3))
    scores = [h.score for h in ours]
    assert scores == sorted(scores, reverse=True)
    # each side searched candidates(k) deep, as ours, with the analysed query
    deep = candidates(5)
    reqs = [AnnSearchRequest([encode([query])[0].tolist()], "vector", {"metric_type": "IP"},
                             deep),
            AnnSearchRequest([analyzed(query)], "sparse", {"metric_type": "BM25"}, deep)]
    (theirs,) = hybrid._connect().hybrid_search("docs", reqs, RRFRanker(60), limit=5)
    assert {h["id"]: pytest.approx(h["distance"], abs=1e-6) for h in theirs} == {
        h.id: h.score for h in ours}


def test_bm25_is_stemmed_and_ranks_as_bm25s(hybrid: MilvusStore, embed) -> None:  # type: ignore[no-untyped-def]
    """Words meet their stems ("sleeps" finds "sleeping"), stop words alone find nothing, and
    Milvus' scores are bm25s' (same analysis, k1 and b) on the same documents."""
    import bm25s
    import Stemmer

    hits = search(hybrid, embed, "Kittens SLEEPS", mode="bm25")
    assert [h.id for h in hits] == ["doc-2"]
    assert search(hybrid, embed, "the of and is", mode="bm25") == []
    query = "firmware builds failing at startup in the city"
    ours = {h.id: h.score for h in search(hybrid, embed, query, mode="bm25")}
    stem = Stemmer.Stemmer("english")
    ref = bm25s.BM25()
    ref.index(bm25s.tokenize(DOCS, stopwords="en", stemmer=stem, show_progress=False),
              show_progress=False)
    docs, scores = ref.retrieve(bm25s.tokenize([query], stopwords="en", stemmer=stem,
                                               show_progress=False), k=len(DOCS),
                                show_progress=False)
    # bm25s leaves out BM25's constant (k1 + 1) factor; Milvus keeps it: same ranking
    theirs = {f"doc-{int(d)}": float(s) * (BM25_K1 + 1)
              for d, s in zip(docs[0], scores[0], strict=True) if s > 0}
    assert set(ours) == set(theirs) == {"doc-3", "doc-5", "doc-8"}
    assert ours == {i: pytest.approx(s, rel=1e-3) for i, s in theirs.items()}


def test_documents_keep_their_text_and_hide_the_analysed_copy(hybrid: MilvusStore) -> None:
    (it,) = hybrid.get("docs", ["doc-2"])
    assert it.text == DOCS[2] and BM25_FIELD not in it.metadata
    assert analyzed(it.text) == "kitten sleep sofa"


def test_lite_seals_what_was_written(tmp_path: Path) -> None:
    """Past SEAL_ROWS rows the write itself seals; fewer are sealed once writes stop; every
    row stays searchable through it."""
    import time

    store = MilvusStore(str(tmp_path / "seal.db"))
    sealed: list[str] = []
    flush = store.flush
    store._sealer._flush = lambda c: (flush(c), sealed.append(c))  # type: ignore[assignment]
    store._sealer.rows, store._sealer.quiet_s = 8, 0.2
    try:
        store.create("s", 4, hybrid=True)
        eye = np.eye(4, dtype=np.float32)
        store.upsert("s", [Item(f"a{i}", eye[i % 4], f"word{i} common") for i in range(8)])
        assert sealed == ["s"] and store._sealer.pending() == []  # 8 rows: sealed at once
        store.upsert("s", [Item("b", eye[1], "straggler common")])
        assert sealed == ["s"] and store._sealer.pending() == ["s"]
        deadline = time.monotonic() + 10
        while len(sealed) < 2 and time.monotonic() < deadline:  # the flush has ended
            time.sleep(0.05)
        assert store._sealer.pending() == []
        assert sealed == ["s", "s"]  # the quiet period sealed the straggler
        assert store.count("s") == 9
        hits = store.search("s", eye[:1], 20, query_text=["common"], mode="bm25")
        assert len(hits[0]) == 9
    finally:
        store.close()


def test_bm25_queries_leave_out_stop_words() -> None:
    assert bm25_query("The cat is on the mat").split() == ["cat", "mat"]
    assert bm25_query("Theory of THE thermal").split() == ["Theory", "thermal"]
    assert bm25_query("to be or not to be") == "to be or not to be"  # nothing else: all kept


def test_filter_applies_to_both_sides(hybrid: MilvusStore, embed) -> None:  # type: ignore[no-untyped-def]
    hits = search(hybrid, embed, KEYWORD, filter=Condition("n", "lt", 5))
    assert hits and all(h.metadata["n"] < 5 for h in hits)
    assert all("bm25" not in (h.sources or {}) for h in hits)


def fake_hits(side: str, ids: list[str], scores: list[float]) -> list[Hit]:
    return [Hit(i, s, "", None, {}, sources={side: s}) for i, s in zip(ids, scores, strict=True)]


def test_fuse_rrf_weighted_and_ties_by_id() -> None:
    dense = fake_hits("dense", ["b", "a", "c"], [0.9, 0.8, 0.1])
    bm25 = fake_hits("bm25", ["a", "d"], [3.0, 1.0])
    rrf = fuse(dense, bm25, k=4, fusion="rrf")
    assert [h.id for h in rrf] == ["a", "b", "d", "c"]  # 1/62+1/61, 1/61, 1/62, 1/63
    assert rrf[0].score == pytest.approx(1 / 62 + 1 / 61)
    assert rrf[0].sources == {"dense": 0.8, "bm25": 3.0}
    assert rrf[1].sources == {"dense": 0.9}
    # equal ranks on different sides tie exactly: the id decides
    tie = fuse(fake_hits("dense", ["z", "y"], [0.5, 0.4]),
               fake_hits("bm25", ["x", "w"], [2.0, 1.0]), k=4, fusion="rrf")
    assert [h.id for h in tie] == ["x", "z", "w", "y"]
    w = fuse(dense, bm25, k=2, fusion="weighted", dense_weight=0.25)
    expected_a = 0.25 * (1 + 0.8) / 2 + 0.75 * 2 / np.pi * np.arctan(3.0)
    assert w[0].id == "a" and w[0].score == pytest.approx(expected_a)
    assert len(w) == 2


def test_fuse_convex_normalises_each_side_by_its_best() -> None:
    dense = fake_hits("dense", ["b", "a", "c"], [0.9, 0.8, -0.2])
    bm25 = fake_hits("bm25", ["a", "d"], [3.0, 1.5])
    # lists shorter than the depth: each side's confidence is its best over its floor
    w = 0.7 * 1.9 / (0.7 * 1.9 + 0.3 * 1.0)
    assert query_weight(dense, bm25, 0.7) == pytest.approx(w)
    # cut at the depth: best minus last (dense), 1 − last / best (BM25)
    assert query_weight(dense, bm25, 0.7, depth=2) == pytest.approx(
        0.7 * 1.1 / (0.7 * 1.1 + 0.3 * 0.5))
    got = {h.id: h.score for h in fuse(dense, bm25, k=4, dense_weight=0.7)}
    # lists shorter than the depth searched: a side that missed a hit adds 0
    assert got == pytest.approx({"a": w * 1.8 / 1.9 + (1 - w),
                                 "b": w,
                                 "d": (1 - w) * 0.5,
                                 "c": w * 0.8 / 1.9})
    assert [h.id for h in fuse(dense, bm25, k=4, dense_weight=0.7)] == ["a", "b", "c", "d"]
    # w = 1 is the dense ranking, w = 0 the BM25 one (then the dense-only hits, by id)
    assert [h.id for h in fuse(dense, bm25, k=3, dense_weight=1.0)] == ["b", "a", "c"]
    assert [h.id for h in fuse(dense, bm25, k=2, dense_weight=0.0)] == ["a", "d"]
    assert fuse([], [], k=3) == []
    # no BM25 hit at all: the dense side alone, whatever the weight
    assert [h.id for h in fuse(dense, [], k=3, dense_weight=0.2)] == ["b", "a", "c"]


def test_fuse_convex_weights_each_query_by_its_sides_confidence() -> None:
    unsure = fake_hits("dense", ["a", "b", "c"], [0.60, 0.58, 0.56])  # flat cosines
    sure = fake_hits("dense", ["a", "b", "c"], [0.9, 0.5, 0.1])
    sharp = fake_hits("bm25", ["c", "b", "a"], [9.0, 1.0, 0.5])  # one rare term matched
    flat = fake_hits("bm25", ["c", "b", "a"], [2.0, 1.9, 1.8])  # common words only
    assert query_weight(unsure, sharp, 0.7, depth=3) < 0.1
    assert query_weight(sure, flat, 0.7, depth=3) > 0.9
    assert query_weight(sure, sharp, 0.7, depth=3) == pytest.approx(
        0.7 * 0.8 / (0.7 * 0.8 + 0.3 * 17 / 18))
    assert fuse(unsure, sharp, k=1, dense_weight=0.7, depth=3)[0].id == "c"  # BM25's best
    assert fuse(sure, flat, k=1, dense_weight=0.7, depth=3)[0].id == "a"  # dense's best
    # one document matched by BM25 (a rare term) is a sure match, not a flat list
    rare = fake_hits("bm25", ["c"], [7.0])
    assert query_weight(sure, rare, 0.7, depth=3) == pytest.approx(0.7 * 0.8 / (0.7 * 0.8 + 0.3))
    assert [h.id for h in fuse(unsure, rare, k=3, dense_weight=0.7, depth=3)][0] == "c"
    # every fused hit says the weight its query was fused with, and the confidences behind it
    for d, b in ((unsure, sharp), (sure, flat), (sure, rare)):
        mixes = {h.mix for h in fuse(d, b, k=3, dense_weight=0.7, depth=3)}
        assert len(mixes) == 1
        (mix,) = mixes
        assert mix is not None and mix.weight == pytest.approx(query_weight(d, b, 0.7, depth=3))
        assert mix.weight == pytest.approx(0.7 * mix.dense / (0.7 * mix.dense + 0.3 * mix.bm25))
    assert fuse(sure, sharp, k=3, dense_weight=0.7, depth=3)[0].mix == pytest.approx(
        (query_weight(sure, sharp, 0.7, depth=3), 0.8, 17 / 18))
    assert {h.mix for h in fuse(sure, sharp, k=3, fusion="weighted", dense_weight=0.7)} == {
        (0.7, None, None)}
    assert {h.mix for h in fuse(sure, sharp, k=3, fusion="rrf")} == {None}


def test_fuse_convex_gives_a_cut_sides_missing_hits_its_last_score() -> None:
    dense = fake_hits("dense", ["a", "b"], [0.8, 0.2])
    bm25 = fake_hits("bm25", ["c", "b"], [4.0, 2.0])
    w = query_weight(dense, bm25, 0.5, depth=2)  # 0.6 / (0.6 + 0.5)
    assert w == pytest.approx(0.6 / 1.1)
    full = {h.id: h.score for h in fuse(dense, bm25, k=3, dense_weight=0.5, depth=2)}
    # both lists were cut at the depth: what a side did not return ranks below its last
    assert full == pytest.approx({"a": w + (1 - w) * 0.5,
                                  "b": w * 1.2 / 1.8 + (1 - w) * 0.5,
                                  "c": w * 1.2 / 1.8 + (1 - w)})
    w = query_weight(dense, bm25, 0.5, depth=3)  # 1.8 / (1.8 + 1)
    assert w == pytest.approx(1.8 / 2.8)
    short = {h.id: h.score for h in fuse(dense, bm25, k=3, dense_weight=0.5, depth=3)}
    assert short == pytest.approx({"a": w, "b": w * 1.2 / 1.8 + (1 - w) * 0.5, "c": 1 - w})
    # the default depth is the stores' candidates(k)
    assert fuse(dense, bm25, k=3, dense_weight=0.5) == fuse(dense, bm25, 3, "convex", 0.5,
                                                            depth=candidates(3))


def test_no_bm25_on_dense_collections(tmp_path: Path) -> None:
    faiss = FaissStore(tmp_path / "faiss")
    lite = MilvusStore(str(tmp_path / "lite.db"))
    try:
        for store in (faiss, lite):
            store.create("dense", 4)
            store.upsert("dense", [Item("a", np.eye(4, dtype=np.float32)[0], "a word")])
            hits = store.search("dense", np.eye(4, dtype=np.float32)[:1], 1,
                                query_text=["word"], consistency="Strong")
            assert hits[0][0].sources == {"dense": pytest.approx(1.0)}  # default: dense
            with pytest.raises(UnsupportedError, match="no BM25 index"):
                store.search("dense", np.eye(4, dtype=np.float32)[:1], 1, query_text=["a"],
                             mode="hybrid")
    finally:
        lite.close()


@pytest.mark.slow
def test_milvus_2_3_5_refuses_hybrid_naming_its_version(milvus_server_uri: str) -> None:
    store = MilvusStore(milvus_server_uri)
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        version = store.server_version()
        assert "2.3.5" in version
        with pytest.raises(UnsupportedError, match=version.replace(".", r"\.")):
            store.create(name, 4, hybrid=True)
        assert name not in store.list_collections()
        assert not store.create(name, 4).hybrid  # dense collections keep working
        store.upsert(name, [Item("a", np.eye(4, dtype=np.float32)[0], "a word")])
        (hits,) = store.search(name, np.eye(4, dtype=np.float32)[:1], 1, consistency="Strong")
        assert [h.id for h in hits] == ["a"]
    finally:
        store.drop(name)
        store.close()


def test_hybrid_runs_its_two_sides_at_once_in_the_callers_context() -> None:
    """``index.steps.search``: the BM25 side runs on a thread of its own while the caller's
    runs the dense side (each waits here for the other to start: one after the other this
    would never finish), with the caller's context variables; an error on the dense side
    comes out after the BM25 side is done, not before."""
    import contextvars
    import threading

    from index import steps
    from index.store import CollectionInfo

    who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")
    who.set("caller")
    info = CollectionInfo("c", 2, None, hybrid=True)
    both, seen, done = threading.Barrier(2, timeout=10), [], []
    xq = np.array([[1.0, 0.0]], np.float32)

    def dense(x: np.ndarray, depth: int) -> list[list[Hit]]:
        both.wait()
        return [[Hit("a", 0.9, "a", None, {})]]

    def bm25(texts: object, depth: int) -> list[list[Hit]]:
        both.wait()
        seen.append((who.get(), threading.current_thread().name))
        done.append(True)
        return [[Hit("b", 3.0, "b", None, {})]]

    (hits,) = steps.search(info, xq, 2, encoder=None, tenant=None, mode="hybrid",
                           query_text=["q"], fusion="rrf", dense_weight=0.5, dense=dense,
                           bm25=bm25)
    assert {h.id for h in hits} == {"a", "b"}
    assert seen[0][0] == "caller" and seen[0][1].startswith("qkv-bm25")

    def broken(x: np.ndarray, depth: int) -> list[list[Hit]]:
        both.wait()
        raise RuntimeError("dense side down")

    done.clear()
    with pytest.raises(RuntimeError, match="dense side down"):
        steps.search(info, xq, 2, encoder=None, tenant=None, mode="hybrid",
                     query_text=["q"], fusion="rrf", dense_weight=0.5, dense=broken, bm25=bm25)
    assert done == [True]


def test_hybrid_starts_its_bm25_side_before_the_query_vectors_are_ready() -> None:
    """``xq`` as a function that waits for the vectors (the service encodes the queries
    meanwhile): the BM25 side has started before it is called (here it waits for that: the
    other way round this would time out); without query text, or in dense mode, the
    vectors are simply waited for."""
    import threading

    from index import steps
    from index.store import CollectionInfo, EncoderMismatchError

    info = CollectionInfo("c", 2, None, hybrid=True)
    started, got = threading.Event(), []

    def vectors() -> np.ndarray:
        assert started.wait(10), "the BM25 side did not start first"
        return np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)

    def dense(x: np.ndarray, depth: int) -> list[list[Hit]]:
        got.append(x.copy())
        return [[Hit(f"d{i}", 0.9, "", None, {})] for i in range(len(x))]

    def bm25(texts: object, depth: int) -> list[list[Hit]]:
        started.set()
        return [[Hit("b", 3.0, "", None, {})], []]

    res = steps.search(info, vectors, 3, encoder=None, tenant=None, mode="hybrid",
                       query_text=["q0", "q1"], fusion="rrf", dense_weight=0.5, dense=dense,
                       bm25=bm25)
    assert [sorted(h.id for h in hits) for hits in res] == [["b", "d0"], ["d1"]]
    np.testing.assert_array_equal(got[0], np.eye(2, dtype=np.float32))
    started.set()
    for mode in ("dense", None):
        (hits,) = steps.search(info, lambda: np.array([[0.6, 0.8]], np.float32), 3,
                               encoder=None, tenant=None, mode=mode, query_text=None,
                               fusion="rrf", dense_weight=0.5, dense=dense, bm25=bm25)
        assert [h.id for h in hits] == ["d0"]
    with pytest.raises(EncoderMismatchError, match=r"expects \(n, 2\)"):
        steps.search(info, lambda: np.ones((1, 3), np.float32), 3, encoder=None, tenant=None,
                     mode="hybrid", query_text=["q"], fusion="rrf", dense_weight=0.5,
                     dense=dense, bm25=lambda t, d: [[]])


def test_hybrid_one_side_after_the_other_runs_bm25_first_in_the_callers_thread() -> None:
    """``together=False`` (an in-process store, Lite): both sides in the caller's thread, the
    BM25 side first, before the query vectors are waited for (they are being encoded
    meanwhile), fused as at once."""
    import threading

    from index import steps
    from index.store import CollectionInfo

    info = CollectionInfo("c", 2, None, hybrid=True)
    order: list[tuple[str, str]] = []
    me = threading.current_thread().name

    def vectors() -> np.ndarray:
        order.append(("vectors", threading.current_thread().name))
        return np.array([[1.0, 0.0]], np.float32)

    def dense(x: np.ndarray, depth: int) -> list[list[Hit]]:
        order.append(("dense", threading.current_thread().name))
        return [[Hit("a", 0.9, "a", None, {})]]

    def bm25(texts: object, depth: int) -> list[list[Hit]]:
        order.append(("bm25", threading.current_thread().name))
        return [[Hit("b", 3.0, "b", None, {})]]

    (hits,) = steps.search(info, vectors, 2, encoder=None, tenant=None, mode="hybrid",
                           query_text=["q"], fusion="rrf", dense_weight=0.5, dense=dense,
                           bm25=bm25, together=False)
    assert {h.id for h in hits} == {"a", "b"}
    assert order == [("bm25", me), ("vectors", me), ("dense", me)]
