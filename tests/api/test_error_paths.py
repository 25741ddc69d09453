"""The suite-wide check of error answers for server paths (tests/error_paths.py) catches
what it should and lets the API's own URL paths through."""

from __future__ import annotations

import error_paths
from fastapi.testclient import TestClient


def test_a_path_in_an_error_body_is_found() -> None:
    assert error_paths.leaked_path("no collection 'x' in /tmp/pytest-of-root/m.db") \
        == "/tmp/pytest-of-root"
    assert error_paths.leaked_path("[Errno 28] writing /srv/qkv/lite.db/wal") == "/srv/qkv"
    assert error_paths.leaked_path(f"at {error_paths.REPO}") is not None
    assert error_paths.leaked_path("POST /v1/collections/x/search: no collection 'x'") is None
    assert error_paths.leaked_path("see http://localhost:8000/docs/tmp/x") is None


def test_the_suite_reads_the_errors_it_provokes(client: TestClient) -> None:
    before = error_paths.checked["errors"]
    r = client.get("/v1/collections/nope")
    assert r.status_code == 404
    assert error_paths.checked["errors"] == before + 1
