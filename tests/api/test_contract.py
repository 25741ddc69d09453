"""What schemathesis found, pinned down through TestClient: the OpenAPI document states
what the server enforces (auth only with a key, the deployment's limits), request types are
not coerced, 405 names every method of the path, and input that reached the store as a 502
(control characters in ids, integers beyond 64 bits in metadata) is handled."""

from __future__ import annotations

from urllib.parse import quote

from api_errors import error_of
from conftest import MakeClient
from fastapi.testclient import TestClient


def _error_type(r) -> str:  # type: ignore[no-untyped-def]
    return str(error_of(r)["error_type"])


def test_openapi_states_auth_only_when_a_key_is_set(make_client: MakeClient) -> None:
    open_spec = make_client().get("/openapi.json").json()
    assert "securitySchemes" not in open_spec.get("components", {})
    for ops in open_spec["paths"].values():
        for op in ops.values():
            assert "security" not in op and "401" not in op["responses"]
    keyed = make_client(api_key="k")
    keyed_spec = keyed.get("/openapi.json").json()  # the document itself stays open
    assert keyed_spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    op = keyed_spec["paths"]["/v1/embeddings"]["post"]
    assert op["security"] == [{"HTTPBearer": []}] and "401" in op["responses"]
    assert "security" not in keyed_spec["paths"]["/health"]["get"]


def test_openapi_states_the_deployment_limits(make_client: MakeClient) -> None:
    spec = make_client(max_inputs=3, max_documents=5, max_top_k=7,
                       max_generate_tokens=9).get("/openapi.json").json()
    models = spec["components"]["schemas"]
    assert models["EmbeddingsRequest"]["properties"]["input"]["anyOf"][1]["maxItems"] == 3
    assert models["TeiEmbedRequest"]["properties"]["inputs"]["anyOf"][1]["maxItems"] == 3
    assert models["DocumentsUpsert"]["properties"]["documents"]["maxItems"] == 5
    assert models["DocumentsDelete"]["properties"]["ids"]["anyOf"][0]["maxItems"] == 5
    assert models["SearchRequest"]["properties"]["top_k"]["maximum"] == 7
    assert models["GenerateRequest"]["properties"]["max_tokens"]["anyOf"][0]["maximum"] == 9
    assert {tuple(b["required"]) for b in models["SearchRequest"]["oneOf"]} == {
        ("query",), ("vector",)}


def test_405_allow_names_every_method_of_the_path(client: TestClient) -> None:
    r = client.put("/v1/collections/anything")
    assert r.status_code == 405 and _error_type(r) == "method_not_allowed"
    assert {"GET", "DELETE"} <= {m.strip() for m in r.headers["allow"].split(",")}
    r = client.put("/v1/collections/anything/documents")
    assert r.status_code == 405
    assert {"GET", "POST", "DELETE"} <= {m.strip() for m in r.headers["allow"].split(",")}


def test_request_types_are_not_coerced(client: TestClient) -> None:
    for path, body in [("/embed", {"inputs": "a", "normalize": 0}),
                       ("/embed", {"inputs": []}),
                       ("/v1/embeddings", {"input": "a", "truncate": "true"}),
                       ("/v1/embeddings", {"input": []}),
                       ("/v1/embeddings", {"input": "a", "dimensions": "32"}),
                       ("/v1/collections/x/search", {"query": "a", "top_k": "5"}),
                       ("/v1/collections/x/search", {"query": 5})]:
        r = client.post(path, json=body)
        assert r.status_code == 422 and _error_type(r) == "invalid_request", (path, body, r.text)
    assert client.post("/embed", json={"inputs": "a", "normalize": False}).status_code == 200


def test_unreadable_body_is_422(client: TestClient) -> None:
    r = client.post("/v1/embeddings", content=b'{"input": "\xff"}',
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and _error_type(r) == "invalid_request"


def test_metadata_outside_what_stores_keep_is_422(client: TestClient, collection: str) -> None:
    url = f"/v1/collections/{collection}/documents"
    r = client.post(url, json={"documents": [{"id": "a", "text": "t", "metadata": {"n": 2**64}}]})
    assert r.status_code == 422 and "64-bit" in error_of(r)["error"]
    raw = b'{"documents": [{"id": "a", "text": "t", "metadata": {"k": "\\udc00"}}]}'
    r = client.post(url, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and _error_type(r) == "invalid_request"
    r = client.post(url, json={"documents": [{"id": "a", "text": "t",
                                              "metadata": {"n": 2**63 - 1, "x": [-(2**63)]}}]})
    assert r.status_code == 200, r.text


def test_ids_with_control_characters(client: TestClient, collection: str) -> None:
    ids = ["a\x19b", "nul\x00x", "tab\tand\nline", "bs\\u0019"]
    url = f"/v1/collections/{collection}/documents"
    r = client.post(url, json={"documents": [{"id": i, "text": "some text"} for i in ids]})
    assert r.status_code == 200, r.text
    for i in ids:
        r = client.get(f"{url}/{quote(i, safe='')}")
        assert r.status_code == 200 and r.json()["id"] == i, (i, r.text)
    assert client.request("DELETE", url, json={"ids": ids[:2]}).json() == {"deleted": 2}
    assert client.get(f"{url}/{quote(ids[0], safe='')}").status_code == 404
    assert client.get(f"{url}/{quote(ids[2], safe='')}").status_code == 200
