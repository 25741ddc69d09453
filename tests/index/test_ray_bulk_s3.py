"""``qkv index --engine ray --load bulk-import --bulk-dir s3://BUCKET/PREFIX`` into a real
Milvus 2.3.5 server that keeps its data in an S3 bucket, as the docker-compose stack's does
in MinIO: here the bucket is served by moto's S3 server (``moto[server]``, a real S3 API
over HTTP), which Milvus itself writes its segments to. The merged files are uploaded to
the server's bucket and imported from there, each once: a rerun uploads nothing it has and
imports nothing twice."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_backends import S3_CREDS as CREDS
from store_backends import free_port, s3_server
from test_index_cli import N_DISTINCT
from test_ray_bulk import import_tasks
from test_ray_index import ENV, check_job, check_store, ray_args

from cli.index import EXIT_UNAVAILABLE
from stack import MilvusStandalone

BUCKET = "milvus-data"


@pytest.fixture(scope="module")
def s3_milvus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(Milvus URI, S3 endpoint): moto's S3 server, and Milvus 2.3.5 on it (storage type
    minio, its bucket :data:`BUCKET`, which it creates)."""
    pytest.importorskip("ray")
    with s3_server() as (endpoint, _):
        server = MilvusStandalone(
            tmp_path_factory.mktemp("milvus-s3"), start_timeout_s=180, stop_timeout_s=5, env={
                "COMMON_STORAGETYPE": "minio", "MINIO_ADDRESS": "127.0.0.1",
                "MINIO_PORT": endpoint.rsplit(":", 1)[1], "MINIO_BUCKETNAME": BUCKET,
                "MINIO_ROOTPATH": "files",
                "MINIO_ACCESSKEYID": CREDS["AWS_ACCESS_KEY_ID"],
                "MINIO_SECRETACCESSKEY": CREDS["AWS_SECRET_ACCESS_KEY"]})
        try:
            server.start()
            yield server.uri, endpoint
        finally:
            server.stop()


def objects(endpoint: str, prefix: str) -> dict[str, int]:
    from minio import Minio

    client = Minio(endpoint.removeprefix("http://"), CREDS["AWS_ACCESS_KEY_ID"],
                   CREDS["AWS_SECRET_ACCESS_KEY"], secure=False)
    return {o.object_name: o.size for o in client.list_objects(BUCKET, prefix, recursive=True)}


@pytest.mark.slow
@pytest.mark.long  # make test-long: most of a minute; test_ray_bulk.py's local
# bulk import stays in make test
def test_bulk_import_from_the_servers_bucket(tmp_path: Path, tiny_model_dir: Path,
                                             s3_milvus: tuple[str, str]) -> None:
    from test_index_cli import write_corpus

    uri, endpoint = s3_milvus
    assert not objects(endpoint, "")  # the bucket Milvus made, empty until it writes
    env = {**ENV, **CREDS, "QKV_S3_ENDPOINT": endpoint}
    src, state = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs"
    args = ray_args(src, uri, tiny_model_dir, state, "--load", "bulk-import", "--bulk-dir",
                    f"s3://{BUCKET}/qkv-bulk", "--bulk-rows", "500")
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stderr[-3000:]  # complete, with the rejected rows
    check_job(state)
    check_store(uri, "docs")
    record = json.loads(next(state.glob("*.imports.json")).read_text())
    uploaded = objects(endpoint, "qkv-bulk/")
    stem = next(state.glob("*.imports.json")).name.removesuffix(".imports.json")
    assert sorted(record["files"]) == sorted(uploaded) and len(uploaded) > 1
    assert sorted(record["uploaded"]) == sorted(uploaded)  # each recorded once it was put
    assert all(k.startswith(f"qkv-bulk/{stem}/import-") for k in uploaded)
    assert sum(e["imported"] for e in record["files"].values()) == N_DISTINCT
    tasks = import_tasks(uri, "docs")
    assert sorted(t.task_id for t in tasks) == sorted(e["task"] for e in
                                                      record["files"].values())
    assert not (state / f"{stem}.bulk").exists()  # the local copies go once complete
    assert any(k.startswith("files/") for k in objects(endpoint, ""))  # Milvus' own data

    # a rerun of the complete job: nothing uploaded again, nothing imported again
    before = {k: objects(endpoint, k) for k in uploaded}
    time.sleep(1.1)  # an object put again would carry a later modification time
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 3 and "written 0," in again.stdout, again.stderr[-3000:]
    assert {k: objects(endpoint, k) for k in uploaded} == before
    assert len(import_tasks(uri, "docs")) == len(tasks)
    check_store(uri, "docs")


@pytest.mark.slow
def test_a_bucket_that_is_not_there_is_refused_before_encoding(
        tmp_path: Path, tiny_model_dir: Path, s3_milvus: tuple[str, str]) -> None:
    from test_index_cli import write_corpus

    uri, endpoint = s3_milvus
    src, state = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs"
    env = {**ENV, **CREDS, "QKV_S3_ENDPOINT": endpoint}
    args = ray_args(src, uri, tiny_model_dir, state, "--load", "bulk-import", "--bulk-dir",
                    "s3://no-such-bucket/x", "--collection", "other")
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "no bucket 'no-such-bucket'" in done.stderr
    assert "minio.bucketName" in done.stderr and not list(state.glob("*.done/*.json"))
    nobody = {**env, "QKV_S3_ENDPOINT": f"http://127.0.0.1:{free_port()}"}  # no S3 there
    args[args.index("s3://no-such-bucket/x")] = f"s3://{BUCKET}/x"
    down = subprocess.run(args, env=nobody, capture_output=True, text=True, timeout=300)
    assert down.returncode == EXIT_UNAVAILABLE, down.stderr[-2000:]
    assert "cannot reach bucket" in down.stderr
    bad = ray_args(src, uri, tiny_model_dir, state, "--load", "bulk-import", "--bulk-dir",
                   "s3:///x")
    assert subprocess.run(bad, env=env, capture_output=True, text=True,
                          timeout=300).returncode == 2
