"""Two replicas of the service on one Milvus server (issue 68, finding 8): two ``qkv serve``
processes on loopback ports against one ``milvus-lite server``, with one keys file, agree on
what one of them wrote: documents, keys and their revocation, aliases, the stored hybrid
calibration and the state of a calibration job."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from uvicorn_server import UvicornServer

ADMIN = "replica-admin-secret"


@pytest.fixture
def replicas(tmp_path: Path, tiny_encoder_dir: Path, lite_server_uri: str
             ) -> Iterator[tuple[str, str]]:
    env = {"QKV_STORE": lite_server_uri, "QKV_MODEL": str(tiny_encoder_dir),
           "QKV_API_KEY": ADMIN, "QKV_KEYS_FILE": str(tmp_path / "keys.jsonl"),
           "QKV_ENCODERS_DIR": str(tmp_path / "encoders"), "QKV_AUTO_TUNE": "false"}
    servers = [UvicornServer(tmp_path / f"replica-{i}.log", env=env) for i in range(2)]
    try:
        yield servers[0].start(), servers[1].start()
    finally:
        for s in servers:
            s.stop()


def until(check: Callable[[], Any], within_s: float) -> float:
    """Seconds until ``check()`` is true (polled); fails after ``within_s``."""
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < within_s, f"not true within {within_s} s"
        time.sleep(0.05)
    return time.monotonic() - t0


@pytest.mark.slow
def test_two_replicas_agree(replicas: tuple[str, str]) -> None:
    a, b = replicas
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(timeout=60, headers=admin) as http:
        r = http.post(f"{a}/v1/collections", json={"name": "shared", "chunking": False})
        assert r.status_code == 201, r.text
        docs = [{"id": f"d{i}", "text": f"replica document {i} about topic {i % 7}"}
                for i in range(40)]
        assert http.post(f"{a}/v1/collections/shared/documents",
                         json={"documents": docs}).status_code == 200
        # a write through one replica is searchable through the other (a strong read)
        hits = http.post(f"{b}/v1/collections/shared/search", json={
            "query": docs[3]["text"], "top_k": 40, "mode": "dense",
            "consistency": "Strong"}).json()["hits"]
        assert {h["id"] for h in hits} == {d["id"] for d in docs}
        assert http.get(f"{b}/v1/collections/shared/documents/d5").json()["text"] == \
            docs[5]["text"]

        # a key made on one works on the other; revoked on one, refused by the other
        made = http.post(f"{a}/v1/keys", json={"scope": "read", "name": "r"})
        assert made.status_code == 201, made.text
        read = {"Authorization": f"Bearer {made.json()['secret']}"}
        until(lambda: httpx.get(f"{b}/v1/collections/shared", headers=read).status_code == 200,
              2.0)
        assert http.post(f"{a}/v1/keys/{made.json()['id']}/revoke").status_code == 200
        took = until(lambda: httpx.get(f"{b}/v1/collections/shared",
                                       headers=read).status_code == 401, 2.0)
        print(f"revoked on one replica, refused by the other after {took:.2f} s")
        assert took < 1.0, f"the other replica took {took:.2f} s to refuse a revoked key"

        # an alias moved on one is followed by the other
        assert http.put(f"{a}/v1/aliases/current",
                        json={"collection": "shared"}).status_code == 200
        until(lambda: http.get(f"{b}/v1/collections/current/documents/d1").status_code == 200,
              3.0)

        # a calibration job run on one is the collection's last job on the other, and its
        # weight the collection's stored calibration there
        assert http.get(f"{b}/v1/collections/shared/tune").status_code == 404
        done = http.post(f"{a}/v1/collections/shared/tune", json={"wait": True})
        assert done.status_code == 200 and done.json()["state"] == "done", done.text
        until(lambda: http.get(f"{b}/v1/collections/shared/tune").status_code == 200, 7.0)
        seen = http.get(f"{b}/v1/collections/shared/tune").json()
        assert seen["state"] == "done" and seen["calibration"] == done.json()["calibration"]
        stored = http.get(f"{b}/v1/collections/shared").json()
        assert stored["calibration"]["dense_weight"] == seen["calibration"]["dense_weight"]
        # set by hand on the other: the first replica answers with that one now
        hand = http.post(f"{b}/v1/collections/shared/tune", json={"dense_weight": 0.3})
        assert hand.status_code == 200, hand.text
        until(lambda: http.get(f"{a}/v1/collections/shared/tune").json().get("reason")
              == "set by hand", 7.0)
