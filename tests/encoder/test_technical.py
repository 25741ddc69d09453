"""Encoder v3's technical sources (encoder/technical.py): train splits only, the dev
collections' texts held out, missing folders skipped."""

import gzip
import json
import shutil
from pathlib import Path

import pytest

from encoder.devsets import _write
from encoder.sources import build_sources
from encoder.technical import held_out, norm, technical_sources


def _rows(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "pairs.jsonl.gz", "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _definition(i: int) -> str:
    return (f"A program number {i} that copies files between hosts over a network, "
            f"keeping permissions and times; written for system {i % 7} administrators, it "
            "reads a configuration file and logs every transfer it makes to the console. It "
            "retries a broken transfer three times, then reports the failure by mail to the "
            "operator who started it, with the remote host's name and the time it gave up.")


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    _rows(root / "defs/foldoc", [{"term": f"term{i}", "aliases": [],
                                  "definition": _definition(i), "domain": ""}
                                 for i in range(30)])
    _rows(root / "pairs/scitldr", [
        {"summary": f"tldr {i}", "abstract": f"abstract {i} " + _definition(i),
         "paper_id": str(i), "split": "train" if i < 5 else "test"} for i in range(8)])
    _rows(root / "pairs/parasci", [
        {"text1": f"a {i}", "text2": f"b {i}", "subset": s, "split": sp}
        for i, (s, sp) in enumerate([("acl", "train"), ("acl", "test"), ("arxiv", "val")])])
    return root


def test_train_splits_only_and_missing_folders_skipped(data: Path) -> None:
    sources = {s.name: s for s in technical_sources(data, lexical=False)}
    assert {"foldoc", "scitldr", "parasci-acl", "technical-spans"} <= set(sources)
    assert "manpages" not in sources and "bible-kjv-web" not in sources  # no folder
    assert sources["parasci-acl"].pairs == [("a 0", "b 0")]
    assert {q for q, _ in sources["scitldr"].pairs} == {f"tldr {i}" for i in range(5)}
    assert sources["foldoc"].retrieval and not sources["parasci-acl"].retrieval


def test_dev_queries_and_judged_documents_are_held_out(data: Path, tmp_path: Path) -> None:
    dev = _write(tmp_path / "devcoll/foldoc",
                 [{"_id": "d1", "title": "", "text": _definition(3)},
                  {"_id": "d2", "title": "", "text": _definition(4)}],
                 {"q1": "TERM3", "q2": "something else"}, [("q1", "d1"), ("q2", "d2")])
    held = held_out([dev])
    assert norm(" term3 ") in held and norm(_definition(4)) in held
    pairs = {s.name: s for s in technical_sources(data, hold_out=[dev], lexical=False)}
    foldoc = pairs["foldoc"].pairs
    assert len(foldoc) == 28  # term3 (its query) and term4 (its judged document) are gone
    assert not any(q in ("term3", "term4") for q, _ in foldoc)
    spans = " ".join(q + " " + d for q, d in pairs["technical-spans"].pairs)
    assert "number 3 " not in spans and "number 4 " not in spans


def test_a_hold_out_folder_without_qrels_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="qrels"):
        held_out([tmp_path / "empty"])


def test_build_sources_adds_them_only_when_asked(data_dir: Path, data: Path,
                                                  tmp_path: Path) -> None:
    both = tmp_path / "both"
    shutil.copytree(data_dir, both)
    shutil.copytree(data / "defs", both / "defs")
    plain = {s.name for s in build_sources(both, lexical=False)}
    more = {s.name for s in build_sources(both, lexical=False, technical=True)}
    assert "foldoc" not in plain and "foldoc" in more and plain < more
