"""api.edge.EdgeMiddleware alone, around a bare ASGI app: the request id, the metrics, the
body limit and the audit line, and what each does to the others' answers (a 413 of the
limit keeps its id and is counted; an exception is counted and audited as a 500)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.edge import EdgeMiddleware
from api.metrics import Metrics

LIMIT = 1000


class Echo:
    """An app that answers the body it read as one message, the messages it took, and
    (where asked by headers) marks the call for the audit or fails."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        headers = dict(scope["headers"])
        messages = [await receive()]
        while messages[-1].get("more_body", False):
            messages.append(await receive())
        if b"x-audit" in headers:
            scope["state"]["audit"] = {"key": "k1", "tenant": None, "route": scope["path"]}
        if b"x-fail" in headers:
            raise RuntimeError("boom")
        body = json.dumps({"messages": len(messages),
                           "body": b"".join(m.get("body", b"") for m in messages).decode(),
                           "request_id": scope["state"]["request_id"]}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def edge() -> tuple[TestClient, Echo, Metrics]:
    app, metrics = Echo(), Metrics()
    return TestClient(EdgeMiddleware(app, metrics, LIMIT)), app, metrics


def count(metrics: Metrics, method: str, route: str, status: int) -> float:
    text = metrics.render().decode()
    labels = f'method="{method}",route="{re.escape(route)}",status="{status}"'
    m = re.search(r"qkv_request_seconds_count\{" + labels + r"\} (\S+)", text)
    return float(m.group(1)) if m else 0.0


def test_a_body_over_the_limit_is_413_with_its_id_and_counted(edge: Any) -> None:
    client, app, metrics = edge
    r = client.post("/x", content=b"a" * (LIMIT + 1), headers={"X-Request-Id": "big-1"})
    assert r.status_code == 413 and r.json()["error_type"] == "payload_too_large"
    assert r.headers["x-request-id"] == "big-1" and app.calls == 0

    def chunks():  # type: ignore[no-untyped-def]  # no Content-Length: counted as read
        for _ in range(5):
            yield b"a" * 300

    r = client.post("/x", content=chunks())
    assert r.status_code == 413 and len(r.headers["x-request-id"]) == 16 and app.calls == 0
    assert count(metrics, "POST", "unmatched", 413) == 2


def test_a_chunked_body_within_the_limit_reaches_the_app_whole(edge: Any) -> None:
    client, app, metrics = edge

    def chunks():  # type: ignore[no-untyped-def]
        yield from (b"ab", b"cd", b"ef")

    r = client.post("/x", content=chunks(), headers={"X-Request-Id": "ok.1"})
    assert r.status_code == 200 and r.json() == {"messages": 1, "body": "abcdef",
                                                 "request_id": "ok.1"}
    assert r.headers["x-request-id"] == "ok.1"
    r = client.post("/x", content=b"z" * LIMIT)  # at the limit: through, as sent
    assert r.status_code == 200 and r.json()["body"] == "z" * LIMIT
    assert count(metrics, "POST", "unmatched", 200) == 2


def test_a_request_id_that_is_not_a_plain_token_is_replaced(edge: Any) -> None:
    client, _, _ = edge
    r = client.get("/x", headers={"X-Request-Id": "bad id!"})
    rid = r.headers["x-request-id"]
    assert rid != "bad id!" and re.fullmatch(r"[0-9a-f]{16}", rid) and r.json()["request_id"] == rid


def test_the_audit_line_counts_the_body_and_names_the_outcome(
        edge: Any, caplog: pytest.LogCaptureFixture) -> None:
    client, _, metrics = edge
    with caplog.at_level(logging.INFO, logger="qkv.audit"):
        client.post("/x", json={"documents": [{"id": "a"}, {"id": "b"}], "tenant": "t1"},
                    headers={"X-Audit": "1", "X-Request-Id": "w-1"})
        client.post("/x", json={"documents": []})  # not marked: no line
        client.options("/x", headers={"X-Audit": "1"})  # OPTIONS: never audited
        with pytest.raises(RuntimeError, match="boom"):
            client.post("/x", json={"ids": ["a"]}, headers={"X-Audit": "1", "X-Fail": "1"})
    lines = [json.loads(r.message) for r in caplog.records if r.name == "qkv.audit"]
    assert [(d["count"], d["status"], d["tenant"]) for d in lines] == [(2, 200, "t1"),
                                                                      (1, 500, None)]
    assert lines[0]["request_id"] == "w-1" and lines[0]["key"] == "k1"
    assert count(metrics, "POST", "unmatched", 500) == 1  # the exception counted too
