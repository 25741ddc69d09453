"""``qkv index`` as a real process: killed with SIGKILL mid-run, then run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from index import MilvusStore

N_DISTINCT, N_DUPLICATES, BAD_LINES = 1500, 300, (7, 400, 1201)


def write_corpus(path: Path) -> Path:
    lines = [json.dumps({"id": f"doc-{i}", "text": f"document {i} about the dog in the park",
                         "tgt": f"v{i}", "n": i}) for i in range(N_DISTINCT)]
    lines += [json.dumps({"id": f"doc-{i}", "text": f"second version of {i}"})
              for i in range(N_DUPLICATES)]
    for line_no in BAD_LINES:
        lines.insert(line_no - 1, '{"id": "broken", "text": ')
    path.write_text("\n".join(lines) + "\n")
    return path


def qkv_index(args: list[str]) -> list[str]:
    return [sys.executable, "-c", "from cli.app import app; app()", "index", *args]


@pytest.mark.slow
def test_sigkill_then_rerun_gives_exactly_the_distinct_ids(tmp_path: Path,
                                                           tiny_model_dir: Path) -> None:
    src = write_corpus(tmp_path / "corpus.jsonl")
    db, state = tmp_path / "qkv.db", tmp_path / "jobs"
    args = qkv_index(["--collection", "docs", "--input", str(src), "--store", str(db),
                      "--model", str(tiny_model_dir), "--value-field", "tgt",
                      "--batch-size", "64", "--state-dir", str(state), "--no-progress",
                      "--device", "cpu"])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline, written = time.monotonic() + 120, 0
    while time.monotonic() < deadline and proc.poll() is None:
        files = list(state.glob("*.progress.json"))
        if files:
            try:
                written = json.loads(files[0].read_text())["written"]
            except (ValueError, KeyError):
                written = 0
            if written >= 300:
                break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = json.loads(next(state.glob("*.progress.json")).read_text())
    assert 0 < saved["written"] < N_DISTINCT + N_DUPLICATES and not saved["done"]

    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr  # finished, with rejected rows
    assert "rows rejected" in done.stderr and "written" in done.stdout

    store = MilvusStore(str(db))
    try:
        assert store.count("docs") == N_DISTINCT
        ids = [f"doc-{i}" for i in range(N_DISTINCT)]
        got = store.get("docs", ids)
        assert sorted(it.id for it in got) == sorted(ids)
        by_id = {it.id: it for it in got}
        assert by_id["doc-5"].text == "second version of 5"  # the last duplicate wins
        assert by_id["doc-1400"].value == "v1400" and by_id["doc-1400"].metadata == {"n": 1400}
        assert store.describe("docs").encoder is not None
    finally:
        store.close()
    rejects = [json.loads(x) for x in next(state.glob("*.rejects.jsonl")).read_text().splitlines()]
    assert [r["line"] for r in rejects] == list(BAD_LINES)  # none lost, none doubled


def test_bad_shard_is_a_usage_error(tmp_path: Path, tiny_model_dir: Path) -> None:
    src = write_corpus(tmp_path / "c.jsonl")
    r = subprocess.run(qkv_index(["--collection", "c", "--input", str(src), "--shard", "3/2",
                                  "--model", str(tiny_model_dir)]),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "0 <= i < N" in r.stderr


def test_dashed_collection_is_stored_underscored(tmp_path: Path, tiny_model_dir: Path) -> None:
    src = tmp_path / "tm.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{i}", "text": f"a dog in the park {i}",
                                       "fr": f"un chien {i}"}) + "\n" for i in range(20)))
    db = tmp_path / "qkv.db"
    base = ["--input", str(src), "--store", str(db), "--model", str(tiny_model_dir),
            "--value-field", "fr", "--state-dir", str(tmp_path / "jobs"), "--no-progress",
            "--device", "cpu"]
    r = subprocess.run(qkv_index(["--collection", "tm-en-fr", *base]), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    bad = subprocess.run(qkv_index(["--collection", "-tm", *base]), capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "collection name must start with" in bad.stderr
    store = MilvusStore(str(db))
    try:
        assert store.list_collections() == ["tm_en_fr"]
        assert store.count("tm_en_fr") == 20
        assert store.get("tm_en_fr", ["p3"])[0].value == "un chien 3"
        # a complete job calibrates hybrid: 20 documents are too few, so the default
        cal = store.describe("tm_en_fr").calibration
        assert cal is not None and cal["source"] == "encoder default" and cal["docs"] == 20
    finally:
        store.close()
    assert "hybrid calibration: dense weight" in r.stdout


def qkv_tune(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from cli.app import app; app()", "tune",
                           *args], capture_output=True, text=True, timeout=300)


def test_qkv_tune_by_hand_from_documents_and_on_labels(tmp_path: Path,
                                                       tiny_model_dir: Path) -> None:
    src = tmp_path / "docs.jsonl"
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": " ".join(
        f"{words[(i + j) % 12]} {words[(i * j) % 12]} item{i}." for j in range(4))}) + "\n"
        for i in range(300)))
    db = str(tmp_path / "qkv.db")
    # one row a document: the tiny encoder reads 24 tokens, passages of it are too short
    # to cut pseudo-queries from
    r = subprocess.run(qkv_index(["--collection", "c", "--input", str(src), "--store", db,
                                  "--model", str(tiny_model_dir), "--no-progress", "--no-tune",
                                  "--no-chunking", "--state-dir", str(tmp_path / "jobs")]),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "calibration" not in r.stdout, r.stderr
    base = ["--store", db, "--model", str(tiny_model_dir)]
    r = qkv_tune(["c", *base, "--weight", "0.3"])
    assert r.returncode == 0 and "dense weight 0.3 (manual" in r.stdout, r.stderr
    r = qkv_tune(["c", *base, "--seed", "2"])
    assert r.returncode == 0 and "(collection; 300 pseudo-queries over 300 of 300" in r.stdout
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"query": "item7 alpha", "relevant": ["d7"]}) + "\n" +
                      json.dumps({"query": "item9", "relevant": {"d9": 2}}) + "\n")
    r = qkv_tune(["c", *base, "--labels", str(labels)])
    assert r.returncode == 0 and "(labels;" in r.stdout, r.stderr
    labels.write_text(json.dumps({"query": "item7", "relevant": ["nope"]}) + "\n")
    r = qkv_tune(["c", *base, "--labels", str(labels)])
    assert r.returncode == 1 and "'nope'" in r.stderr
    store = MilvusStore(db)
    try:
        assert store.describe("c").calibration["source"] == "labels"  # type: ignore[index]
    finally:
        store.close()


def test_a_store_another_process_holds_is_one_line_and_exit_75(tmp_path: Path,
                                                              tiny_model_dir: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl")
    db = tmp_path / "held.db"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom index import MilvusStore\n"
        f"s = MilvusStore({str(db)!r}); s.list_collections(); print('held', flush=True)\n"
        "time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        done = subprocess.run(qkv_index(["--collection", "c", "--input", str(corpus),
                                         "--store", str(db), "--model", str(tiny_model_dir),
                                         "--state-dir", str(tmp_path / "st"),
                                         "--no-progress"]),
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 75, done.stderr[-2000:]
    assert time.monotonic() - t0 < 30  # no retries: waiting does not free the file
    errors = [x for x in done.stderr.splitlines() if "Traceback" in x or x.startswith("error")]
    assert errors == [f"error: the Milvus Lite file {db} is held by another process (a "
                      "running qkv serve?): stop that process first, or send the documents "
                      "to the running service through its API, or use a Milvus server that "
                      "many processes share (--store http://HOST:19530)"], done.stderr[-2000:]


def test_rows_without_the_text_field_name_the_fields_they_have(tmp_path: Path,
                                                               tiny_model_dir: Path) -> None:
    rows = tmp_path / "notes.jsonl"
    rows.write_text('{"id": "n1", "body": "some words"}\n{"id": "n2", "body": "more"}\n')
    done = subprocess.run(qkv_index(["--collection", "notes", "--input", str(rows),
                                     "--store", str(tmp_path / "n.db"), "--model",
                                     str(tiny_model_dir), "--state-dir", str(tmp_path / "st"),
                                     "--no-progress"]),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr[-2000:]
    assert ("every row lacked the id field 'id' or the text field 'text'; the rows have the "
            "fields body, id: name them with --id-field and --text-field") in done.stderr
    assert "calibration failed" not in done.stderr  # nothing written: nothing to tune
    (rejects,) = (tmp_path / "st").glob("notes.*.rejects.jsonl")
    first = json.loads(rejects.read_text().splitlines()[0])
    assert json.loads(first["raw"]) == {"id": "n1", "body": "some words"}


def test_ray_refuses_a_folder_of_documents(tmp_path: Path, tiny_model_dir: Path) -> None:
    """``--engine ray`` reads files of rows; a folder of documents is the local engine's,
    said before anything starts."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nSome text.\n")
    done = subprocess.run(qkv_index(["--engine", "ray", "--collection", "docs", "--input",
                                     str(folder), "--store", str(tmp_path / "q.db"),
                                     "--model", str(tiny_model_dir)]),
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 2
    assert "--engine ray reads files of rows" in done.stderr
    assert not (tmp_path / "q.db").exists()


def test_a_jobs_time_counts_the_close_that_seals_its_rows(tmp_path: Path,
                                                           tiny_model_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's close seals the last rows and builds the last segments' graphs (on
    Lite): the user waits for it, so the job's seconds (and its docs/s) count it."""
    from index import Fields
    from wiring import indexing

    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": f"a dog in the park {i}"})
                           + "\n" for i in range(30)))
    real, closed = indexing.open_store, []

    def slow_open(*args: object, **kwargs: object) -> object:
        store = real(*args, **kwargs)  # type: ignore[arg-type]
        close = store.close

        def slow_close(*a: object, **k: object) -> None:
            time.sleep(1.0)
            closed.append(True)
            close(*a, **k)  # type: ignore[arg-type]

        store.close = slow_close  # type: ignore[method-assign]
        return store

    run, ran = indexing.bulk_index, []

    def bulk_index(*args: object, **kwargs: object) -> object:
        summary = run(*args, **kwargs)  # type: ignore[arg-type]
        ran.append(summary.seconds)  # before the close
        return summary

    monkeypatch.setattr(indexing, "open_store", slow_open)
    monkeypatch.setattr(indexing, "bulk_index", bulk_index)
    db = str(tmp_path / "qkv.db")
    config = indexing.job_config("c", [src], db, Fields(), None, 16, (0, 1), tmp_path / "jobs",
                                 None, False, 0, 0.0, False)
    t0 = time.perf_counter()
    summary = indexing.index_files("c", [src], config, db, tiny_model_dir, device="cpu")
    assert closed == [True] and summary.written == 30 and len(ran) == 1
    assert ran[0] + 1.0 <= summary.seconds <= time.perf_counter() - t0
