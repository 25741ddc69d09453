"""``qkv index --engine ray --load bulk-import`` into a real Milvus 2.3.5 server: Parquet
files merged up to ``--bulk-rows``, one Milvus import each, exactly the input's distinct ids
(the last occurrence of a repeated id), and never a file imported twice: not by a rerun,
nor after a kill between asking for an import and recording its task."""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import pytest
from test_index_cli import N_DISTINCT
from test_ray_index import ENV, check_job, check_store, ray_args

from index import open_store


def import_tasks(uri: str, collection: str) -> list:
    from pymilvus import connections, utility

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ORM-style")
        connections.connect("bulk-test", uri=uri)
        try:
            return utility.list_bulk_insert_tasks(limit=0, collection_name=collection,
                                                  using="bulk-test")
        finally:
            connections.disconnect("bulk-test")


@pytest.mark.slow
def test_bulk_import_fills_a_new_collection_once(tmp_path: Path, tiny_model_dir: Path,
                                                 milvus_server_uri: str) -> None:
    pytest.importorskip("ray")
    from test_index_cli import write_corpus

    src, state, files = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs", tmp_path / "pq"
    args = ray_args(src, milvus_server_uri, tiny_model_dir, state, "--load", "bulk-import",
                    "--bulk-dir", str(files), "--bulk-rows", "500")
    args[args.index("docs")] = "bulk_docs"
    done = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stderr[-3000:]  # complete, with the rejected rows
    check_job(state)
    check_store(milvus_server_uri, "bulk_docs")
    record = json.loads(next(state.glob("*.imports.json")).read_text())
    parquet = sorted(str(p) for p in files.rglob("*.parquet"))  # the merged files only
    assert record["complete"] and sorted(record["files"]) == parquet and len(parquet) > 1
    assert all(Path(p).name.startswith("import-") for p in parquet)
    assert all(e["rows"] <= 500 for e in record["files"].values())
    assert {e["state"] for e in record["files"].values()} == {"done"}
    assert sum(e["imported"] for e in record["files"].values()) == N_DISTINCT
    tasks = import_tasks(milvus_server_uri, "bulk_docs")
    assert sorted(t.task_id for t in tasks) == sorted(e["task"] for e in
                                                      record["files"].values())

    # a kill between asking Milvus for an import and recording its task: the rerun finds
    # the task by its file instead of importing the file again
    first = sorted(record["files"])[0]
    task = record["files"][first]["task"]
    record["files"][first].update(state="starting", task=None)
    next(state.glob("*.imports.json")).write_text(json.dumps(record))
    args[args.index("500")] = "250000"  # the merge planned at first stands: same files
    again = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 3 and "written 0," in again.stdout, again.stderr[-3000:]
    after = json.loads(next(state.glob("*.imports.json")).read_text())
    assert after["files"][first]["task"] == task and after["files"][first]["state"] == "done"
    assert len(import_tasks(milvus_server_uri, "bulk_docs")) == len(tasks)  # none new
    assert sorted(after["files"]) == parquet
    check_store(milvus_server_uri, "bulk_docs")


@pytest.mark.slow
def test_bulk_import_refuses_what_it_cannot_do_once(tmp_path: Path, tiny_model_dir: Path,
                                                    milvus_server_uri: str) -> None:
    """An existing collection (an import would double its ids), a Milvus Lite file, and
    the flag without its directory: each refused, saying why, before anything is read."""
    pytest.importorskip("ray")
    from test_index_cli import write_corpus

    src, state, files = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs", tmp_path / "pq"
    store = open_store(milvus_server_uri)
    try:
        from index import EncoderInfo

        store.create("bulk_taken", 8, EncoderInfo("x", "y", 8), hybrid=False)
    finally:
        store.close()
    args = ray_args(src, milvus_server_uri, tiny_model_dir, state, "--load", "bulk-import",
                    "--bulk-dir", str(files))
    args[args.index("docs")] = "bulk_taken"
    taken = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=300)
    assert taken.returncode == 1 and "only fills a new collection" in taken.stderr
    lite = ray_args(src, str(tmp_path / "q.db"), tiny_model_dir, state, "--load",
                    "bulk-import", "--bulk-dir", str(files))
    done = subprocess.run(lite, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "needs a Milvus server" in done.stderr
    bare = ray_args(src, milvus_server_uri, tiny_model_dir, state, "--load", "bulk-import")
    done = subprocess.run(bare, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--bulk-dir" in done.stderr
    assert not files.exists()
