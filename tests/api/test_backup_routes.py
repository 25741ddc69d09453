"""``/v1/backups`` (issue 72): back up through the running service (the only way on a Lite
file the server holds), list, restore under another name and search it; a damaged backup is
a 422 naming the file, a taken name a 409, and only an admin key may do any of it."""

from __future__ import annotations

import io
import time
import uuid
from pathlib import Path

import pytest
from conftest import MakeClient
from test_access import _auth, _keys


def test_backup_list_restore_search(make_client: MakeClient, tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    s = _keys(path, write={"scope": "write"})
    c = make_client(backup_dir=tmp_path / "backups", keys_file=path, api_key="adm")
    admin = _auth("adm")
    name = "bk_" + uuid.uuid4().hex[:8]
    assert c.post("/v1/collections", json={"name": name, "chunking": False},
                  headers=admin).status_code == 201
    docs = [{"id": f"n{i}", "text": f"note {i} about {'cats' if i % 2 else 'rates'}",
             "metadata": {"i": i}} for i in range(30)]
    assert c.post(f"/v1/collections/{name}/documents", json={"documents": docs},
                  headers=admin).status_code == 200
    assert c.post("/v1/backups", json={"name": "nightly"},
                  headers=_auth(s["write"])).status_code == 403  # admin only
    r = c.post("/v1/backups", json={"name": "nightly", "collections": [name]}, headers=admin)
    assert r.status_code == 201, r.text
    assert [(x["name"], x["rows"]) for x in r.json()["collections"]] == [(name, 30)]
    listed = c.get("/v1/backups", headers=admin).json()["backups"]
    assert [(b["name"], b["collections"]) for b in listed] == [
        ("nightly", [{"name": name, "rows": 30}])]
    r = c.post("/v1/backups/nightly/restore", json={}, headers=admin)
    assert r.status_code == 409 and "exists" in r.text  # the name is a collection
    r = c.post("/v1/backups/nightly/restore", json={"as": f"{name}-copy"}, headers=admin)
    assert r.status_code == 200, r.text
    (done,) = r.json()["restored"]
    assert done["name"] == f"{name}_copy" and done["rows"] == 30 and done["reused_vectors"]
    got = c.get(f"/v1/collections/{name}_copy/documents/n7", headers=admin).json()
    assert got["text"] == "note 7 about cats" and got["metadata"] == {"i": 7}
    want = c.post(f"/v1/collections/{name}/search", json={"query": "cats", "top_k": 5},
                  headers=admin).json()["hits"]
    hits = c.post(f"/v1/collections/{name}_copy/search", json={"query": "cats", "top_k": 5},
                  headers=admin).json()["hits"]
    assert [h["id"] for h in hits] == [h["id"] for h in want]
    part = next((tmp_path / "backups" / "nightly").rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:-10])
    r = c.post("/v1/backups/nightly/restore", json={"as": "other"}, headers=admin)
    assert r.status_code == 422 and part.name in r.text
    assert "other" not in {x["name"] for x in c.get("/v1/collections",
                                                     headers=admin).json()["collections"]}
    assert c.post("/v1/backups/../restore", json={}, headers=admin).status_code in (404, 422)
    r = c.post("/v1/backups", json={"name": "../etc"}, headers=admin)
    assert r.status_code == 422 and "backup name" in r.text


def test_backups_and_restores_as_background_jobs(make_client: MakeClient, tmp_path: Path
                                                 ) -> None:
    """``"wait": false``: 202 with the job at once; GET /v1/backups/jobs/{id} follows it to
    done (with what a waiting call answers) or failed (why); a job file a stopped server left
    running reads as interrupted; admin only."""
    import json
    import time

    path = tmp_path / "keys.jsonl"
    s = _keys(path, read={"scope": "read"})
    c = make_client(backup_dir=tmp_path / "backups", keys_file=path, api_key="adm")
    admin = _auth("adm")
    name = "bj_" + uuid.uuid4().hex[:8]
    assert c.post("/v1/collections", json={"name": name}, headers=admin).status_code == 201
    docs = [{"id": f"n{i}", "text": f"note {i}"} for i in range(40)]
    assert c.post(f"/v1/collections/{name}/documents", json={"documents": docs},
                  headers=admin).status_code == 200

    def follow(job: dict[str, object]) -> dict[str, object]:
        for _ in range(300):
            r = c.get(f"/v1/backups/jobs/{job['id']}", headers=admin)
            assert r.status_code == 200, r.text
            if r.json()["state"] != "running":
                return dict(r.json())
            time.sleep(0.1)
        raise AssertionError("the job did not end")

    r = c.post("/v1/backups", json={"name": "bg", "collections": [name], "wait": False},
               headers=admin)
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["kind"] == "backup" and job["state"] == "running" and job["id"].startswith(
        "backup-")
    done = follow(job)
    assert done["state"] == "done", done
    assert [(x["name"], x["rows"]) for x in done["result"]["collections"]] == [(name, 40)]
    assert c.get(f"/v1/backups/jobs/{job['id']}",
                 headers=_auth(s["read"])).status_code == 403  # admin only

    r = c.post("/v1/backups/bg/restore", json={"as": "bg_copy", "wait": False}, headers=admin)
    assert r.status_code == 202, r.text
    done = follow(r.json())
    assert done["state"] == "done" and done["result"]["restored"][0]["rows"] == 40
    assert c.get("/v1/collections/bg_copy/documents/n3", headers=admin).json()["text"] == \
        "note 3"
    r = c.post("/v1/backups/bg/restore", json={"as": name, "wait": False}, headers=admin)
    assert r.status_code == 202  # a collection's name, refused inside the job: it fails
    failed = follow(r.json())
    assert failed["state"] == "failed" and "exists" in failed["error"], failed

    stale = dict(job, id="backup-0123456789ab", state="running", owner="gone-host:1",
                 created_at=0, updated_at=0)  # another host, silent for long: no longer its
    (tmp_path / "backups" / ".jobs" / "backup-0123456789ab.json").write_text(json.dumps(stale))
    got = c.get("/v1/backups/jobs/backup-0123456789ab", headers=admin).json()
    assert got["state"] == "failed" and "interrupted" in got["error"]
    for bad in ("backup-nope", "../keys", "restore-0123456789ac"):
        assert c.get(f"/v1/backups/jobs/{bad}", headers=admin).status_code == 404
    assert c.get("/v1/backups", headers=admin).json()["backups"][0]["name"] == "bg"


def test_backups_in_a_bucket(make_client: MakeClient, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``QKV_BACKUP_DIR=s3://BUCKET/PREFIX`` on a real S3 API (moto's server): a backup as a
    job lands under PREFIX/NAME/ (manifest last) with the job's state under PREFIX/.jobs/;
    it is listed and restored under another name, searching as the source does; a part
    gone from the bucket is a 422 naming its URL, creating nothing; parts without a
    manifest are not listed; a bucket that is not there is a 503 saying so."""
    from store_backends import S3_CREDS, s3_server

    for key, value in S3_CREDS.items():
        monkeypatch.setenv(key, value)
    with s3_server("backups") as (endpoint, s3):
        c = make_client(backup_dir="s3://backups/svc", s3_endpoint=endpoint)
        name = "bs_" + uuid.uuid4().hex[:8]
        assert c.post("/v1/collections", json={"name": name}).status_code == 201
        docs = [{"id": f"n{i}", "text": f"note {i} about {'cats' if i % 2 else 'rates'}",
                 "metadata": {"i": i}} for i in range(30)]
        assert c.post(f"/v1/collections/{name}/documents",
                      json={"documents": docs}).status_code == 200
        r = c.post("/v1/backups", json={"name": "nightly", "collections": [name],
                                        "wait": False})
        assert r.status_code == 202, r.text
        job = r.json()
        for _ in range(300):
            state = c.get(f"/v1/backups/jobs/{job['id']}").json()
            if state["state"] != "running":
                break
            time.sleep(0.1)
        assert state["state"] == "done", state
        keys = sorted(o.object_name for o in s3.list_objects("backups", "svc/", recursive=True))
        assert f"svc/.jobs/{job['id']}.json" in keys and "svc/nightly/manifest.json" in keys
        (part,) = [k for k in keys if k.endswith(".parquet")]
        assert part.startswith(f"svc/nightly/{state['result']['id']}/{name}/")
        s3.put_object("backups", "svc/killed/0123/x/part-00000.parquet", io.BytesIO(b"x"), 1)
        listed = c.get("/v1/backups").json()["backups"]
        assert [(b["name"], b["collections"]) for b in listed] == [
            ("nightly", [{"name": name, "rows": 30}])]

        r = c.post("/v1/backups/nightly/restore", json={"as": f"{name}_copy"})
        assert r.status_code == 200, r.text
        assert r.json()["restored"][0]["rows"] == 30 and r.json()["restored"][0][
            "reused_vectors"]
        want = c.post(f"/v1/collections/{name}/search", json={"query": "cats", "top_k": 5})
        got = c.post(f"/v1/collections/{name}_copy/search", json={"query": "cats", "top_k": 5})
        assert [h["id"] for h in got.json()["hits"]] == [h["id"] for h in want.json()["hits"]]
        assert c.post("/v1/backups/nope/restore", json={}).status_code == 404

        s3.remove_object("backups", part)
        r = c.post("/v1/backups/nightly/restore", json={"as": "other"})
        assert r.status_code == 422 and f"s3://backups/{part}: missing" in r.text, r.text
        assert "other" not in {x["name"] for x in c.get("/v1/collections").json()[
            "collections"]}

        c2 = make_client(backup_dir="s3://nobucket/svc", s3_endpoint=endpoint)
        r = c2.post("/v1/backups", json={"name": "nightly"})
        assert r.status_code == 503 and "no bucket 'nobucket'" in r.text, r.text
