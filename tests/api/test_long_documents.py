"""Long documents through the API (issue 70): a collection cuts each document into passages by
default, searches return documents with their best passages, and a document is written,
replaced and deleted whole, through a kill -9 of the server too."""

from __future__ import annotations

import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_errors import error_of
from fastapi.testclient import TestClient
from pdfs import pdf_with
from uvicorn_server import UvicornServer

from index import MilvusStore
from index import passages as P


def long_text(tag: str, paragraphs: int = 14, words: int = 40) -> str:
    """Paragraphs of words unique to ``tag`` and the paragraph (``{tag}p{i}w{j}``)."""
    return "\n\n".join(" ".join(f"{tag}p{i}w{j}" for j in range(words)) + "."
                       for i in range(paragraphs))


@pytest.fixture
def long_coll(client: TestClient) -> Iterator[str]:
    name = "ld_" + uuid.uuid4().hex[:10]
    # the tiny test encoder reads 24 tokens: passages of more would be cut
    r = client.post("/v1/collections", json={"name": name, "passage_tokens": 64})
    assert r.status_code == 422 and "at most 24" in r.text, r.text
    r = client.post("/v1/collections", json={"name": name})  # the default: what it reads
    assert r.status_code == 201, r.text
    assert r.json()["passages"] == {"size": 24, "overlap": 6, "pack": 6}
    yield name
    client.delete(f"/v1/collections/{name}")


def assert_error(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    return error_of(r)


def upsert(client: TestClient, coll: str, docs: list[dict[str, Any]], **kw: Any) -> None:
    r = client.post(f"/v1/collections/{coll}/documents", json={"documents": docs, **kw})
    assert r.status_code == 200, r.text
    assert r.json() == {"upserted": len(docs), "truncated": []}


def search(client: TestClient, coll: str, **body: Any) -> dict[str, Any]:
    r = client.post(f"/v1/collections/{coll}/search", json={"consistency": "Strong", **body})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_a_long_document_is_found_by_any_passage_and_read_back_whole(
        client: TestClient, long_coll: str) -> None:
    docs = [{"id": t, "text": long_text(t), "metadata": {"kind": t}} for t in ("a", "b", "c")]
    docs.append({"id": "s", "text": "a short note", "metadata": {"kind": "s"}})
    upsert(client, long_coll, docs, truncate=False)  # nothing is cut
    info = client.get(f"/v1/collections/{long_coll}").json()
    assert info["count"] == 4  # documents, not passages
    base = f"/v1/collections/{long_coll}/documents"
    b = client.get(f"{base}/b").json()
    assert b["text"] == docs[1]["text"] and b["metadata"] == {"kind": "b"}
    # words from b's 12th paragraph, far past the encoder's window
    q = " ".join(f"bp11w{j}" for j in range(5, 12))
    for mode in ("bm25", "hybrid"):
        out = search(client, long_coll, query=q, mode=mode, top_k=3)
        hits = out["hits"]
        assert hits[0]["id"] == "b", (mode, hits)
        assert len({h["id"] for h in hits}) == len(hits)  # each document once
        best = hits[0]["passages"][0]
        assert any(w in best["text"].split() for w in q.split())
        assert hits[0]["text"] == best["text"]
        assert b["text"][best["start"]:best["end"]] == best["text"]
        assert hits[0]["metadata"] == {"kind": "b"}  # the caller's, without the layout's
    # passages instead of documents: several of one document may come back
    out = search(client, long_coll, query="ap0w1 ap5w1 ap9w1", mode="bm25", top_k=5,
                 group_by_document=False)
    assert [h["id"] for h in out["hits"]][:3] == ["a", "a", "a"]
    assert len({h["passages"][0]["index"] for h in out["hits"][:3]}) == 3
    # filters apply to every passage of a document
    out = search(client, long_coll, query=q, mode="hybrid", top_k=5,
                 filter={"key": "kind", "op": "eq", "value": "c"})
    assert [h["id"] for h in out["hits"]] == ["c"]
    # pages are pages of documents
    whole = [h["id"] for h in search(client, long_coll, query=q, top_k=4)["hits"]]
    page = [h["id"] for h in search(client, long_coll, query=q, top_k=2, offset=2)["hits"]]
    assert len(whole) == 4 and page == whole[2:]
    # judged queries name documents: a tune scores the passages' documents against them
    labels = [{"query": " ".join(f"{t}p{i}w{j}" for j in range(3, 9)), "relevant": [t]}
              for t in ("a", "b", "c") for i in (2, 9, 12)]
    r = client.post(f"/v1/collections/{long_coll}/tune", json={"labels": labels, "wait": True})
    assert r.status_code == 200, r.text
    cal = r.json()["calibration"]
    assert cal["source"] == "labels" and cal["docs"] == 4 and cal["queries"] == 9
    assert cal["signals"]["ndcg@10_bm25"] > 0.9, cal["signals"]  # the documents, found
    # attend weighs documents
    r = client.post(f"/v1/collections/{long_coll}/attend", json={"query": q, "top_k": 3})
    assert r.status_code == 200 and abs(sum(r.json()["weights"]) - 1) < 1e-4
    assert len({n["id"] for n in r.json()["neighbours"]}) == 3


def test_bm25_finds_a_passage_by_its_own_words_and_its_neighbours(
        client: TestClient, long_coll: str) -> None:
    """A hybrid collection's passages are indexed for BM25 with the passage on each side:
    a word of one passage finds it and its two neighbours, the one holding it first."""
    upsert(client, long_coll, [{"id": "b", "text": long_text("b")}], truncate=False)
    out = search(client, long_coll, query="bp6w20", mode="bm25", top_k=10,
                 group_by_document=False)
    found = [h["passages"][0] for h in out["hits"]]
    own = [p["index"] for p in found if "bp6w20" in p["text"].split()]
    assert len(own) == 1 and len(found) == 3, found
    assert sorted(p["index"] for p in found) == [own[0] - 1, own[0], own[0] + 1]
    out = search(client, long_coll, query="bp6w20", mode="bm25", top_k=1)
    assert "bp6w20" in out["hits"][0]["passages"][0]["text"].split()


def test_replace_and_delete_act_on_the_whole_document(client: TestClient, lite_path: str,
                                                      long_coll: str) -> None:
    upsert(client, long_coll, [{"id": "d", "text": long_text("old")},
                               {"id": "e", "text": long_text("keep")}])
    store = MilvusStore(lite_path)
    try:
        rows = store.count(long_coll)
        (head,) = store.get(long_coll, ["d"])
        n_d = P.Head.of(head).n  # d's passages
        assert rows > n_d > 4
        upsert(client, long_coll, [{"id": "d", "text": "new and short"}])
        assert client.get(f"/v1/collections/{long_coll}/documents/d").json()["text"] == (
            "new and short")
        assert store.count(long_coll) == rows - n_d + 1  # e's passages and d's one row
        hits = search(client, long_coll, query="oldp9w3 oldp9w4", mode="bm25")["hits"]
        assert "d" not in [h["id"] for h in hits]  # no passage of the old d is left
        r = client.request("DELETE", f"/v1/collections/{long_coll}/documents",
                           json={"ids": ["e"]})
        assert r.status_code == 200
        assert store.count(long_coll) == 1
        assert_error(client.get(f"/v1/collections/{long_coll}/documents/e"), 404)
    finally:
        store.close()


def test_a_multi_tenant_collection_keeps_long_documents_apart(client: TestClient) -> None:
    name = "ldt_" + uuid.uuid4().hex[:8]
    assert client.post("/v1/collections", json={"name": name, "multi_tenant": True,
                                                "passage_tokens": 24}).status_code == 201
    try:
        for t in ("a", "b"):
            upsert(client, name, [{"id": "same", "text": long_text(t)}], tenant=t)
        q = "bp10w1 bp10w2 bp10w3"
        hits = search(client, name, query=q, mode="bm25", tenant="a")["hits"]
        assert all(p["text"].startswith("ap") for h in hits for p in h["passages"])
        hits = search(client, name, query=q, mode="bm25", tenant="b")["hits"]
        assert hits[0]["id"] == "same" and "bp10w1" in hits[0]["passages"][0]["text"]
        r = client.get(f"/v1/collections/{name}/documents/same", headers={"X-Tenant": "a"})
        assert r.json()["text"] == long_text("a")
    finally:
        client.delete(f"/v1/collections/{name}")


def test_a_document_past_the_limit_is_413_and_one_row_collections_say_so(
        make_client: Any, long_coll: str) -> None:
    client = make_client(max_body_bytes=32 * 2**20)
    huge = "word " * (P.MAX_DOCUMENT_BYTES // 5 + 1)
    body = assert_error(client.post(f"/v1/collections/{long_coll}/documents",
                                    json={"documents": [{"id": "x", "text": huge}]}), 413)
    assert "10,000,000" in body["error"]
    body = assert_error(client.post(f"/v1/collections/{long_coll}/documents",
                                    json={"documents": [{"id": "x§1", "text": "t"}]}), 422)
    assert "§" in body["error"]


def test_files_are_upserted_as_documents(client: TestClient, long_coll: str) -> None:
    base = f"/v1/collections/{long_coll}"
    md = ("# Care\n\n" + long_text("md", 10)).encode()
    for name, data, fmt in (("guide/care.md", md, "markdown"),
                            ("page.html", b"<h1>Hi</h1><p>an html page</p>", "html"),
                            ("scan.pdf", pdf_with("a pdf of words"), "pdf")):
        r = client.post(f"{base}/files", params={"file": name}, content=data,
                        headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 200, r.text
        assert r.json()["id"] == name and r.json()["format"] == fmt
        got = client.get(f"{base}/documents/{name}").json()
        assert got["metadata"] == {"source": name, "format": fmt}
    assert client.get(f"{base}/documents/guide/care.md").json()["text"] == md.decode()
    assert "a pdf of words" in client.get(f"{base}/documents/scan.pdf").json()["text"]
    r = client.post(f"{base}/files", params={"file": "notes.md", "id": "n1"}, content=b"x y")
    assert r.status_code == 200 and r.json()["id"] == "n1"
    body = assert_error(client.post(f"{base}/files", params={"file": "bad.pdf"},
                                    content=b"%PDF-1.4 not really"), 422)
    assert "bad.pdf" in body["error"]
    body = assert_error(client.post(f"{base}/files", params={"file": "x.docx"},
                                    content=b"PK"), 422)
    assert ".pdf" in body["error"]  # the suffixes it reads


@pytest.mark.slow
@pytest.mark.long
def test_kill_9_during_long_upserts_then_a_rerun_leaves_every_document_whole(
        tmp_path: Path, tiny_encoder_dir: Path) -> None:
    """The server is killed with SIGKILL while it replaces long documents (three times, at
    different moments of the write). Right after each restart every document reads back
    whole, old or new; the client then sends the killed write again: each document reads
    back as last written, the collection counts each once, and no passage is left over."""
    db = tmp_path / "lite.db"
    server = UvicornServer(tmp_path / "serve.log", env={
        "QKV_STORE": str(db), "QKV_MODEL": str(tiny_encoder_dir), "QKV_AUTO_TUNE": "false"})
    rng = random.Random(0)
    coll = "killed"
    current: dict[str, str] = {}

    def batch(round_: int) -> list[dict[str, str]]:
        return [{"id": f"doc{i}", "text": long_text(f"r{round_}d{i}x", rng.randint(4, 24), 30)}
                for i in range(12)]

    def write(url: str, docs: list[dict[str, str]]) -> None:
        r = httpx.post(f"{url}/v1/collections/{coll}/documents", json={"documents": docs},
                       timeout=120)
        assert r.status_code == 200, r.text
        current.update({d["id"]: d["text"] for d in docs})

    url = server.start()
    try:
        r = httpx.post(f"{url}/v1/collections", json={"name": coll, "passage_tokens": 20})
        assert r.status_code == 201, r.text
        write(url, batch(0))
        for round_, delay in enumerate((0.03, 0.1, 0.25), 1):
            docs = batch(round_)
            proc = server.proc
            assert proc is not None

            def kill(proc: Any = proc, delay: float = delay) -> None:
                time.sleep(delay)
                proc.send_signal(signal.SIGKILL)
            killer = threading.Thread(target=kill)
            killer.start()
            try:
                httpx.post(f"{url}/v1/collections/{coll}/documents",
                           json={"documents": docs}, timeout=120)
            except httpx.TransportError:
                pass
            killer.join()
            proc.wait(10)
            server.proc = None
            url = server.start()
            new = {d["id"]: d["text"] for d in docs}
            for doc_id, old in current.items():  # whole: the old text or the new one
                r = httpx.get(f"{url}/v1/collections/{coll}/documents/{doc_id}")
                assert r.status_code == 200 and r.json()["text"] in (old, new[doc_id]), doc_id
            write(url, docs)  # the client's rerun
        for doc_id, text in current.items():
            r = httpx.get(f"{url}/v1/collections/{coll}/documents/{doc_id}")
            assert r.status_code == 200 and r.json()["text"] == text, doc_id
        assert httpx.get(f"{url}/v1/collections/{coll}").json()["count"] == len(current)
    finally:
        server.stop()
    store = MilvusStore(str(db))
    try:
        rows = store.count(coll)
        heads = store.count(coll, None, P.count_filter())
    finally:
        store.close()
    assert heads == len(current)
    # every stored row is a passage of a document as last written: none doubled, none old
    from encoder import load

    tok = load(tiny_encoder_dir, device="cpu").tokenizer
    settings = P.Settings.sized(20)
    expected = sum(len(P.split(t, settings, lambda ts: [len(e.ids) for e in
                                                        tok.encode_batch(list(ts))]))
                   for t in current.values())
    assert rows == expected
