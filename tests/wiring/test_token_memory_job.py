"""The token-memory job over a translation-memory collection (Milvus Lite and FAISS): a
build cut off after a page resumes where it stopped and ends with the memory a build in one
go makes; documents without a value are no pair; another decoder starts over; a decoder
that reads neighbours gets the collection's nearest other documents."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import decoder
from decoder.knn import TokenMemory, collect_keys
from decoder.testing import tiny_decoder, toy_pairs
from index import EncoderInfo, FaissStore, Item, MilvusStore, VectorStore
from wiring.token_memory_job import build_dir, build_from_collection

PAIRS = toy_pairs(30, seed=5)
D = 8
ENC = EncoderInfo("enc-test", "abc", D)


@pytest.fixture(scope="module")
def dec(tmp_path_factory: pytest.TempPathFactory) -> decoder.Decoder:
    return decoder.load(tiny_decoder(tmp_path_factory.mktemp("job") / "dec"), device="cpu")


@pytest.fixture(params=["lite", "faiss"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> VectorStore:
    s: VectorStore = (MilvusStore(str(tmp_path / "tm.db")) if request.param == "lite"
                      else FaissStore(tmp_path / "faiss"))
    request.addfinalizer(s.close)
    xb = _vectors()
    items = [Item(f"p{i:03d}", xb[i], s_, t) for i, (s_, t) in enumerate(PAIRS)]
    items += [Item("q-novalue", xb[-2], "A dog.", None), Item("q-empty", xb[-1], " ", "Un.")]
    s.create("tm", D, ENC)
    s.upsert("tm", items[::-1], ENC)  # written out of id order
    return s


def _vectors() -> np.ndarray:
    xb = np.random.default_rng(0).standard_normal((len(PAIRS) + 2, D)).astype(np.float32)
    return xb / np.linalg.norm(xb, axis=1, keepdims=True)


def _by_pair(memory: TokenMemory) -> dict[str, list[int]]:
    """Each pair id's values, in key order: what the memory remembers of it."""
    ids = memory.ids
    out: dict[str, list[int]] = {}
    for v, r in zip(memory.values.tolist(), memory.rows.tolist(), strict=True):
        out.setdefault(ids[r], []).append(v)
    return out


def test_a_build_cut_off_resumes_and_equals_one_in_a_go(
        dec: decoder.Decoder, store: VectorStore, tmp_path: Path) -> None:
    out = tmp_path / "mem"
    first = build_from_collection(dec, store, "tm", out, page_size=8, progress_bar=False,
                                  stop_after_pages=2)
    assert first == {**first, "done": False, "pairs": 16, "after": "p015"}
    assert not out.exists()
    progress = json.loads((build_dir(out) / "progress.json").read_text())
    assert progress["parts"] == 2 and progress["identity"]["decoder_fingerprint"] == dec.fingerprint
    done = build_from_collection(dec, store, "tm", out, page_size=8, progress_bar=False)
    assert done["done"] and done["pairs"] == len(PAIRS) and not build_dir(out).exists()
    memory = TokenMemory.load(out, dec.fingerprint)
    assert sorted(memory.ids) == [f"p{i:03d}" for i in range(len(PAIRS))]  # no q-*: no pair
    keys, values, rows = collect_keys(dec, [s for s, _ in PAIRS], [t for _, t in PAIRS])
    want: dict[str, list[int]] = {}
    for v, r in zip(values.tolist(), rows.tolist(), strict=True):
        want.setdefault(f"p{r:03d}", []).append(v)
    assert _by_pair(memory) == want and memory.size == len(values)
    # the keys are the decoder's states: each finds itself
    d, i = memory.search(keys[:5].astype(np.float32), 1)
    assert np.allclose(d[:, 0], 0.0, atol=1e-2)


def test_a_stop_ends_the_build_between_pages_and_progress_counts_on(
        dec: decoder.Decoder, store: VectorStore, tmp_path: Path) -> None:
    import threading

    stop, seen = threading.Event(), []

    def on_page(read: int, of: int) -> None:
        seen.append((read, of))
        stop.set()  # the service shutting down after the first page

    out = tmp_path / "mem"
    first = build_from_collection(dec, store, "tm", out, page_size=10, progress_bar=False,
                                  stop=stop, on_page=on_page)
    assert not first["done"] and seen == [(10, 32)] and not out.exists()
    stop.clear()
    done = build_from_collection(dec, store, "tm", out, page_size=10, progress_bar=False,
                                 on_page=lambda read, of: seen.append((read, of)))
    assert done["done"] and seen[1:] == [(20, 32), (30, 32), (32, 32)]


def test_another_decoder_starts_the_build_over(
        dec: decoder.Decoder, store: VectorStore, tmp_path: Path) -> None:
    out = tmp_path / "mem"
    build_from_collection(dec, store, "tm", out, page_size=8, progress_bar=False,
                          stop_after_pages=1)
    other = decoder.load(tiny_decoder(tmp_path / "other", seed=1), device="cpu")
    assert other.fingerprint != dec.fingerprint
    done = build_from_collection(other, store, "tm", out, page_size=8, progress_bar=False)
    assert done["done"] and done["pairs"] == len(PAIRS)
    assert TokenMemory.load(out).meta["decoder_fingerprint"] == other.fingerprint


def test_a_decoder_that_reads_neighbours_gets_the_nearest_other_documents(
        store: VectorStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import wiring.token_memory_job as job

    path = tiny_decoder(tmp_path / "k2")
    config = json.loads((path / "config.json").read_text())
    config["training"] = {"k": 2, "retrieval": {"temperature": 0.05}}
    (path / "config.json").write_text(json.dumps(config))
    dec2 = decoder.load(path, device="cpu")
    seen: list[list[list[tuple[str, float]]]] = []
    real = job._neighbours

    def spy(*args: object) -> list[list[tuple[str, float]]]:
        got = real(*args)  # type: ignore[arg-type]
        seen.append(got)
        return got

    monkeypatch.setattr(job, "_neighbours", spy)
    done = build_from_collection(dec2, store, "tm", tmp_path / "mem", page_size=64,
                                 progress_bar=False)
    assert done["done"] and len(seen) == 1 and len(seen[0]) == len(PAIRS)
    xb = _vectors()
    values = [t for _, t in PAIRS] + ["A dog.", "Un."]  # no value: the text is read
    for i, nbrs in enumerate(seen[0]):
        scores = xb @ xb[i]
        scores[i] = -np.inf  # never itself
        best = np.argsort(-scores)[:2]
        assert [v for v, _ in nbrs] == [values[j] for j in best]
        assert abs(sum(w for _, w in nbrs) - 1.0) < 1e-5 and nbrs[0][1] >= nbrs[1][1]
    assert TokenMemory.load(tmp_path / "mem").meta["neighbours"] is True


def test_the_command_builds_from_a_collection_and_names_bad_input(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    s = FaissStore(tmp_path / "faiss")
    s.create("tm", D, ENC)
    s.upsert("tm", [Item(f"p{i}", v, a, b) for i, (v, (a, b)) in
                    enumerate(zip(_vectors(), PAIRS, strict=False))], ENC)
    s.close()
    base = ["build-token-memory", "--model", str(tiny_decoder(tmp_path / "dec")),
            "--store", f"faiss://{tmp_path}/faiss", "--out", str(tmp_path / "mem")]
    ok = CliRunner().invoke(app, [*base, "--collection", "tm"])
    assert ok.exit_code == 0, ok.output
    line = ok.output[ok.output.rindex('{"done"'):]  # after the progress bar (stderr)
    assert json.loads(line)["pairs"] == len(PAIRS) and (tmp_path / "mem/keys.faiss").is_file()
    missing = CliRunner().invoke(app, [*base, "--collection", "nope"])
    assert missing.exit_code == 1 and "nope" in missing.output
    both = CliRunner().invoke(app, [*base, "--collection", "tm", "--data", str(tmp_path)])
    assert both.exit_code == 2 and "one of --collection" in both.output
