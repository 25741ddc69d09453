"""Multi-tenant collections over HTTP, on Milvus Lite and the Milvus 2.3.5 server: the
tenant comes in the X-Tenant header or the body, every route keeps tenants apart, and a
missing, malformed or contradictory tenant is a 422 with the reason."""

from __future__ import annotations

import uuid

from api_errors import error_of
from conftest import MakeClient


def test_tenants_over_http(make_client: MakeClient, store_uri: str) -> None:
    client = make_client(store=store_uri)
    name = "mt_" + uuid.uuid4().hex[:8]
    r = client.post("/v1/collections", json={"name": name, "multi_tenant": True})
    assert r.status_code == 201 and r.json()["multi_tenant"] is True
    url = f"/v1/collections/{name}"
    for tenant, animal in (("acme", "dog"), ("globex", "cat")):
        docs = [{"id": f"d{i}", "text": f"{tenant}'s {animal} number {i}",
                 "metadata": {"tenant": "acme"}} for i in range(6)]
        r = client.post(f"{url}/documents", json={"documents": docs},
                        headers={"X-Tenant": tenant})
        assert r.status_code == 200, r.text
    for tenant in ("acme", "globex"):
        assert client.get(url, headers={"X-Tenant": tenant}).json()["count"] == 6
        for body in ({"query": "a dog", "top_k": 20, "consistency": "Strong"},
                     {"query": "a cat", "top_k": 20, "tenant": tenant,
                      "filter": {"key": "tenant", "op": "eq", "value": "acme"}}):
            r = client.post(f"{url}/search", json=body, headers={"X-Tenant": tenant})
            hits = r.json()["hits"]
            assert len(hits) == 6 and all(h["text"].startswith(f"{tenant}'s") for h in hits)
        got = client.get(f"{url}/documents/d3", headers={"X-Tenant": tenant}).json()
        assert got["text"] == f"{tenant}'s {'dog' if tenant == 'acme' else 'cat'} number 3"
    r = client.post(f"{url}/search/batch", json={"searches": [
        {"query": "x", "tenant": "acme", "top_k": 20}, {"query": "x", "tenant": "globex",
                                                       "top_k": 20}]})
    res = r.json()["results"]
    assert [{h["text"].split("'")[0] for h in x["hits"]} for x in res] == [{"acme"}, {"globex"}]
    r = client.request("DELETE", f"{url}/documents", json={"ids": ["d0"], "tenant": "acme"})
    assert r.status_code == 200
    assert client.get(f"{url}/documents/d0", headers={"X-Tenant": "acme"}).status_code == 404
    assert client.get(f"{url}/documents/d0", headers={"X-Tenant": "globex"}).status_code == 200
    assert client.get(url).json()["count"] is None  # no tenant: no count to give
    for r, words in [
        (client.post(f"{url}/search", json={"query": "x"}), "multi-tenant: every read"),
        (client.post(f"{url}/documents", json={"documents": [{"id": "a", "text": "t"}]}),
         "multi-tenant: every read"),
        (client.post(f"{url}/search", json={"query": "x", "tenant": 'a" or "1'}), "a tenant is"),
        (client.post(f"{url}/search", json={"query": "x", "tenant": "acme"},
                     headers={"X-Tenant": "globex"}), "differ"),
        (client.post(f"{url}/search/batch", json={"searches": [{"query": "x", "tenant": "a"},
                                                               {"query": "x"}]}), "searches.1"),
    ]:
        assert r.status_code == 422 and words in error_of(r)["error"], r.text
    plain = "pl_" + uuid.uuid4().hex[:8]
    client.post("/v1/collections", json={"name": plain})
    r = client.post(f"/v1/collections/{plain}/search", json={"query": "x"},
                    headers={"X-Tenant": "acme"})
    assert r.status_code == 422 and "not multi-tenant" in error_of(r)["error"]
    for n in (name, plain):
        client.delete(f"/v1/collections/{n}")
