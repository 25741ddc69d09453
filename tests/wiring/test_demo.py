"""Demo collections (wiring.demo) on a real Milvus Lite file: created once, completed after a
stopped start, and rebuilt when the served encoder is not the one that made them. They are
written through the collections' write path (wiring.collections), built here as a server
builds it, less the HTTP: its ``embed`` encodes in a thread instead of a batcher."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wiring.adapter import Adapter
from wiring.calibrator import Calibrator
from wiring.collections import Collections, Limits
from wiring.components import Components, load_components
from wiring.demo import (
    fill_demo,
    prepare_demo,
    read_jsonl,
    read_vectors,
    seed_demo,
    vectors_path,
    write_vectors,
)
from wiring.encoders import Encoders, Served

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Embedded:
    vectors: np.ndarray
    truncated: list[bool]


def collections_of(parts: Components) -> Collections:
    """The collections over ``parts``: the real write path, its embed a thread's encode."""
    async def off_loop(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def embed(texts: list[str], truncate: bool, dim: int | None = None,
                    model: Served | None = None) -> Embedded:
        enc = (model or default).encoder
        assert dim in (None, enc.dim)
        x = await asyncio.to_thread(enc.encode, list(texts))
        return Embedded(x, list(enc.tokenize(list(texts))[1]))

    def no_other(name: str, path: Path) -> Served:
        raise AssertionError(f"no encoder but the default here, not {name}")

    default = Served(parts.info.name, Path("."), parts.encoder, parts.info, None, 0, {})
    encoders = Encoders(default, None, no_other)
    calibrator = Calibrator(parts.store, embed, {}, 0.5, auto=False)
    adapter = Adapter(parts.store, encoders, lambda *_: None)
    return Collections(parts.store, encoders, embed, off_loop, off_loop, calibrator, adapter,
                       parts.decoders, parts.token_memories, lambda: None, 0.5, Limits())


def seed(parts: Components, demo: Path, collection: str = "docs") -> int:
    return asyncio.run(seed_demo(parts, collections_of(parts), demo, collection))

ROWS = [{"id": f"d{i}", "text": f"demo document about topic {i}", "value": f"v{i}"}
        for i in range(25)]


def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "demo.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_demo_made_by_another_encoder_is_rebuilt(tiny_encoder_dir: Path,
                                                 other_tiny_encoder_dir: Path,
                                                 tmp_path: Path) -> None:
    store, demo = str(tmp_path / "demo.db"), corpus(tmp_path)
    old = load_components(other_tiny_encoder_dir, store)
    try:
        assert seed(old, demo) == 25
        assert seed(old, demo) == 0  # complete: nothing written again
        old_fingerprint = old.info.fingerprint
    finally:
        old.close()
    new = load_components(tiny_encoder_dir, store)
    try:
        assert new.info.fingerprint != old_fingerprint
        assert seed(new, demo) == 25
        info = new.store.describe("docs")
        assert info.encoder == new.info and new.store.count("docs") == 25
        xq = new.encoder.encode([ROWS[3]["text"]])
        (item,) = new.store.get("docs", ["d3"])  # its vector is the served encoder's now
        assert item.value == "v3" and np.allclose(item.vector, xq[0], atol=1e-3)
        (hits,) = new.store.search("docs", xq, 1, encoder=new.info, consistency="Strong")
        # the tiny random encoder may give texts differing in one digit the same vector
        assert np.isclose(hits[0].score, 1.0, atol=1e-3)
    finally:
        new.close()


def test_matching_vectors_file_is_loaded_not_encoded(tiny_encoder_dir: Path, tmp_path: Path
                                                      ) -> None:
    demo = corpus(tmp_path)
    parts = load_components(tiny_encoder_dir, str(tmp_path / "demo.db"))
    try:
        path = write_vectors(parts.encoder, parts.info, demo)
        assert path == vectors_path(demo) == tmp_path / "demo.vectors.npz"
        expected = parts.encoder.encode([r["text"] for r in ROWS])

        def no_encoding(*_: object, **__: object) -> None:
            raise AssertionError("the corpus was encoded although its vectors file matches")

        parts.encoder.encode = no_encoding  # type: ignore[method-assign]
        assert seed(parts, demo) == 25
        # made as POST /v1/collections makes one: its documents cut into passages (each of
        # these short ones a single passage, so the shipped vectors are its vectors)
        assert parts.store.describe("docs").passages is not None
        (got,) = parts.store.get("docs", ["d7"])
        assert np.allclose(got.vector, expected[7], atol=2e-3)  # float16 in the file
        assert got.text == ROWS[7]["text"] and got.value == "v7"
    finally:
        parts.close()


def test_vectors_of_another_encoder_or_corpus_are_not_used(
        tiny_encoder_dir: Path, other_tiny_encoder_dir: Path, tmp_path: Path) -> None:
    demo = corpus(tmp_path)
    other = load_components(other_tiny_encoder_dir, str(tmp_path / "other.db"))
    try:
        write_vectors(other.encoder, other.info, demo)
    finally:
        other.close()
    parts = load_components(tiny_encoder_dir, str(tmp_path / "demo.db"))
    try:
        assert read_vectors(demo, parts.info, len(ROWS)) is None  # another fingerprint
        write_vectors(parts.encoder, parts.info, demo)
        assert read_vectors(demo, parts.info, len(ROWS)) is not None
        with demo.open("a") as f:  # the corpus changes after its vectors were written
            f.write(json.dumps({"id": "d25", "text": "one more document"}) + "\n")
        assert read_vectors(demo, parts.info, len(ROWS) + 1) is None
        assert seed(parts, demo) == 26  # encoded instead
        xq = parts.encoder.encode(["one more document"])
        (hits,) = parts.store.search("docs", xq, 1, encoder=parts.info, consistency="Strong")
        assert hits[0].id == "d25" and np.isclose(hits[0].score, 1.0, atol=1e-3)
        vectors_path(demo).write_bytes(b"not an npz file")
        assert read_vectors(demo, parts.info, len(ROWS) + 1) is None  # unreadable: encode
    finally:
        parts.close()


def test_shipped_demo_vectors_are_the_shipped_encoders() -> None:
    """The vectors files in data/demo (the docs corpus' only: the translation memory's, 15
    MB, would pass the repository's size budget) match the shipped encoder and corpora (else a first
    start encodes: run `qkv demo-vectors data/demo/python-docs.jsonl.gz` after changing either), and
    hold what that encoder makes of the texts."""
    from wiring.components import encoder_info, load_encoder

    enc = load_encoder(ROOT / "models/encoder-default", device="cpu")
    info = encoder_info(enc)
    shipped = sorted((ROOT / "data/demo").glob("*.vectors.npz"))
    assert shipped, "no demo vectors shipped"
    for path in shipped:
        corpus_path = path.with_name(path.name.replace(".vectors.npz", ".jsonl.gz"))
        rows = read_jsonl(corpus_path)
        x = read_vectors(corpus_path, info, len(rows))
        assert x is not None, f"{vectors_path(corpus_path)} missing or stale"
        sample = list(range(0, len(rows), max(1, len(rows) // 16)))
        fresh = enc.encode([rows[i]["text"] for i in sample])
        assert np.min(np.sum(fresh * x[sample], axis=1)) > 0.9995


def test_demo_vectors_command(tiny_encoder_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    demo = corpus(tmp_path)
    missing = CliRunner().invoke(app, ["demo-vectors", str(tmp_path / "nope.jsonl"),
                                       "--model", str(tiny_encoder_dir)],
                                 env={"COLUMNS": "300"})  # no line breaks in the message
    assert missing.exit_code == 2 and "not a file" in missing.output
    assert not vectors_path(demo).exists()
    done = CliRunner().invoke(app, ["demo-vectors", str(demo), "--model", str(tiny_encoder_dir)])
    assert done.exit_code == 0, done.output
    parts = load_components(tiny_encoder_dir, str(tmp_path / "demo.db"))
    try:
        x = read_vectors(demo, parts.info, len(ROWS))
        assert x is not None and x.shape == (25, parts.info.dim)
    finally:
        parts.close()


class StopAfter:
    """A stop event that is set once it has been asked ``n`` times (after ``n`` batches)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def is_set(self) -> bool:
        self.n -= 1
        return self.n < 0


def test_filling_stopped_between_batches_is_completed_by_the_next_start(
        tiny_encoder_dir: Path, tmp_path: Path) -> None:
    """The service's two steps: prepare (the collection exists, empty) then fill a batch
    at a time; stopped after two batches of 10 it holds 20 of 25 and says ``stopped``; the
    next start sees it partial and writes them all."""
    demo = corpus(tmp_path)
    parts = load_components(tiny_encoder_dir, str(tmp_path / "demo.db"))
    try:
        plan = prepare_demo(parts, demo, "docs")
        assert parts.store.count("docs") == 0 and plan.progress.state == "waiting"
        assert plan.progress.of == 25 and plan.progress.written == 0
        stop = StopAfter(2)
        write = collections_of(parts)
        assert asyncio.run(fill_demo(write, plan, batch=10, stop=stop)) == 20  # type: ignore[arg-type]
        assert plan.progress.to_dict() == {"collection": "docs", "state": "stopped",
                                           "written": 20, "of": 25}
        assert parts.store.count("docs") == 20
        again = prepare_demo(parts, demo, "docs")  # partial: all written again
        assert len(again.rows) == 25 and again.progress.state == "waiting"
        assert asyncio.run(fill_demo(write, again, batch=10)) == 25
        assert again.progress.state == "complete" and again.progress.written == 25
        assert parts.store.count("docs") == 25
        done = prepare_demo(parts, demo, "docs")
        assert done.rows == [] and done.progress.state == "complete"
        assert asyncio.run(fill_demo(write, done)) == 0
    finally:
        parts.close()


def test_a_long_demo_document_is_cut_into_passages(tiny_encoder_dir: Path, tmp_path: Path
                                                   ) -> None:
    """A demo document longer than a passage is cut and embedded passage by passage (the
    vectors file's one vector for it is not used for its passages), read back whole, and
    counted once; the short ones still take their shipped vectors."""
    from index.passages import count_filter
    from index.passages import read as read_document

    long_text = " ".join(f"Sentence {i} of the long demo document talks about item {i}."
                         for i in range(40))
    rows = [*ROWS, {"id": "long", "text": long_text}]
    demo = tmp_path / "demo.jsonl"
    demo.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parts = load_components(tiny_encoder_dir, str(tmp_path / "demo.db"))
    try:
        write_vectors(parts.encoder, parts.info, demo)
        encoded: list[str] = []
        encode = parts.encoder.encode

        def counted(texts: list[str], *args: Any, **kwargs: Any) -> np.ndarray:
            encoded.extend(texts)
            return encode(texts, *args, **kwargs)

        parts.encoder.encode = counted  # type: ignore[method-assign]
        assert seed(parts, demo) == 26
        assert encoded and all(t not in encoded for t in (r["text"] for r in ROWS))
        assert parts.store.count("docs", None, count_filter()) == 26
        assert parts.store.count("docs") > 26  # the long one's passages are rows of their own
        found = read_document(parts.store, "docs", "long")
        assert found is not None and found[0].text == long_text and found[1] > 1
        (head,) = parts.store.get("docs", ["long"])  # its first passage, embedded as such
        assert head.text != long_text and long_text.startswith(head.text)
        shipped = read_vectors(demo, parts.info, len(rows))
        assert shipped is not None and not np.allclose(head.vector, shipped[-1], atol=1e-2)
        (short,) = parts.store.get("docs", ["d7"])  # a short one: its shipped vector
        assert np.allclose(short.vector, shipped[7], atol=1e-3)
        assert seed(parts, demo) == 0  # complete: documents counted, not rows
    finally:
        parts.close()
