"""``qkv index --engine ray``: the plan and its markers (no Ray), then real runs on a local
Ray: into Milvus Lite (the driver writes), into a Milvus 2.3.5 server (the workers write
through the Datasink), a SIGKILL of the driver and its local Ray mid-run then a rerun, and a
SIGKILL of an encoder worker, each on both stores; the 2.3.5 server stopped for 20 s.
Each ends with exactly the input's distinct ids, the last occurrence of a repeated id
winning, and every bad row reported once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_index_cli import BAD_LINES, N_DISTINCT, N_DUPLICATES, qkv_index, write_corpus

from index import Fields, open_store
from index.bulk.ranges import load_or_plan, mark_done, pending, plan, read_range


def test_the_plan_cuts_ranges_and_keeps_the_last_of_each_id(tmp_path: Path) -> None:
    src = write_corpus(tmp_path / "c.jsonl")
    manifest = plan([src], Fields(value="tgt"), per_range=100)
    lines = N_DISTINCT + N_DUPLICATES + len(BAD_LINES)
    assert manifest.records == lines and manifest.inputs[0]["records"] == lines
    assert [r.records for r in manifest.ranges] == [100] * (lines // 100) + [lines % 100]
    superseded = sorted(line for r in manifest.ranges for line in r.superseded)
    assert len(superseded) == N_DUPLICATES  # the first copy of each repeated id
    docs = {}
    for r in manifest.ranges:
        batch = read_range(src, "jsonl", r, Fields(value="tgt"))
        for i, t in zip(batch.ids, batch.texts, strict=True):
            assert i not in docs, f"{i} written twice"
            docs[i] = t
    assert len(docs) == N_DISTINCT and docs["doc-5"] == "second version of 5"


def test_markers_make_a_rerun_skip_and_changed_inputs_are_refused(tmp_path: Path) -> None:
    src = write_corpus(tmp_path / "c.jsonl")
    path, done = tmp_path / "m.json", tmp_path / "done"
    manifest = load_or_plan(path, [src], Fields(), None, 500)
    assert load_or_plan(path, [src], Fields(), None, 500).ranges == manifest.ranges
    mark_done(done, manifest.ranges[1], {"written": 3, "rejects": [], "worker": "w",
                                         "retries": 0})
    assert pending(manifest, done) == [manifest.ranges[0], *manifest.ranges[2:]]
    assert not list(done.glob(".*"))  # no temporary file left behind
    src.write_text(src.read_text() + '{"id": "new", "text": "more"}\n')
    with pytest.raises(ValueError, match="inputs changed"):
        load_or_plan(path, [src], Fields(), None, 500)


def check_store(store_uri: str, collection: str) -> None:
    store = open_store(store_uri)
    try:
        assert store.count(collection) == N_DISTINCT
        ids = [f"doc-{i}" for i in range(N_DISTINCT)]
        by_id = {it.id: it for it in store.get(collection, ids)}
        assert sorted(by_id) == sorted(ids)
        assert by_id["doc-5"].text == "second version of 5"  # the last duplicate wins
        assert by_id["doc-1400"].value == "v1400" and by_id["doc-1400"].metadata == {"n": 1400}
    finally:
        store.close()


def check_job(state: Path) -> dict:
    rejects = [json.loads(x) for x in next(state.glob("*.rejects.jsonl")).read_text()
               .splitlines()]
    assert [r["line"] for r in rejects] == list(BAD_LINES)  # none lost, none doubled
    figures = json.loads(next(state.glob("*.ray.json")).read_text())
    assert figures["complete"] and figures["records_done"] == figures["records_total"]
    assert figures["written"] >= N_DISTINCT and sum(figures["workers"].values()) == \
        pytest.approx(1.0, abs=0.01)
    return figures


def ray_args(src: Path, store: str, model: Path, state: Path, *more: str) -> list[str]:
    return qkv_index(["--engine", "ray", "--workers", "1", "--collection", "docs",
                      "--input", str(src), "--store", store, "--model", str(model),
                      "--value-field", "tgt", "--batch-size", "100", "--state-dir",
                      str(state), "--no-progress", "--no-tune", "--device", "cpu", *more])


def markers(state: Path) -> int:
    """Ranges the job has marked done so far."""
    return sum(1 for d in state.glob("*.done") for _ in d.glob("*.json"))


def wait_for_markers(state: Path, proc: subprocess.Popen, n: int, timeout: float = 300) -> None:
    """Until the job running as ``proc`` has marked ``n`` ranges done (or stopped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and markers(state) < n:
        time.sleep(0.05)


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_DISABLE_USAGE_STATS": "1"}


@pytest.mark.slow
def test_ray_into_milvus_lite_the_driver_writes(tmp_path: Path, tiny_model_dir: Path) -> None:
    pytest.importorskip("ray")
    src, state, db = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs", tmp_path / "q.db"
    done = subprocess.run(ray_args(src, str(db), tiny_model_dir, state), env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stderr[-3000:]  # complete, with rejected rows
    check_job(state)
    again = subprocess.run(ray_args(src, str(db), tiny_model_dir, state), env=ENV,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 3 and "written 0," in again.stdout, again.stderr[-3000:]
    check_store(str(db), "docs")  # last: this process then holds the Lite file


@pytest.mark.slow
def test_ray_into_a_milvus_server_the_workers_write(tmp_path: Path, tiny_model_dir: Path,
                                                    milvus_server_uri: str) -> None:
    pytest.importorskip("ray")
    src, state = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs"
    args = ray_args(src, milvus_server_uri, tiny_model_dir, state)
    args[args.index("docs")] = "ray_docs"
    at = args.index("--workers")  # the default: a worker per CPU, every CPU taken by them,
    del args[at:at + 2]  # and the write tasks must still run
    done = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stderr[-3000:]
    check_store(milvus_server_uri, "ray_docs")
    figures = check_job(state)
    reports = [json.loads(p.read_text()) for p in next(state.glob("*.done")).glob("*.json")]
    assert reports and all(r["writer"] != figures["driver"] for r in reports)  # Ray's tasks


@pytest.mark.slow
def test_ray_cuts_long_documents_as_the_local_job_does(tmp_path: Path,
                                                       tiny_model_dir: Path) -> None:
    """A collection with passages (the default) filled on Ray holds the same rows as the
    local job makes of the same file: each long document cut into the same passages,
    committed whole, read back whole; a rerun writes nothing."""
    pytest.importorskip("ray")
    from index.passages import count_filter
    from index.passages import read as read_document

    docs = {f"long-{i}": " ".join(f"Sentence {j} of document {i} is about topic {j}."
                                  for j in range(12)) for i in range(30)}
    docs["short"] = "a short one"
    src = tmp_path / "long.jsonl"
    src.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()))
    ray_db, local_db = tmp_path / "ray.db", tmp_path / "local.db"
    ray = ray_args(src, str(ray_db), tiny_model_dir, tmp_path / "ray-jobs")
    done = subprocess.run(ray, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    again = subprocess.run(ray, env=ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "written 0," in again.stdout, again.stderr[-3000:]
    local = qkv_index(["--collection", "docs", "--input", str(src), "--store", str(local_db),
                       "--model", str(tiny_model_dir), "--state-dir", str(tmp_path / "jobs"),
                       "--no-progress", "--no-tune", "--device", "cpu"])
    done = subprocess.run(local, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {}
    for db in (ray_db, local_db):
        store = open_store(str(db))
        try:
            assert store.describe("docs").passages is not None
            assert store.count("docs", None, count_filter()) == len(docs)
            for doc_id, text in docs.items():
                found = read_document(store, "docs", doc_id)
                assert found is not None and found[0].text == text, doc_id
            rows[db] = {it.id: (it.text, it.metadata, it.keywords)
                        for page in store.scan("docs") for it in page}
        finally:
            store.close()
    assert len(rows[ray_db]) > 2 * len(docs)  # the long ones are several passages each
    assert rows[ray_db] == rows[local_db]
    # hybrid (the default): each passage's BM25 terms are its window's, more than its own
    from index.hybrid.analysis import analyzed
    windows = [k for t, _, k in rows[ray_db].values() if k != analyzed(t)]
    assert len(windows) == len(rows[ray_db]) - 1  # all but the short document's row


def store_for(where: str, tmp_path: Path, request: pytest.FixtureRequest, name: str
              ) -> tuple[str, str]:
    """(store, collection): a Milvus Lite file (the driver writes) or the session's 2.3.5
    server (the workers write), a collection of its own there."""
    if where == "lite":
        return str(tmp_path / "q.db"), "docs"
    return str(request.getfixturevalue("milvus_server_uri")), name


def named(args: list[str], collection: str) -> list[str]:
    args[args.index("docs")] = collection
    return args


@pytest.mark.slow
@pytest.mark.parametrize("where", ["lite", pytest.param("milvus-2.3.5", marks=pytest.mark.long)])
def test_sigkill_of_the_driver_then_rerun(tmp_path: Path, tiny_model_dir: Path, where: str,
                                          request: pytest.FixtureRequest) -> None:
    pytest.importorskip("ray")
    src, state = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs"
    db, collection = store_for(where, tmp_path, request, "killed_driver")
    args = named(ray_args(src, db, tiny_model_dir, state), collection)
    args[args.index("100")] = "20"  # 91 ranges: time to kill it halfway
    proc = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)  # its local Ray dies with it
    wait_for_markers(state, proc, 10)
    assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 10 <= markers(state) < 91
    done = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stderr[-3000:]
    check_store(db, collection)
    check_job(state)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("where", ["lite", "milvus-2.3.5"])
def test_sigkill_of_a_worker_ray_restarts_it(tmp_path: Path, tiny_model_dir: Path, where: str,
                                             request: pytest.FixtureRequest) -> None:
    """An encoder actor killed mid-run: Ray restarts it and retries its range; the job
    completes by itself with nothing lost or doubled."""
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("ray")
    src, state = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs"
    db, collection = store_for(where, tmp_path, request, "killed_worker")
    args = named(ray_args(src, db, tiny_model_dir, state), collection)
    args[args.index("100")] = "20"
    proc = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True)
    killed = None
    try:
        wait_for_markers(state, proc, 5)
        deadline = time.monotonic() + 60
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            for p in psutil.Process(proc.pid).children(recursive=True):  # this job's
                try:
                    if "EncodeRanges" in " ".join(p.cmdline()):
                        p.kill()
                        killed = p.pid
                        break
                except psutil.NoSuchProcess:
                    continue
            time.sleep(0.05)
        assert killed is not None, "no encoder worker found to kill"
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 3, err[-3000:]
    check_job(state)
    workers = {json.loads(p.read_text())["worker"]
               for p in next(state.glob("*.done")).glob("*.json")}
    assert len(workers) >= 2 and any(w.endswith(f":{killed}") for w in workers)
    check_store(db, collection)


@pytest.mark.slow
@pytest.mark.long
def test_the_server_stopped_for_20_s_mid_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Milvus goes away for 20 s while the workers write: their upserts retry with backoff
    (Ray retries what still fails), and the job completes by itself, exactly."""
    pytest.importorskip("ray")
    from store_backends import RestartableMilvus

    server = RestartableMilvus(tmp_path / "milvus")
    server.start()
    try:
        src, state = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs"
        args = ray_args(src, server.uri, tiny_model_dir, state, "--retries", "10")
        args[args.index("100")] = "20"
        proc = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, text=True)
        try:
            wait_for_markers(state, proc, 5)
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            server.stop()
            time.sleep(20)
            server.start()
            out, err = proc.communicate(timeout=900)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 3, err[-3000:]
        figures = check_job(state)
        assert figures["retries"] >= 1  # the outage was seen, and waited out
        check_store(server.uri, "docs")
    finally:
        server.stop()


def test_a_ray_that_fails_to_start_closes_the_store_opened_meanwhile(
        tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's store is opened and the collection made while Ray starts: a Ray that
    does not start is the job's error, and the store it opened meanwhile (a real Lite
    file) is closed, not left holding the file."""
    from index import JobConfig
    from wiring import ray_indexing
    from wiring.index_job import IndexJob, RayOptions

    src = write_corpus(tmp_path / "c.jsonl")
    closed: list[str] = []
    real_open = ray_indexing.open_store

    def opened(*args: object, **kwargs: object) -> object:
        store = real_open(*args, **kwargs)  # type: ignore[arg-type]
        close = store.close

        def closing() -> None:
            closed.append("closed")
            close()
        store.close = closing  # type: ignore[method-assign]
        return store

    def no_ray(address: str | None, tries: int = 3) -> None:
        deadline = time.monotonic() + 60  # fails once the job is planned: a slow start
        while time.monotonic() < deadline and not list(
                (tmp_path / "state").glob("*.manifest.json")):
            time.sleep(0.05)
        raise RuntimeError("Ray did not start")

    monkeypatch.setattr(ray_indexing, "open_store", opened)
    monkeypatch.setattr(ray_indexing, "start_ray", no_ray)
    db = tmp_path / "ray.db"
    config = JobConfig(state_path=tmp_path / "state" / "docs.progress.json",
                       rejects_path=tmp_path / "state" / "rejects.jsonl", fields=Fields(),
                       batch_size=500, progress_bar=False)
    (tmp_path / "state").mkdir()
    job = IndexJob(inputs=[src], store=str(db), model=tiny_model_dir, collection="docs",
                   engine="ray", ray=RayOptions(workers=1), device="cpu")
    with pytest.raises(RuntimeError, match="Ray did not start"):
        ray_indexing.index_with_ray(job, config)
    assert closed == ["closed"]  # opened while Ray was starting, and closed
    store = open_store(str(db))  # the file is free, the collection there
    try:
        assert store.count("docs") == 0
    finally:
        store.close()
