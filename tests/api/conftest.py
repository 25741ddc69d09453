"""Fixtures for the API tests: an app on a Milvus Lite file with the tiny encoder."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings

MakeClient = Callable[..., TestClient]


def wait_filled(client: TestClient, timeout_s: float = 300) -> dict[str, object]:
    """``/ready`` once the demo collections the app fills in the background are done."""
    end = time.monotonic() + timeout_s
    while True:
        body = client.get("/ready").json()
        if all(p["state"] != "seeding" and p["state"] != "waiting"
               for p in body.get("seeding") or []):
            return body
        assert time.monotonic() < end, f"demo collections not filled: {body}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def lite_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("api-lite") / "qkv.db")


@pytest.fixture
def make_client(tiny_encoder_dir: Path, lite_path: str) -> Iterator[MakeClient]:
    """``make_client(**settings)``: a started app (lifespan run) on the module's Lite file,
    returned once its demo collections (if any) are filled, unless ``filled=False``."""
    clients: list[TestClient] = []

    def make(filled: bool = True, **overrides: object) -> TestClient:
        base: dict[str, object] = {"store": lite_path, "model": tiny_encoder_dir}
        base.update(overrides)
        client = TestClient(create_app(Settings(**base)))  # type: ignore[arg-type]
        client.__enter__()
        clients.append(client)
        if filled:
            wait_filled(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    return make_client()


@pytest.fixture
def collection(client: TestClient) -> Iterator[str]:
    """A fresh dense collection with the tiny encoder (so scores are cosines; the default,
    hybrid, is tested in test_hybrid_routes); dropped after the test."""
    name = "c_" + uuid.uuid4().hex[:10]
    r = client.post("/v1/collections", json={"name": name, "hybrid": False})
    assert r.status_code == 201, r.text
    yield name
    client.delete(f"/v1/collections/{name}")


@pytest.fixture(params=["lite-file", "milvus-2.3.5"])
def store_uri(request: pytest.FixtureRequest, lite_path: str) -> str:
    """The store behind an app, for the tests that run on Milvus Lite and on the Milvus
    2.3.5 server the session starts (``make_client(store=store_uri)``)."""
    if request.param == "lite-file":
        return lite_path
    return str(request.getfixturevalue("milvus_server_uri"))
