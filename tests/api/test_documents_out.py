"""Reading a collection out and deleting by filter (issue 72, item 4): ``GET
.../documents?cursor=`` pages through every document whole, in id order, with filters and
tenant rules; ``DELETE .../documents`` with a ``filter`` deletes every document that
matches (passages included) and nothing else; both under the keys' scopes and tenants."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_errors import error_of
from conftest import MakeClient
from fastapi.testclient import TestClient


def long_text(tag: str, paragraphs: int = 6) -> str:
    return "\n\n".join(" ".join(f"{tag}p{i}w{j}" for j in range(30)) + "."
                       for i in range(paragraphs))


@pytest.fixture
def coll(client: TestClient) -> Iterator[str]:
    """A collection as POST makes one by default: documents cut into passages."""
    name = "out_" + uuid.uuid4().hex[:10]
    assert client.post("/v1/collections", json={"name": name}).status_code == 201
    yield name
    client.delete(f"/v1/collections/{name}")


def pages(client: TestClient, url: str, headers: dict[str, str] | None = None,
          **params: Any) -> tuple[list[dict[str, Any]], int]:
    """Every document of every page, and how many pages it took."""
    out: list[dict[str, Any]] = []
    cursor, n = None, 0
    while True:
        q = {**params, **({"cursor": cursor} if cursor else {})}
        r = client.get(url, params=q, headers=headers or {})
        assert r.status_code == 200, r.text
        body = r.json()
        out += body["documents"]
        n += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return out, n
        assert n < 100


def test_pages_read_every_document_whole_in_id_order(client: TestClient, coll: str) -> None:
    docs = [{"id": f"d{i:02d}", "text": long_text(f"t{i}") if i % 4 == 0 else f"short {i}",
             "value": f"v{i}", "metadata": {"n": i, "even": i % 2 == 0}} for i in range(23)]
    docs.append({"id": "a/b c?é", "text": "an id with odd characters", "metadata": {"n": -1}})
    r = client.post(f"/v1/collections/{coll}/documents", json={"documents": docs})
    assert r.status_code == 200, r.text
    url = f"/v1/collections/{coll}/documents"
    got, n = pages(client, url, limit=5)
    assert n == 5
    assert [d["id"] for d in got] == sorted(d["id"] for d in docs)
    want = {d["id"]: d for d in docs}
    for d in got:  # whole: a long document's passages joined, its own metadata only
        w = want[d["id"]]
        assert (d["text"], d["value"], d["metadata"]) == (w["text"], w.get("value"),
                                                          w["metadata"])
        assert d["vector"] is None
    # a filter, and vectors when asked
    even, _ = pages(client, url, limit=4, include_vector="true",
                    filter=json.dumps({"key": "even", "op": "eq", "value": True}))
    assert [d["id"] for d in even] == [f"d{i:02d}" for i in range(0, 23, 2)]
    dim = client.get(f"/v1/collections/{coll}").json()["dim"]
    assert all(len(d["vector"]) == dim for d in even)
    # one page holds them all: no cursor after it
    r = client.get(url, params={"limit": 1000}).json()
    assert len(r["documents"]) == 24 and r["next_cursor"] is None


def test_a_page_refuses_what_it_cannot_read(client: TestClient, coll: str) -> None:
    url = f"/v1/collections/{coll}/documents"
    for params, param, words in (
            ({"filter": "{not json"}, "filter", "invalid JSON"),
            ({"filter": "[1]"}, "filter", "a JSON object"),
            ({"filter": json.dumps({"key": "n", "op": "near", "value": 1})}, None, "near"),
            ({"cursor": "%%%"}, None, "cursor"),
            ({"limit": 0}, None, "limit"),
            ({"limit": 1001}, None, "limit")):
        r = client.get(url, params=params)
        assert r.status_code == 422, (params, r.text)
        err = error_of(r)
        assert words in err["error"], (params, err)
        if param:
            assert param in (err["param"] or ""), (params, err)
    assert client.get("/v1/collections/nope/documents").status_code == 404


def test_delete_by_filter_removes_what_matches_and_nothing_else(client: TestClient,
                                                                coll: str) -> None:
    docs = [{"id": f"d{i}", "text": long_text(f"x{i}") if i % 3 == 0 else f"doc {i}",
             "metadata": {"n": i, "kind": "old" if i < 10 else "new"}} for i in range(16)]
    assert client.post(f"/v1/collections/{coll}/documents",
                       json={"documents": docs}).status_code == 200
    url = f"/v1/collections/{coll}/documents"
    r = client.request("DELETE", url, json={"filter": {"key": "kind", "op": "eq",
                                                       "value": "old"}})
    assert r.status_code == 200, r.text
    assert r.json() == {"deleted": 10}
    left, _ = pages(client, url)
    assert [d["id"] for d in left] == sorted(f"d{i}" for i in range(10, 16))
    assert client.get(f"{url}/d3").status_code == 404  # a long one, passages and all
    assert client.get(f"/v1/collections/{coll}").json()["count"] == 6
    hits = client.post(f"/v1/collections/{coll}/search",
                       json={"query": "x3p1w1 x6p2w2", "top_k": 20}).json()["hits"]
    assert {h["id"] for h in hits} <= {f"d{i}" for i in range(10, 16)}
    # nothing matches: nothing deleted; exactly one of ids and filter
    r = client.request("DELETE", url, json={"filter": {"key": "kind", "op": "eq",
                                                       "value": "none"}})
    assert r.json() == {"deleted": 0}
    for body in ({}, {"ids": ["d10"], "filter": {"key": "n", "op": "eq", "value": 1}},
                 {"ids": [], "filter": None}):
        r = client.request("DELETE", url, json=body)
        assert r.status_code == 422, (body, r.text)
    assert client.get(f"/v1/collections/{coll}").json()["count"] == 6


def test_pages_and_filter_deletes_keep_to_the_tenant_and_the_key(
        make_client: MakeClient, tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    admin = "qkv-kadmin000-" + "a" * 32
    client = make_client(api_key=admin, keys_file=keys)
    h = {"Authorization": f"Bearer {admin}"}
    name = "mt_" + uuid.uuid4().hex[:8]
    assert client.post("/v1/collections", json={"name": name, "multi_tenant": True},
                       headers=h).status_code == 201
    url = f"/v1/collections/{name}/documents"
    for tenant in ("a", "b"):
        docs = [{"id": f"d{i}", "text": f"{tenant} text {i}", "metadata": {"n": i}}
                for i in range(7)]
        assert client.post(url, json={"documents": docs},
                           headers={**h, "X-Tenant": tenant}).status_code == 200
    got, _ = pages(client, url, headers={**h, "X-Tenant": "a"}, limit=3)
    assert [d["text"] for d in got] == [f"a text {i}" for i in range(7)]
    assert client.get(url, headers=h).status_code == 422  # which tenant?
    # a read key bound to b reads b's only, and may not delete
    r = client.post("/v1/keys", json={"scope": "read", "tenants": ["b"]}, headers=h)
    read_b = {"Authorization": f"Bearer {r.json()['secret']}"}
    got, _ = pages(client, url, headers={**read_b, "X-Tenant": "b"})
    assert {d["text"] for d in got} == {f"b text {i}" for i in range(7)}
    assert client.get(url, headers={**read_b, "X-Tenant": "a"}).status_code == 403
    odd = {"key": "n", "op": "in", "value": [1, 3, 5]}
    r = client.request("DELETE", url, json={"filter": odd}, headers={**read_b, "X-Tenant": "b"})
    assert r.status_code == 403
    r = client.post("/v1/keys", json={"scope": "write", "tenants": ["a"]}, headers=h)
    write_a = {"Authorization": f"Bearer {r.json()['secret']}"}
    r = client.request("DELETE", url, json={"filter": odd},
                       headers={**write_a, "X-Tenant": "b"})
    assert r.status_code == 403
    r = client.request("DELETE", url, json={"filter": odd}, headers={**h, "X-Tenant": "b"})
    assert r.json() == {"deleted": 3}
    got, _ = pages(client, url, headers={**h, "X-Tenant": "b"})
    assert [d["id"] for d in got] == ["d0", "d2", "d4", "d6"]
    got, _ = pages(client, url, headers={**h, "X-Tenant": "a"})  # a's untouched
    assert len(got) == 7
    client.delete(f"/v1/collections/{name}", headers=h)
