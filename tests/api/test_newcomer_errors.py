"""Errors a newcomer meets, each in one line that says what happened and what to do
(issue 75)."""

from __future__ import annotations

import uuid

from api_errors import error_of
from fastapi.testclient import TestClient

from index import EncoderInfo, FaissStore
from index.store import CollectionExistsError


def test_creating_a_collection_that_exists_says_so_in_words(client: TestClient) -> None:
    name = "dup_" + uuid.uuid4().hex[:8]
    assert client.post("/v1/collections", json={"name": name}).status_code == 201
    try:
        r = client.post("/v1/collections", json={"name": name})
        assert r.status_code == 409
        msg = error_of(r)["error"]
        assert msg == (f"collection {name!r} already exists with the same settings; use it, "
                       "or delete it first to start over")
        assert "EncoderInfo(" not in msg
    finally:
        client.delete(f"/v1/collections/{name}")


def test_a_collection_that_exists_otherwise_names_what_differs(tmp_path: object) -> None:
    store = FaissStore(str(tmp_path))
    enc = EncoderInfo("enc", "abc", 32)
    store.create("c", 32, enc)
    try:
        store.create("c", 32, enc, hybrid=True)
    except CollectionExistsError as e:
        assert str(e) == "collection 'c' already exists with hybrid False (asked: True)"
    else:
        raise AssertionError("no conflict")


def test_bad_json_says_where_it_breaks(client: TestClient, collection: str) -> None:
    r = client.post(f"/v1/collections/{collection}/search", content=b'{\n  "query": "dog",\n}',
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    err = error_of(r)
    assert err["error"].startswith("invalid JSON at line 3 column 1: "), err
    assert err["param"] is None


def test_a_body_without_its_content_type_names_the_header(client: TestClient,
                                                          collection: str) -> None:
    r = client.post(f"/v1/collections/{collection}/search", content=b'{"query": "dog"}',
                    headers={"Content-Type": "text/plain"})
    assert r.status_code == 422
    err = error_of(r)["error"]
    assert "Content-Type: application/json" in err and "text/plain" in err, err


def test_a_start_logs_no_faiss_probe_as_an_error(tmp_path: object) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "from cli.app import main; main(False); "
                           "import faiss"], capture_output=True, text=True, timeout=120,
                          check=True)
    assert "ModuleNotFoundError" not in done.stderr and "swigfaiss" not in done.stderr


def test_a_tune_that_gains_nothing_keeps_the_default_and_says_so(client: TestClient) -> None:
    name = "ties_" + uuid.uuid4().hex[:8]
    assert client.post("/v1/collections", json={"name": name}).status_code == 201
    try:
        docs = [{"id": f"d{i}", "text": f"unique{i} words about topic{i} and more"}
                for i in range(12)]
        assert client.post(f"/v1/collections/{name}/documents",
                           json={"documents": docs}).status_code == 200
        # each query's words are its document's own: every weight finds it first
        labels = [{"query": f"unique{i} topic{i}", "relevant": [f"d{i}"]} for i in range(12)]
        default = client.get("/v1/models").json()["data"][0]["dense_weight"]
        r = client.post(f"/v1/collections/{name}/tune", json={"labels": labels, "wait": True})
        assert r.status_code == 200, r.text
        cal = r.json()["calibration"]
        assert cal["signals"]["ndcg@10"] == cal["signals"]["ndcg@10_default"]
        assert cal["dense_weight"] == default and cal["signals"]["kept_default"] is True
        assert cal["signals"]["beats_default"] == 0 and cal["note"].startswith(
            "the encoder default kept")
        # a weight set by hand is the one truth: the calibration and the last tune agree
        r = client.post(f"/v1/collections/{name}/tune", json={"dense_weight": 0.8})
        assert r.status_code == 200, r.text
        got = client.get(f"/v1/collections/{name}").json()
        assert got["calibration"]["dense_weight"] == 0.8
        assert got["tuning"]["calibration"]["dense_weight"] == 0.8
        assert got["tuning"]["reason"] == "set by hand"
    finally:
        client.delete(f"/v1/collections/{name}")


def test_the_list_of_collections_counts_their_documents(client: TestClient,
                                                        collection: str) -> None:
    docs = [{"id": f"d{i}", "text": f"text {i}"} for i in range(3)]
    assert client.post(f"/v1/collections/{collection}/documents",
                       json={"documents": docs}).status_code == 200
    listed = {c["name"]: c for c in client.get("/v1/collections").json()["collections"]}
    assert listed[collection]["count"] == 3
