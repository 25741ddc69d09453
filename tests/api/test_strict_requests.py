"""No request field is silently ignored (issue 75): every request body's schema refuses
fields it does not name, and a misspelt one answers 422 naming it and the field meant."""

from __future__ import annotations

from typing import Any

import pytest
from api_errors import error_of
from fastapi.testclient import TestClient


def _objects(schema: dict[str, Any], components: dict[str, Any], seen: set[str]
             ) -> list[tuple[str, dict[str, Any]]]:
    """Every object schema reachable from ``schema`` (through $ref, anyOf, items, ...)."""
    out: list[tuple[str, dict[str, Any]]] = []
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            return out
        seen.add(name)
        target = components[name]
        out.append((name, target))
        return out + _objects(target, components, seen)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for sub in schema.get(key, []):
            out += _objects(sub, components, seen)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out += _objects(schema[key], components, seen)
    for sub in schema.get("properties", {}).values():
        out += _objects(sub, components, seen)
    return out


def test_every_request_body_refuses_fields_it_does_not_name(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    components = spec["components"]["schemas"]
    bodies = 0
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            content = op.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            bodies += 1
            for name, obj in _objects(content["application/json"]["schema"], components, set()):
                if obj.get("type") == "object" and obj.get("properties"):
                    assert obj.get("additionalProperties") is False, (
                        f"{method.upper()} {path}: {name} takes fields it does not name")
    assert bodies >= 20  # the walk saw the routes


@pytest.mark.parametrize(("path", "body", "field", "meant"), [
    ("/v1/collections/{c}/search", {"query": "dog", "filters": {}}, "filters", "filter"),
    ("/v1/collections/{c}/search", {"query": "dog", "topk": 1}, "topk", "top_k"),
    ("/v1/collections/{c}/search/batch", {"searches": [{"query": "dog", "topk": 1}]},
     "searches.0.topk", "top_k"),
    ("/v1/collections/{c}/attend", {"query": "dog", "temprature": 0.1}, "temprature",
     "temperature"),
    ("/v1/collections/{c}/generate", {"query": "dog", "max_token": 4}, "max_token",
     "max_tokens"),
    ("/v1/collections/{c}/tune", {"dense_wieght": 0.5}, "dense_wieght", "dense_weight"),
    ("/v1/collections/{c}/documents", {"documents": [{"id": "a", "text": "t"}],
                                       "tennant": "x"}, "tennant", "tenant"),
    ("/v1/collections", {"name": "x1", "multitenant": True}, "multitenant", "multi_tenant"),
    ("/v1/embeddings", {"input": "dog", "encodingformat": "float"}, "encodingformat",
     "encoding_format"),
    ("/embed", {"inputs": "dog", "normalise": True}, "normalise", "normalize"),
])
def test_a_misspelt_field_is_named_with_the_one_meant(client: TestClient, collection: str,
                                                      path: str, body: dict[str, Any],
                                                      field: str, meant: str) -> None:
    r = client.post(path.format(c=collection), json=body)
    assert r.status_code == 422, r.text
    err = error_of(r)
    assert err["error"] == f"{field}: unknown field; did you mean {meant!r}?", err
    assert err["param"] in (None, field.split(".")[0])


def test_an_unknown_field_far_from_any_lists_the_fields(client: TestClient,
                                                        collection: str) -> None:
    r = client.post(f"/v1/collections/{collection}/search",
                    json={"query": "dog", "zzzz": 1})
    err = error_of(r)
    assert r.status_code == 422 and err["error"].startswith("zzzz: unknown field; the fields "
                                                            "are query, vector, top_k")
