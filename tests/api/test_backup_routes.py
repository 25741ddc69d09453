"""``/v1/backups`` (issue 72): back up through the running service (the only way on a Lite
file the server holds), list, restore under another name and search it; a damaged backup is
a 422 naming the file, a taken name a 409, and only an admin key may do any of it."""

from __future__ import annotations

import uuid
from pathlib import Path

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
