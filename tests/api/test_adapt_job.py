"""``POST /v1/collections/{name}/adapt`` (issue 38), end to end on the tiny encoder: the job
trains, re-indexes into a new collection, calibrates and swaps the name over while
searches keep answering and writes keep landing; a skipped or rejected one leaves the
collection as it was; a restart finishes a swap under way or undoes a job killed before."""

from __future__ import annotations

import random
import shutil
import threading
import time
from pathlib import Path

import pytest
from conftest import MakeClient
from fastapi.testclient import TestClient
from minidata import ACTIONS, ANIMALS, PLACES

from encoder import domain

N_DOCS = 320


def _docs(seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(N_DOCS):
        a = ANIMALS[i % len(ANIMALS)]
        sentences = [f"The {rng.choice(['small', 'big', 'brown'])} {a} "
                     f"{rng.choice(ACTIONS)} {rng.choice(PLACES)} with friend {i}."
                     for _ in range(5)]
        out.append({"id": f"d{i}", "text": " ".join(sentences)})
    return out


@pytest.fixture
def filled(make_client: MakeClient, lite_path: str) -> TestClient:
    shutil.rmtree(Path(lite_path).parent / "encoders", ignore_errors=True)
    client = make_client(auto_tune=False)
    client.delete("/v1/collections/adaptme")
    for c in ("adaptme", "adaptme_a1"):
        client.delete(f"/v1/aliases/{c}")
        client.delete(f"/v1/collections/{c}")
    # one row a document: the tiny test encoder reads 24 tokens, so its passages would be
    # too short to adapt to (the shipped one's are paragraphs of up to 200)
    assert client.post("/v1/collections", json={"name": "adaptme", "chunking": False}
                       ).status_code == 201
    docs = _docs()
    for start in range(0, N_DOCS, 100):
        r = client.post("/v1/collections/adaptme/documents",
                        json={"documents": docs[start:start + 100], "truncate": True})
        assert r.status_code == 200, r.text
    return client


def test_adapt_swaps_in_a_new_encoder_without_a_failed_search(
        filled: TestClient, monkeypatch: pytest.MonkeyPatch, lite_path: str) -> None:
    monkeypatch.setattr(domain, "MIN_GAIN", -1.0)  # the tiny encoder: accept what it learns
    monkeypatch.setattr(domain, "HYBRID_TOLERANCE", 1.0)
    client, stop, failures, written = filled, threading.Event(), [], []

    def search() -> None:
        while not stop.is_set():
            r = client.post("/v1/collections/adaptme/search",
                            json={"query": "a dog runs in the park", "top_k": 3})
            if r.status_code != 200 or not r.json()["hits"]:
                failures.append((r.status_code, r.text[:200]))

    def write() -> None:  # new documents while the job runs must not be lost
        n = 0
        while not stop.is_set():
            doc = {"id": f"new{n}", "text": f"a late goat jumps on a hill number {n}"}
            r = client.post("/v1/collections/adaptme/documents", json={"documents": [doc]})
            if r.status_code == 200:
                written.append(doc["id"])
            n += 1
            time.sleep(0.05)

    seen: list[tuple[str, float]] = []  # (step, progress) of the job while it trains
    jobs = Path(lite_path).parent / "encoders" / "jobs"

    def watch() -> None:
        while not stop.is_set():
            for j in jobs.glob("*.json") if jobs.is_dir() else []:
                st = client.get(f"/v1/jobs/{j.stem}").json()
                if st.get("phase") == "training":
                    seen.append((st.get("step"), st["progress"]))
            time.sleep(0.2)

    threads = [threading.Thread(target=search), threading.Thread(target=write),
               threading.Thread(target=watch)]
    for t in threads:
        t.start()
    try:
        r = client.post("/v1/collections/adaptme/adapt",
                        json={"budget_s": 30, "force": True, "wait": True})
    finally:
        time.sleep(1.0)  # a few searches and writes after the swap too
        stop.set()
        for t in threads:
            t.join()
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["phase"] == "done", job
    assert job["target"] == "adaptme_a1" and job["encoder"].startswith("tiny+adaptme-")
    assert job["report"]["steps"] > 0 and job["report"]["probe_adapted"] is not None
    assert failures == [] and written
    assert client.get(f"/v1/jobs/{job['id']}").json()["phase"] == "done"
    training = sorted({v for step, v in seen if step == "training"})
    assert len(training) >= 2 and training[-1] > training[0], seen  # moves while it trains
    info = client.get("/v1/collections/adaptme").json()
    assert info["name"] == "adaptme_a1" and info["encoder"]["name"] == job["encoder"]
    assert info["count"] == N_DOCS + len(written)
    assert info["calibration"]["source"] in ("collection", "encoder default")
    for i in ("d0", f"d{N_DOCS - 1}", written[0], written[-1]):
        assert client.get(f"/v1/collections/adaptme/documents/{i}").status_code == 200, i
    models = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
    assert models[job["encoder"]]["collection"] == "adaptme"
    assert info["aliases"] == ["adaptme"]


@pytest.mark.parametrize("outcome", ["skipped", "rejected"])
def test_an_adaptation_that_would_not_help_leaves_the_collection_as_it_was(
        filled: TestClient, monkeypatch: pytest.MonkeyPatch, lite_path: str,
        outcome: str) -> None:
    if outcome == "skipped":
        monkeypatch.setattr(domain, "SKIP_RATIO", 0.0)  # "already as good as BM25"
    else:
        monkeypatch.setattr(domain, "MIN_GAIN", 10.0)  # never better enough
    before = filled.get("/v1/collections/adaptme").json()
    r = filled.post("/v1/collections/adaptme/adapt", json={"budget_s": 30, "wait": True})
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["phase"] == outcome and job["reason"], job
    after = filled.get("/v1/collections/adaptme").json()
    assert (after["name"], after["encoder"], after["count"]) == (
        before["name"], before["encoder"], before["count"])
    root = Path(lite_path).parent / "encoders"
    assert not [p for p in root.iterdir() if p.name.startswith("tiny+")]  # nothing kept
    assert [m["id"] for m in filled.get("/v1/models").json()["data"]] == ["tiny"]


def test_adapt_refuses_what_it_cannot_do(filled: TestClient) -> None:
    assert filled.post("/v1/collections/nope/adapt", json={}).status_code == 404
    assert filled.post("/v1/collections", json={"name": "small"}).status_code in (201, 409)
    r = filled.post("/v1/collections/small/adapt", json={})
    assert r.status_code == 422 and "300" in r.json()["error"]["message"]
    assert filled.post("/v1/collections/adaptme/adapt", json={"budget_s": 1}
                       ).status_code == 422
    assert filled.get("/v1/jobs/adapt-000000000000").status_code == 404
    assert filled.get("/v1/jobs/..%2F..%2Fetc").status_code == 404
