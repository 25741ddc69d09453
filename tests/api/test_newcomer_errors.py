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
