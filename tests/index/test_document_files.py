"""The bulk job over document files (text, Markdown, HTML, PDF) and long rows: each cut into
passages as its collection says, a file it cannot read reported by name and skipped."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pdfs import pdf_with

from index import FaissStore
from index import passages as P
from index.bulk.documents import html_text
from index.bulk.job import JobConfig, bulk_index

DIM = 8


def words(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def embed(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), DIM), np.float32)
    for i, t in enumerate(texts):
        v = np.random.default_rng(abs(hash(t)) % 2**32).normal(size=DIM)
        out[i] = v / np.linalg.norm(v)
    return out


def long_text(tag: str, paragraphs: int = 12) -> str:
    return "\n\n".join(" ".join(f"{tag}{p}w{i}" for i in range(30)) + "."
                       for p in range(paragraphs))


def test_a_folder_of_documents_is_indexed_whole_and_a_bad_file_skipped(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.txt").write_text(long_text("a"))
    (docs / "sub" / "b.md").write_text("# Heading b\n\n" + long_text("b"))
    (docs / "c.html").write_text("<html><head><title>Page c</title><style>x{}</style>"
                                 "</head><body><p>First para of c.</p><script>no()</script>"
                                 "<h2>Part</h2><p>Second para of c.</p></body></html>")
    (docs / "d.pdf").write_bytes(pdf_with("words of the pdf file"))
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a pdf")
    (docs / "ignored.bin").write_bytes(b"\x00\x01")
    store = FaissStore(tmp_path / "store")
    cfg = JobConfig(state_path=tmp_path / "state.json", rejects_path=tmp_path / "rejects.jsonl",
                    batch_size=2, progress_bar=False,
                    passages=P.Settings(40, 8).to_dict())
    s = bulk_index(store, "files", [docs], embed, cfg, count=words)
    assert s.complete and s.written == 4 and s.rejected == 1
    (reject,) = [json.loads(x) for x in (tmp_path / "rejects.jsonl").read_text().splitlines()]
    assert "broken.pdf" in reject["reason"]
    assert store.describe("files").passages == {"size": 40, "overlap": 8, "pack": 8}
    got = P.read(store, "files", "a.txt")
    assert got is not None and got[0].text == long_text("a") and got[1] > 5
    assert got[0].metadata == {"source": "a.txt", "format": "text"}
    got = P.read(store, "files", "sub/b.md")
    assert got is not None and got[0].text.startswith("# Heading b")
    got = P.read(store, "files", "c.html")
    assert got is not None and got[0].text == ("# Page c\n\nFirst para of c.\n\n## Part\n\n"
                                               "Second para of c.")
    got = P.read(store, "files", "d.pdf")
    assert got is not None and "words of the pdf file" in got[0].text
    assert store.count("files", None, P.count_filter()) == 4
    rows = store.count("files")
    # run again: complete, nothing doubled
    again = bulk_index(store, "files", [docs], embed, cfg, count=words)
    assert again.complete and store.count("files") == rows


def test_long_rows_are_cut_into_passages_and_short_ones_stay_one_row(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    long = long_text("r", 40)  # 40 paragraphs of 30 words: many passages of 40
    rows.write_text(json.dumps({"id": "long", "text": long}) + "\n"
                    + json.dumps({"id": "short", "text": "a short row"}) + "\n")
    store = FaissStore(tmp_path / "store")
    cfg = JobConfig(state_path=tmp_path / "state.json", rejects_path=tmp_path / "rej.jsonl",
                    progress_bar=False, passages=P.Settings(40, 8).to_dict())
    bulk_index(store, "rows", [rows], embed, cfg, count=words)
    got = P.read(store, "rows", "long")
    assert got is not None and got[0].text == long and got[1] == len(P.split(long, P.Settings(
        40, 8), words))
    (short,) = store.get("rows", ["short"])
    assert short.text == "a short row" and short.metadata == {}
    # without a token counter (or passages: None) a document is one row, as before
    bulk_index(store, "plain", [rows], embed, JobConfig(
        state_path=tmp_path / "s2.json", rejects_path=tmp_path / "r2.jsonl",
        progress_bar=False, passages=None), count=words)
    assert store.count("plain") == 2 and store.describe("plain").passages is None


def test_html_text_keeps_paragraphs_and_headings_and_drops_scripts() -> None:
    assert html_text("<h1>T</h1><div>a <b>b</b>\n c</div><ul><li>x</li><li>y</li></ul>"
                     "<script>var s;</script>") == "# T\n\na b c\n\nx\n\ny"
