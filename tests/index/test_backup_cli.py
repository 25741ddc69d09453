"""``qkv backup`` and ``qkv restore`` as real processes (issue 72): a Lite file backed up and
restored into FAISS with its stored vectors (the same encoder) and into Lite embedded again
(another one); a damaged backup exits 2 naming the file, creating nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from index import FaissStore, MilvusStore
from index.store import EncoderInfo, Item


def qkv(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from cli.app import app; app()", *args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env} if env else None)


def test_backup_then_restore_across_backends(tmp_path: Path, tiny_model_dir: Path) -> None:
    import encoder

    enc = encoder.load(tiny_model_dir)
    info = EncoderInfo(enc.name, enc.fingerprint, enc.dim)
    texts = [f"document {i} about {'dogs' if i % 2 else 'trains'}" for i in range(120)]
    src = MilvusStore(str(tmp_path / "src.db"))
    src.create("notes", enc.dim, info, hybrid=True)
    src.upsert("notes", [Item(f"n{i}", v, t, metadata={"i": i}) for i, (t, v) in
                         enumerate(zip(texts, enc.encode(texts), strict=True))], info)
    src.set_alias("notes_live", "notes")
    out = qkv("backup", "--store", str(tmp_path / "src.db"), "--to", str(tmp_path / "b"))
    assert out.returncode == 75 and "POST /v1/backups" in out.stderr  # this process holds it
    src.close()
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(tmp_path / "src.db"))

    out = qkv("backup", "--store", str(tmp_path / "src.db"), "--to", str(tmp_path / "b"))
    assert out.returncode == 0, out.stderr
    assert "notes: 120 rows" in out.stdout and "aliases notes_live" in out.stdout

    out = qkv("restore", str(tmp_path / "b"), "--store", f"faiss://{tmp_path / 'f'}",
              "--model", str(tiny_model_dir))
    assert out.returncode == 0, out.stderr
    assert "120 rows (stored vectors)" in out.stdout
    faiss = FaissStore(tmp_path / "f")
    assert faiss.list_aliases().keys() == {"notes", "notes_live"}
    assert faiss.get("notes_live", ["n3"])[0].metadata == {"i": 3}

    other = tmp_path / "other-model"  # other weights, another fingerprint: re-embedded
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny_model_dir, other)
    weights = load_file(other / "model.safetensors")
    first = sorted(weights)[0]
    weights[first] = weights[first] + 0.01
    save_file(weights, other / "model.safetensors")
    out = qkv("restore", str(tmp_path / "b"), "--store", str(tmp_path / "dst.db"),
              "--model", str(other), "--as", "notes2")
    assert out.returncode == 0, out.stderr
    assert "notes2 -> notes2__r" in out.stdout and "(embedded again)" in out.stdout

    part = next((tmp_path / "b").rglob("*.parquet"))
    part.write_bytes(b"garbage" + part.read_bytes())
    out = qkv("restore", str(tmp_path / "b"), "--store", f"faiss://{tmp_path / 'g'}",
              "--model", str(tiny_model_dir))
    assert out.returncode == 2 and part.name in out.stderr and "checksum" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "g").exists() or FaissStore(tmp_path / "g").list_collections() == []


def test_export_reads_a_collection_out_whole_and_back_in(tmp_path: Path,
                                                         tiny_model_dir: Path) -> None:
    """``qkv export`` (issue 72, item 4): every document whole, in id order, a filter's
    share, JSONL that ``qkv index`` reads back into the same documents, and Parquet with
    vectors; a bad filter or suffix exits 2 writing nothing."""
    import gzip
    import json

    import pyarrow.parquet as pq

    src = tmp_path / "docs.jsonl"
    docs = [{"id": f"d{i:02d}", "text": ("\n\n".join(f"paragraph {j} of document {i} " * 3
                                                      for j in range(5)) if i % 3 == 0
                                         else f"short document {i}"),
             "value": f"v{i}", "metadata": {"i": i, "odd": i % 2 == 1}} for i in range(30)]
    src.write_text("".join(json.dumps(d) + "\n" for d in docs))
    store = f"faiss://{tmp_path / 'f'}"
    out = qkv("index", "--input", str(src), "--collection", "notes", "--store", store, "--model",
              str(tiny_model_dir), "--value-field", "value", "--no-tune",
              "--state-dir", str(tmp_path / "jobs"), "--no-progress")
    assert out.returncode == 0, out.stderr
    assert len(FaissStore(tmp_path / "f").list_collections()) == 1

    out = qkv("export", "notes", "--store", store, "--out", str(tmp_path / "all.jsonl.gz"))
    assert out.returncode == 0, out.stderr
    assert "notes: 30 documents" in out.stdout
    with gzip.open(tmp_path / "all.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    assert rows == [{"id": d["id"], "text": d["text"], "value": d["value"],
                     "metadata": d["metadata"]} for d in docs]  # whole, in id order

    odd = json.dumps({"key": "odd", "op": "eq", "value": True})
    out = qkv("export", "notes", "--store", store, "--out", str(tmp_path / "odd.parquet"),
              "--filter", odd, "--vectors")
    assert out.returncode == 0, out.stderr
    table = pq.read_table(tmp_path / "odd.parquet").to_pylist()
    assert [r["id"] for r in table] == [d["id"] for d in docs if d["metadata"]["odd"]]
    assert all(len(r["vector"]) > 0 and json.loads(r["metadata"])["odd"] for r in table)

    # the JSONL goes back in through qkv index: the same documents
    plain = tmp_path / "all.jsonl"
    plain.write_bytes(gzip.open(tmp_path / "all.jsonl.gz").read())
    out = qkv("index", "--input", str(plain), "--collection", "again", "--store", store, "--model",
              str(tiny_model_dir), "--value-field", "value", "--no-tune",
              "--state-dir", str(tmp_path / "jobs2"), "--no-progress")
    assert out.returncode == 0, out.stderr
    out = qkv("export", "again", "--store", store, "--out", str(tmp_path / "again.jsonl"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "again.jsonl").read_text().splitlines() == \
        [json.dumps(r, ensure_ascii=False) for r in rows]

    for args in (["--filter", "{nope"], ["--filter", '{"key": "i", "op": "near"}']):
        out = qkv("export", "notes", "--store", store, "--out", str(tmp_path / "x.jsonl"),
                  *args)
        assert out.returncode == 2 and "filter" in out.stderr.lower(), out.stderr
    out = qkv("export", "notes", "--store", store, "--out", str(tmp_path / "x.csv"))
    assert out.returncode == 2 and ".jsonl" in out.stderr
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "x.csv").exists()


@pytest.mark.long  # make test-long: the bucket's S3 server; the local backups stay in make test
def test_backup_to_a_bucket_and_restore_from_it(tmp_path: Path, tiny_model_dir: Path) -> None:
    """``--to s3://BUCKET/PREFIX`` on a real S3 API (moto's server): the parts under the
    backup's id and the manifest put last; a second backup removes the first's parts; a
    restore from the bucket reuses the vectors; a missing part or manifest exits 2 naming
    it, creating nothing."""
    from store_backends import S3_CREDS, s3_server

    with s3_server("backups") as (endpoint, client):
        env = {**S3_CREDS, "QKV_S3_ENDPOINT": endpoint}
        import encoder

        enc = encoder.load(tiny_model_dir)
        info = EncoderInfo(enc.name, enc.fingerprint, enc.dim)
        texts = [f"note {i} about {'dogs' if i % 2 else 'trains'}" for i in range(300)]
        src = FaissStore(tmp_path / "src")
        src.create("notes", enc.dim, info, hybrid=True)
        src.upsert("notes", [Item(f"n{i:03d}", v, t, metadata={"i": i}) for i, (t, v) in
                             enumerate(zip(texts, enc.encode(texts), strict=True))], info)
        store = f"faiss://{tmp_path / 'src'}"

        def listed() -> list[str]:
            return sorted(o.object_name for o in client.list_objects("backups", "nightly/",
                                                                     recursive=True))

        out = qkv("backup", "--store", store, "--to", "s3://backups/nightly", env=env)
        assert out.returncode == 0, out.stderr
        first = listed()
        assert "nightly/manifest.json" in first and len(first) == 2, first
        ident = first[0].split("/")[1]
        assert first[0] == f"nightly/{ident}/notes/part-00000.parquet" and len(ident) == 32
        out = qkv("backup", "--store", store, "--to", "s3://backups/nightly", env=env)
        assert out.returncode == 0, out.stderr
        second = listed()
        assert len(second) == 2 and ident not in second[0]  # the first's parts removed

        out = qkv("restore", "s3://backups/nightly", "--store", f"faiss://{tmp_path / 'dst'}",
                  "--model", str(tiny_model_dir), env=env)
        assert out.returncode == 0, out.stderr
        assert "300 rows (stored vectors)" in out.stdout
        got = FaissStore(tmp_path / "dst").get("notes", ["n007"])[0]
        assert got.text == texts[7] and got.metadata == {"i": 7}

        client.remove_object("backups", second[0])
        out = qkv("restore", "s3://backups/nightly", "--store", f"faiss://{tmp_path / 'x'}",
                  "--model", str(tiny_model_dir), env=env)
        assert out.returncode == 2 and second[0] in out.stderr and "missing" in out.stderr
        out = qkv("restore", "s3://backups/none", "--store", f"faiss://{tmp_path / 'x'}",
                  "--model", str(tiny_model_dir), env=env)
        assert out.returncode == 2 and "no manifest" in out.stderr, out.stderr
        assert not (tmp_path / "x").exists() or not FaissStore(tmp_path / "x").list_collections()
        out = qkv("backup", "--store", store, "--to", "s3://nobucket/p", env=env)
        assert out.returncode == 2 and "no bucket 'nobucket'" in out.stderr, out.stderr
