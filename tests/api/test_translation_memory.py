"""The demo translation memory end to end, with the shipped encoder and decoder: the app
made from `make run`'s own `qkv serve` options (read with `make -n run`), its two demo
corpora cut short, seeds the `docs` collection and the `tm-en-fr` translation memory on a
fresh Milvus Lite file, and `generate` on `tm-en-fr` translates English to French."""

from __future__ import annotations

import gzip
import itertools
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeClient, wait_filled

from api.settings import Settings
from cli.serve import banner, serve_settings

ROOT = Path(__file__).resolve().parents[2]
N_DOCS, N_PAIRS = 40, 300


def make_run_options() -> dict[str, Any]:
    """The options `make run` gives `qkv serve`, parsed by the command's own definition."""
    from typer.main import get_command

    from cli.app import app

    out = subprocess.run(["make", "-n", "-s", "run"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout.replace("\\\n", " ")
    line = next(ln for ln in out.splitlines() if " serve " in ln)
    argv = shlex.split(line)
    serve = get_command(app).get_command(None, "serve")  # type: ignore[attr-defined]
    assert serve is not None
    return dict(serve.make_context("serve", argv[argv.index("serve") + 1:]).params)


def head(src: Path, dst: Path, n: int) -> list[dict[str, Any]]:
    """The first ``n`` rows of the JSONL.gz ``src``, written to ``dst`` (plain JSONL)."""
    with gzip.open(src, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in itertools.islice(f, n)]
    dst.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return rows


@pytest.fixture(scope="module")
def make_run_settings() -> Settings:
    opts = make_run_options()
    return serve_settings(opts["store"], opts["model"], opts["demo"], opts["demo_tm"],
                          opts["decoder"], demo_token_memory=opts["demo_token_memory"])


def test_make_run_serves_the_translation_memory(make_run_settings: Settings) -> None:
    s = make_run_settings
    assert s.demo_corpus is not None and (ROOT / s.demo_corpus).is_file()
    assert s.demo_tm is not None and (ROOT / s.demo_tm).is_file()
    assert s.demo_tm_collection == "tm-en-fr"
    assert s.decoders == {"tm-en-fr": Path("models/decoder-en-fr")}
    assert (ROOT / s.decoders["tm-en-fr"] / "model.safetensors").is_file()
    assert s.demo_token_memory == Path("var/knn/tm-en-fr")  # built on the first start
    text = banner(s, "http://localhost:8000")
    assert "curl -s http://localhost:8000/v1/collections/tm-en-fr/generate" in text
    assert "curl -s http://localhost:8000/v1/collections/docs/search" in text


def test_tm_en_fr_generate_translates(make_client: MakeClient, make_run_settings: Settings,
                                      tmp_path: Path) -> None:
    s = make_run_settings
    assert s.demo_corpus is not None and s.demo_tm is not None
    docs, tm = tmp_path / "docs.jsonl", tmp_path / "tm.jsonl"
    head(ROOT / s.demo_corpus, docs, N_DOCS)
    pairs = {r["id"]: r for r in head(ROOT / s.demo_tm, tm, N_PAIRS)}
    client = make_client(  # make run's settings, on the module's fresh Lite file
        model=ROOT / s.model, demo_corpus=docs, demo_collection=s.demo_collection, demo_tm=tm,
        demo_tm_collection=s.demo_tm_collection, demo_token_memory=tmp_path / "knn",
        decoders={c: ROOT / p for c, p in s.decoders.items()})
    seeding = {p["collection"] + p.get("kind", ""): p
               for p in client.get("/ready").json()["seeding"]}
    # once the translation memory is filled, its token memory is built from it
    assert seeding["tm_en_frtoken memory"] == {"collection": "tm_en_fr", "kind": "token memory",
                                               "state": "complete", "written": N_PAIRS,
                                               "of": N_PAIRS}
    built = (tmp_path / "knn" / "memory.json").stat().st_mtime_ns

    listed = {c["name"]: c for c in client.get("/v1/collections").json()["collections"]}
    assert set(listed) == {"docs", "tm_en_fr"}
    assert listed["tm_en_fr"]["decoder"] == str(ROOT / "models/decoder-en-fr")
    assert listed["docs"]["decoder"] is None
    assert client.get("/v1/collections/tm-en-fr").json()["count"] == N_PAIRS
    assert client.get("/v1/collections/docs").json()["count"] == N_DOCS

    r = client.post("/v1/collections/tm-en-fr/generate",
                    json={"query": "A man in a blue shirt is riding a bike.", "top_k": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert "homme" in body["text"].lower(), body["text"]
    assert "seeding" not in body  # filled: nothing to say
    assert len(body["neighbours"]) == len(body["weights"]) == 4
    assert sum(body["weights"]) == pytest.approx(1.0, abs=1e-5)
    for h in body["neighbours"]:
        pair = pairs[h["id"]]  # a pair of the memory: English key, French value
        assert (h["text"], h["value"]) == (pair["text"], pair["value"])
        assert h["value"] and h["value"] != h["text"]
        assert h["metadata"] == {"source": "multi30k task1 train",
                                 "line": pair["metadata"]["line"]}
    # the banner's example works too
    example = client.post("/v1/collections/tm-en-fr/generate",
                          json={"query": "A man is riding a bike.", "top_k": 4})
    assert example.status_code == 200 and "homme" in example.json()["text"].lower()
    # generate used the token memory: its votes name the demo's pairs
    voted = client.post("/v1/collections/tm-en-fr/generate", json={
        "query": "A man is riding a bike.", "knn": {"return_votes": True}}).json()
    assert voted["knn"]["keys"] > N_PAIRS and voted["knn"]["tokens"]
    assert {v["id"] for t in voted["knn"]["tokens"] for v in t["votes"]} <= set(pairs)
    # the next start reads it instead of building it again
    again = make_client(model=ROOT / s.model, demo_tm=tm, demo_tm_collection=s.demo_tm_collection,
                        demo_token_memory=tmp_path / "knn",
                        decoders={c: ROOT / p for c, p in s.decoders.items()})
    assert again.post("/v1/collections/tm-en-fr/generate",
                      json={"query": "A dog.", "knn": {}}).json()["knn"]["keys"] > N_PAIRS
    assert (tmp_path / "knn" / "memory.json").stat().st_mtime_ns == built
    no_decoder = client.post("/v1/collections/docs/generate", json={"query": "x"})
    assert no_decoder.status_code == 409  # the docs collection has no decoder


def test_a_demo_load_stopped_while_writing_is_completed_on_the_next_start(
        make_client: MakeClient, tmp_path: Path) -> None:
    rows = [{"id": f"d{i}", "text": f"demo document number {i}", "metadata": {"i": i}}
            for i in range(30)]
    corpus = tmp_path / "demo.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    client = make_client(demo_corpus=corpus, demo_collection="resume-demo")
    assert client.get("/v1/collections/resume-demo").json()["count"] == 30
    # what a start stopped after part of the writes leaves: fewer documents than the corpus
    r = client.request("DELETE", "/v1/collections/resume-demo/documents",
                       json={"ids": [f"d{i}" for i in range(12, 30)]})
    assert r.status_code == 200, r.text
    assert client.get("/v1/collections/resume-demo").json()["count"] == 12
    again = make_client(demo_corpus=corpus, demo_collection="resume-demo")
    assert again.get("/v1/collections/resume-demo").json()["count"] == 30
    doc = again.get("/v1/collections/resume-demo/documents/d29").json()
    assert doc["text"] == "demo document number 29" and doc["metadata"] == {"i": 29}
    again.delete("/v1/collections/resume-demo")


def test_demo_collections_answer_while_filled_in_the_background(
        make_client: MakeClient, tmp_path: Path) -> None:
    """A first start answers before its demo collections are filled: they exist from the
    first request, ``/ready`` shows how far each is, and their answers carry ``seeding``
    until it is complete (then neither says anything)."""
    rows = [{"id": f"b{i}", "text": f"background document number {i}"} for i in range(40)]
    corpus = tmp_path / "background.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    client = make_client(filled=False, demo_corpus=corpus, demo_collection="bg-demo")
    assert client.get("/v1/collections/bg-demo").status_code == 200  # exists at once
    body = wait_filled(client)
    assert body["status"] == "ready" and body["detail"] == "ok"
    assert body["seeding"] == [{"collection": "bg_demo", "state": "complete", "written": 40,
                                "of": 40}]
    assert client.get("/v1/collections/bg-demo").json()["count"] == 40
    search = {"query": "background document number 7", "top_k": 3}
    assert "seeding" not in client.post("/v1/collections/bg-demo/search", json=search).json()

    svc = client.app.state.service  # type: ignore[attr-defined]
    progress = svc.seeding["bg_demo"]  # as it is midway through a first start
    progress.state, progress.written = "seeding", 16
    try:
        ready = client.get("/ready").json()
        assert ready["detail"] == ("ok; demo collections filling in the background: "
                                   "bg_demo 16 of 40")
        r = client.post("/v1/collections/bg-demo/search", json=search)
        assert r.status_code == 200 and r.json()["hits"]
        assert r.json()["seeding"] == {"collection": "bg_demo", "state": "seeding",
                                       "written": 16, "of": 40}
        r = client.post("/v1/collections/bg-demo/attend", json=search)
        assert r.json()["seeding"]["written"] == 16
        batch = client.post("/v1/collections/bg-demo/search/batch",
                            json={"searches": [search, search]}).json()
        assert [x["seeding"]["of"] for x in batch["results"]] == [40, 40]
        other = client.post("/v1/collections", json={"name": "not-a-demo"})
        assert other.status_code in (200, 201)
        plain = client.post("/v1/collections/not-a-demo/search", json=search).json()
        assert "seeding" not in plain  # only the demo collection being filled says so
    finally:
        progress.state, progress.written = "complete", 40
        client.delete("/v1/collections/not-a-demo")
        client.delete("/v1/collections/bg-demo")
