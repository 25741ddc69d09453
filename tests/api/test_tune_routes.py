"""Hybrid calibration through the API (Milvus Lite, the shipped encoder): tune a collection
from its documents, from judged queries and by hand; the weight a search uses and says;
what survives a restart and an alias swap; the errors."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_routes import assert_error

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "encoder-default"
N_DOCS = 240  # above index.hybrid.calibration.MIN_DOCS


def demo_docs(n: int) -> list[dict[str, str]]:
    with gzip.open(ROOT / "data/demo/python-docs.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(n), f, strict=False)]
    return [{"id": r["id"], "text": r["text"]} for r in rows]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("tune-api") / "qkv.db")


def start(db: str) -> TestClient:
    from api.app import create_app
    from api.settings import Settings

    client = TestClient(create_app(Settings(store=db, model=MODEL)))  # type: ignore[call-arg]
    client.__enter__()
    return client


@pytest.fixture(scope="module")
def app(db: str) -> Iterator[TestClient]:
    client = start(db)
    yield client
    client.__exit__(None, None, None)


def make(app: TestClient, docs: list[dict[str, str]], hybrid: bool = True) -> str:
    name = "t_" + uuid.uuid4().hex[:8]
    assert app.post("/v1/collections", json={"name": name, "hybrid": hybrid}).status_code == 201
    for s in range(0, len(docs), 128):
        r = app.post(f"/v1/collections/{name}/documents", json={"documents": docs[s:s + 128]})
        assert r.status_code == 200, r.text
    return name


@pytest.fixture(scope="module")
def docs_coll(app: TestClient) -> str:
    return make(app, demo_docs(N_DOCS))


def tune(app: TestClient, name: str, **body: object) -> dict:  # type: ignore[type-arg]
    r = app.post(f"/v1/collections/{name}/tune", json={"wait": True, **body})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def search(app: TestClient, name: str, **body: object) -> dict:  # type: ignore[type-arg]
    r = app.post(f"/v1/collections/{name}/search",
                 json={"query": "how do I read a file line by line", "top_k": 5,
                       "consistency": "Strong", **body})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_untuned_search_says_it_uses_the_encoder_default(app: TestClient) -> None:
    name = make(app, demo_docs(20))
    default = app.get("/v1/models").json()["data"][0]["dense_weight"]
    got = search(app, name)
    assert got["mode"] == "hybrid"
    assert (got["dense_weight"], got["weight_source"]) == (default, "encoder default")
    assert "dense_weight" not in search(app, name, mode="dense") or \
        search(app, name, mode="dense")["dense_weight"] is None


def test_tune_from_documents_is_seeded_stored_and_used(app: TestClient, docs_coll: str) -> None:
    job = tune(app, docs_coll, seed=7)
    assert job["state"] == "done"
    cal = job["calibration"]
    assert cal["source"] == "collection" and cal["docs"] == N_DOCS and cal["seed"] == 7
    assert 0.0 <= cal["dense_weight"] <= 1.0 and cal["queries"] > 100
    # the pseudo-queries come from passages: one demo document is long enough for two
    assert N_DOCS <= cal["signals"]["pool"] <= N_DOCS + 10 and 0 < cal["signals"]["bm25"] <= 1
    again = tune(app, docs_coll, seed=7)["calibration"]
    assert (again["dense_weight"], again["signals"]) == (cal["dense_weight"], cal["signals"])
    stored = app.get(f"/v1/collections/{docs_coll}").json()
    assert stored["calibration"]["dense_weight"] == cal["dense_weight"]
    assert stored["tuning"]["state"] == "done"
    got = search(app, docs_coll)
    assert (got["dense_weight"], got["weight_source"]) == (cal["dense_weight"], "collection")
    asked = search(app, docs_coll, dense_weight=0.25)
    assert (asked["dense_weight"], asked["weight_source"]) == (0.25, "request")


def test_a_hybrid_answer_says_the_weight_its_query_was_fused_with(app: TestClient,
                                                                   docs_coll: str) -> None:
    """The answer's ``query_weight`` and ``confidence`` are what the fusion computes from the
    query's own two lists, each 100 deep, as the same request's dense and BM25 modes give
    them; the request's ``dense_weight`` moves it; rrf has none, weighted uses w as it is."""
    from index import Hit
    from index.hybrid.fusion import CANDIDATES, query_weight

    def side(mode: str, query: str) -> list[Hit]:
        got = search(app, docs_coll, query=query, mode=mode, top_k=CANDIDATES)["hits"]
        return [Hit(h["id"], h["score"], "", None, {}) for h in got]

    seen = set()
    # BM25 matched 64 documents of the first (a list shorter than the depth: c_bm25 = 1),
    # 100 or more of the second
    for query in ("how do I read a file line by line", "a function that returns a value"):
        dense, bm25 = side("dense", query), side("bm25", query)
        assert len(dense) == CANDIDATES and 0 < len(bm25)
        for w in (None, 0.3):
            got = search(app, docs_coll, query=query, **({} if w is None else {"dense_weight": w}))
            want = query_weight(dense, bm25, got["dense_weight"])
            assert got["query_weight"] == pytest.approx(want, abs=1e-6)
            c = got["confidence"]
            assert c["dense"] == pytest.approx(dense[0].score - dense[-1].score, abs=1e-6)
            bm25_last = bm25[-1].score if len(bm25) >= CANDIDATES else 0.0
            assert c["bm25"] == pytest.approx(1 - bm25_last / bm25[0].score, abs=1e-6)
            seen.add(round(got["query_weight"], 6))
    assert len(seen) == 4, "each query and weight fuses with its own weight"
    rrf = search(app, docs_coll, fusion="rrf")
    assert rrf.get("query_weight") is None and rrf.get("confidence") is None
    weighted = search(app, docs_coll, fusion="weighted", dense_weight=0.4)
    assert weighted["query_weight"] == 0.4 and weighted.get("confidence") is None
    assert search(app, docs_coll, mode="dense").get("query_weight") is None


def test_tune_in_the_background_then_read_its_state(app: TestClient, docs_coll: str) -> None:
    r = app.post(f"/v1/collections/{docs_coll}/tune", json={})
    assert r.status_code == 202 and r.json()["state"] in ("queued", "running", "done"), r.text
    import time

    end = time.monotonic() + 120
    while (state := app.get(f"/v1/collections/{docs_coll}/tune").json())["state"] != "done":
        assert state["state"] in ("queued", "running") and time.monotonic() < end, state
        time.sleep(0.2)
    assert state["calibration"]["source"] == "collection"


def test_tune_on_judged_queries_says_how_many_and_how_sure(app: TestClient,
                                                           docs_coll: str) -> None:
    docs = demo_docs(N_DOCS)
    labels = [{"query": d["text"].split(".")[0], "relevant": [d["id"]]} for d in docs[:12]]
    cal = tune(app, docs_coll, labels=labels)["calibration"]
    assert cal["source"] == "labels" and cal["queries"] == 12
    sig = cal["signals"]
    assert 0 <= sig["beats_default"] <= 1 and len(sig["weight_p10_p90"]) == 2
    assert sig["ndcg@10"] >= max(sig["ndcg@10_default"], sig["ndcg@10_bm25"]) - 1e-9


def test_small_collections_fall_back_to_the_encoder_default_and_say_so(app: TestClient) -> None:
    name = make(app, demo_docs(30))
    cal = tune(app, name)["calibration"]
    default = app.get("/v1/models").json()["data"][0]["dense_weight"]
    assert cal["source"] == "encoder default" and cal["dense_weight"] == default
    assert "too few" in cal["note"]
    assert search(app, name)["weight_source"] == "encoder default"


def test_weight_survives_a_restart_and_follows_an_alias_swap(app: TestClient, db: str) -> None:
    a, b = make(app, demo_docs(10)), make(app, demo_docs(10))
    assert tune(app, a, dense_weight=0.2)["calibration"]["source"] == "manual"
    tune(app, b, dense_weight=0.8)
    alias = "al_" + uuid.uuid4().hex[:6]
    assert app.put(f"/v1/aliases/{alias}", json={"collection": a}).status_code == 200
    assert search(app, alias)["dense_weight"] == 0.2
    assert app.put(f"/v1/aliases/{alias}", json={"collection": b}).status_code == 200
    assert search(app, alias)["dense_weight"] == 0.8
    restarted = start(db)  # another server on the same file: a restart's view
    try:
        assert restarted.get(f"/v1/collections/{a}").json()["calibration"]["dense_weight"] == 0.2
        assert search(restarted, alias)["dense_weight"] == 0.8
    finally:
        restarted.__exit__(None, None, None)


def test_tune_errors_are_clear(app: TestClient, docs_coll: str) -> None:
    url = f"/v1/collections/{docs_coll}/tune"
    r = app.post(url, json={"labels": [{"query": "open a file", "relevant": ["no-such-doc"]}]})
    assert_error(r, 422)
    assert "no-such-doc" in r.text
    assert_error(app.post(url, json={"labels": [], "wait": True}), 422)
    assert_error(app.post(url, json={"labels": [{"query": "x", "relevant": []}]}), 422)
    assert_error(app.post(url, json={"dense_weight": 1.5}), 422)
    assert_error(app.post(url, json={"dense_weight": 0.5, "labels": [
        {"query": "x", "relevant": ["a"]}]}), 422)
    empty = make(app, [])
    r = app.post(f"/v1/collections/{empty}/tune", json={"wait": True})
    assert_error(r, 422)
    assert "no documents" in r.text
    dense_only = make(app, demo_docs(5), hybrid=False)
    r = app.post(f"/v1/collections/{dense_only}/tune", json={"wait": True})
    assert_error(r, 409)
    assert "BM25" in r.text
    assert_error(app.post("/v1/collections/nope_missing/tune", json={}), 404)
    assert_error(app.get(f"/v1/collections/{empty}/tune"), 404)


def test_a_growing_collection_tunes_itself_in_the_background(db: str) -> None:
    from api.app import create_app
    from api.settings import Settings

    settings = Settings(store=db, model=MODEL, auto_tune_min_docs=N_DOCS)  # type: ignore[call-arg]
    with TestClient(create_app(settings)) as app:
        name = make(app, demo_docs(N_DOCS - 1))
        assert app.get(f"/v1/collections/{name}").json()["tuning"] is None  # not yet due
        more = demo_docs(N_DOCS + 1)[-1:]
        assert app.post(f"/v1/collections/{name}/documents",
                        json={"documents": more}).status_code == 200
        import time

        end = time.monotonic() + 120
        while (job := app.get(f"/v1/collections/{name}").json()["tuning"]) is None or \
                job["state"] != "done":
            assert time.monotonic() < end and (job is None or job["state"] != "failed"), job
            time.sleep(0.2)
        assert job["reason"] == f"grown to {N_DOCS} documents"
        cal = app.get(f"/v1/collections/{name}").json()["calibration"]
        assert cal["source"] == "collection" and cal["docs"] == N_DOCS


def test_due_tunes_at_the_size_then_on_doubling_and_keeps_a_hand_set_weight() -> None:
    from index import CollectionInfo
    from wiring.calibrating import due

    def info(cal: dict | None, hybrid: bool = True) -> CollectionInfo:  # type: ignore[type-arg]
        return CollectionInfo("c", 4, None, hybrid, False, cal)

    assert not due(info(None), 999) and due(info(None), 1000)
    assert not due(info(None, hybrid=False), 5000)
    tuned = {"source": "collection", "docs": 1000, "dense_weight": 0.5}
    assert not due(info(tuned), 1999) and due(info(tuned), 2000)
    assert not due(info(tuned | {"source": "manual"}), 10**6)
    assert not due(info(tuned | {"source": "labels"}), 10**6)
    assert due(info({"source": "encoder default", "docs": 300, "dense_weight": 0.9}), 1000)
