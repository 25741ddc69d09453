"""Backups and restores across stores (issue 72, :mod:`index.backup`): what comes back is
what went in (ids, texts, values, metadata, tenants, vectors, settings, calibration,
aliases), a damaged backup or a taken name is refused before anything is created, and a
backup or restore cut off half-way leaves the old backup whole and no half collection under
the name; a rerun finishes it."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index import FaissStore, MilvusStore
from index import backup as index_backup
from index.backup import STAGING, BackupError, backup, restore, verify
from index.store import EncoderInfo, Item, VectorStore

DIM = 8
ENC = EncoderInfo("test-enc", "f" * 16, DIM)
CAL = {"dense_weight": 0.77, "source": "labels", "method": "ndcg", "docs": 300}
PASSAGES = {"size": 200, "overlap": 32, "pack": 8}


def _items(n: int, seed: int, tenant: str | None = None) -> list[Item]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return [Item(id=f"d{i:04d}", vector=x[i], text=f"text {i} of {tenant or 'all'} ünïcode",
                 value=None if i % 3 else f"value {i}",
                 metadata={"i": i, "tags": ["a", "b"][: i % 3], "nested": {"k": i % 5}},
                 tenant=tenant) for i in range(n)]


def _source(tmp_path: Path) -> MilvusStore:
    store = MilvusStore(str(tmp_path / "src.db"))
    store.create("docs", DIM, ENC, hybrid=True)
    store.upsert("docs", _items(2500, 0), ENC)
    store.set_calibration("docs", CAL)
    store.set_passages("docs", PASSAGES)
    store.set_alias("live", "docs")
    store.create("mt", DIM, ENC, multi_tenant=True)
    store.upsert("mt", _items(40, 1, "acme") + _items(30, 2, "globex"), ENC)
    return store


def _rows(store: VectorStore, name: str, tenants: tuple[str | None, ...] = (None,)
          ) -> dict[tuple[str | None, str], tuple[Any, ...]]:
    out = {}
    for t in tenants:
        ids = [f"d{i:04d}" for i in range(3000)]
        for it in store.get(name, ids, tenant=t):
            out[(it.tenant, it.id)] = (it.text, it.value, json.dumps(it.metadata, sort_keys=True),
                                       np.round(it.vector, 6).tobytes())
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[MilvusStore, Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("backup")
    store = _source(tmp)
    manifest = backup(store, tmp / "b1")
    return store, tmp / "b1", manifest


def test_the_manifest_says_what_the_backup_holds(made: tuple[MilvusStore, Path, Any]) -> None:
    _, where, manifest = made
    assert verify(where) == manifest
    by = {c["name"]: c for c in manifest["collections"]}
    assert set(by) == {"docs", "mt"} and by["docs"]["rows"] == 2500 and by["mt"]["rows"] == 70
    assert by["docs"]["aliases"] == ["live"] and by["docs"]["calibration"]["dense_weight"] == 0.77
    assert by["docs"]["passages"] == PASSAGES and by["docs"]["hybrid"] is True
    assert by["mt"]["multi_tenant"] is True and by["docs"]["encoder"] == ENC.to_dict()
    assert not list(where.parent.glob(".b1.*"))  # nothing left beside it


@pytest.mark.parametrize("target", ["faiss", "lite"])
def test_restore_into_another_backend_gives_back_the_same(
        made: tuple[MilvusStore, Path, Any], tmp_path: Path, target: str) -> None:
    source, where, manifest = made
    store: VectorStore = FaissStore(tmp_path / "f") if target == "faiss" else \
        MilvusStore(str(tmp_path / "dst.db"))
    done = {r.name: r for r in restore(store, where, encoder=ENC)}
    assert all(r.reused_vectors for r in done.values()) and done["docs"].rows == 2500
    staged = f"docs{STAGING}{manifest['id'][:8]}"
    assert store.list_aliases() == {"docs": staged, "live": staged,
                                    "mt": f"mt{STAGING}{manifest['id'][:8]}"}
    assert _rows(store, "docs") == _rows(source, "docs")
    tenants = ("acme", "globex")
    assert _rows(store, "mt", tenants) == _rows(source, "mt", tenants)
    assert store.count("mt", tenant="globex") == 30
    info = store.describe("live")
    assert info.calibration == CAL and info.passages == PASSAGES and info.hybrid
    assert info.encoder == ENC
    rng = np.random.default_rng(9)
    xq = rng.standard_normal((20, DIM)).astype(np.float32)
    xq /= np.linalg.norm(xq, axis=1, keepdims=True)
    got = store.search("docs", xq, 10, consistency="Strong")
    want = source.search("docs", xq, 10, consistency="Strong")
    assert [[h.id for h in q] for q in got] == [[h.id for h in q] for q in want]


def test_another_encoder_embeds_the_texts_again(made: tuple[MilvusStore, Path, Any],
                                                tmp_path: Path) -> None:
    _, where, _ = made
    other = EncoderInfo("other-enc", "0" * 16, 4)
    store = FaissStore(tmp_path / "f")
    with pytest.raises(BackupError, match="another encoder"):
        restore(store, where, ["docs"], encoder=other)  # no embed: refused, nothing made
    assert store.list_collections() == []
    embedded: list[int] = []

    def embed(texts: Any) -> np.ndarray:
        embedded.append(len(texts))
        return np.tile(np.array([1.0, 0, 0, 0], np.float32), (len(texts), 1))

    (r,) = restore(store, where, ["docs"], encoder=other, embed=embed)
    assert not r.reused_vectors and sum(embedded) == 2500
    assert store.describe("docs").encoder == other and store.describe("docs").dim == 4
    assert store.get("docs", ["d0007"])[0].vector.tolist() == [1.0, 0, 0, 0]


def test_a_damaged_backup_or_a_taken_name_creates_nothing(
        made: tuple[MilvusStore, Path, Any], tmp_path: Path) -> None:
    import shutil

    _, where, manifest = made
    copy = tmp_path / "copy"
    shutil.copytree(where, copy)
    part = copy / manifest["collections"][0]["parts"][0]["path"]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    store = FaissStore(tmp_path / "f")
    with pytest.raises(BackupError, match=f"{part.name}: checksum"):
        restore(store, copy)
    part.unlink()
    with pytest.raises(BackupError, match=f"{part.name}: missing"):
        restore(store, copy)
    (copy / "manifest.json").write_text('{"format": "qkv-backup", "version": 9}')
    with pytest.raises(BackupError, match="version 9"):
        verify(copy)
    assert store.list_collections() == []
    store.create("docs", DIM, ENC)  # the name is a collection: refused, nothing made
    with pytest.raises(BackupError, match="'docs' exists"):
        restore(store, where)
    assert store.list_collections() == ["docs"] and store.list_aliases() == {}
    (r,) = restore(store, where, ["docs"], rename={"docs": "docs2"})
    assert r.name == "docs2" and store.count("docs2") == 2500


def test_a_restore_cut_off_shows_nothing_and_a_rerun_finishes_it(
        made: tuple[MilvusStore, Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, where, _ = made
    monkeypatch.setattr(index_backup, "PAGE", 500)  # several pages to be cut between
    store = FaissStore(tmp_path / "f")
    real = store.upsert
    calls = {"n": 0}

    def dies(*args: Any, **kwargs: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # as a kill would: mid-collection
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "upsert", dies)
    with pytest.raises(KeyboardInterrupt):
        restore(store, where, ["docs"])
    assert store.list_aliases() == {}  # readers of "docs" see nothing yet
    monkeypatch.setattr(store, "upsert", real)
    (r,) = restore(store, where, ["docs"])
    assert store.count("docs") == 2500 and r.collection in store.list_collections()


def test_a_backup_cut_off_keeps_the_last_one_whole(
        made: tuple[MilvusStore, Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    source, where, manifest = made
    monkeypatch.setattr(index_backup, "PAGE", 500)  # several pages to be cut between
    dest = tmp_path / "nightly"
    shutil.copytree(where, dest)
    real = source.scan

    def dies(*args: Any, **kwargs: Any) -> Any:
        for i, page in enumerate(real(*args, **kwargs)):
            if i == 1:
                raise KeyboardInterrupt
            yield page

    monkeypatch.setattr(source, "scan", dies)
    with pytest.raises(KeyboardInterrupt):
        backup(source, dest)
    assert verify(dest) == manifest  # the last backup, whole
    assert (tmp_path / ".nightly.partial").is_dir()
    monkeypatch.setattr(source, "scan", real)
    again = backup(source, dest, ["live"])  # an alias names its collection
    assert verify(dest) == again and again["id"] != manifest["id"]
    assert [c["name"] for c in again["collections"]] == ["docs"]
    assert not (tmp_path / ".nightly.partial").exists()


def test_a_backup_cut_off_between_its_renames_is_put_back(
        made: tuple[MilvusStore, Path, Any], tmp_path: Path) -> None:
    """Killed after the previous backup moved aside and before the new one took its place:
    the next run puts the right one back before it starts (the previous one when the new
    one had no manifest yet, else the new one)."""
    import shutil

    from index.backup import recover

    _, where, manifest = made
    dest = tmp_path / "nightly"
    old, partial = tmp_path / ".nightly.old", tmp_path / ".nightly.partial"
    shutil.copytree(where, old)
    partial.mkdir()
    (partial / "docs").mkdir()  # begun, no manifest
    recover(dest)
    assert verify(dest) == manifest and not old.exists()
    shutil.rmtree(partial)
    dest.rename(old)
    shutil.copytree(where, partial)  # complete: its manifest written
    (partial / "marker").write_text("the new one")
    recover(dest)
    assert (dest / "marker").exists() and verify(dest) == manifest
    assert not old.exists() and not partial.exists()
    recover(dest)  # nothing to put right: nothing moves
    assert (dest / "marker").exists()


def test_a_collections_derived_encoder_travels_with_its_backup(tmp_path: Path) -> None:
    """A collection made by a derived encoder (qkv adapt's, in the encoders directory): its
    checkpoint goes into the backup (checked like the parts), and a restore given the
    target's encoders directory installs it and keeps the vectors, where one without it
    would need them embedded again; another checkpoint of that name there is refused."""
    adapted = EncoderInfo("adapted-notes-1", "a" * 16, DIM)
    root = tmp_path / "encoders"
    ckpt = root / "adapted-notes-1"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"weights " * 1000)
    (ckpt / "qkv-encoder.json").write_text('{"name": "adapted-notes-1"}')
    (root / "unused").mkdir()
    (root / "unused" / "model.safetensors").write_bytes(b"other")
    src = FaissStore(tmp_path / "src")
    src.create("notes", DIM, adapted)
    src.upsert("notes", _items(50, 3), adapted)
    src.create("plain", DIM, ENC)
    src.upsert("plain", _items(5, 4), ENC)

    manifest = backup(src, tmp_path / "b", encoders=root)
    by_name = {c["name"]: c for c in manifest["collections"]}
    assert sorted(f["path"] for f in by_name["notes"]["encoder_files"]) == [
        "encoders/adapted-notes-1/model.safetensors", "encoders/adapted-notes-1/qkv-encoder.json"]
    assert "encoder_files" not in by_name["plain"]
    assert not (tmp_path / "b" / "encoders" / "unused").exists()

    with pytest.raises(BackupError, match="embedded again"):  # no encoders dir, no embed
        restore(FaissStore(tmp_path / "x"), tmp_path / "b", ["notes"], encoder=ENC)
    target = tmp_path / "dst-encoders"
    (done,) = restore(FaissStore(tmp_path / "dst"), tmp_path / "b", ["notes"], encoder=ENC,
                      encoders=target)
    assert done.reused_vectors and done.rows == 50
    assert (target / "adapted-notes-1" / "model.safetensors").read_bytes() == \
        (ckpt / "model.safetensors").read_bytes()
    assert FaissStore(tmp_path / "dst").describe("notes").encoder == adapted
    (done,) = restore(FaissStore(tmp_path / "dst"), tmp_path / "b", ["notes"], encoder=ENC,
                      encoders=target, rename={"notes": "again"})  # the same one there: fine
    assert done.reused_vectors

    (target / "adapted-notes-1" / "model.safetensors").write_bytes(b"another one")
    with pytest.raises(BackupError, match="another 'adapted-notes-1'"):
        restore(FaissStore(tmp_path / "y"), tmp_path / "b", ["notes"], encoder=ENC,
                encoders=target)
    assert not (tmp_path / "y").exists() or FaissStore(tmp_path / "y").list_collections() == []
    (tmp_path / "b" / "encoders" / "adapted-notes-1" / "model.safetensors").write_bytes(b"x")
    with pytest.raises(BackupError, match="model.safetensors: checksum"):
        verify(tmp_path / "b")


def test_a_derived_encoder_travels_through_a_bucket(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A backup put in a bucket (moto's S3 server) carries its collection's encoder files
    as well as its parts, and comes back whole: the downloaded copy verifies and restores
    with the encoder installed; a damaged part is named by its object's URL."""
    from store_backends import S3_CREDS, s3_server

    from wiring.backup_remote import download, open_bucket, upload

    for key, value in S3_CREDS.items():
        monkeypatch.setenv(key, value)
    adapted = EncoderInfo("adapted-notes-2", "b" * 16, DIM)
    root = tmp_path / "encoders"
    (root / "adapted-notes-2").mkdir(parents=True)
    (root / "adapted-notes-2" / "model.safetensors").write_bytes(b"weights " * 100)
    (root / "adapted-notes-2" / "qkv-encoder.json").write_text('{"name": "adapted-notes-2"}')
    src = FaissStore(tmp_path / "src")
    src.create("notes", DIM, adapted)
    src.upsert("notes", _items(20, 5), adapted)
    backup(src, tmp_path / "b", encoders=root)
    with s3_server("bkp") as (endpoint, s3):
        manifest = upload(tmp_path / "b", *open_bucket("s3://bkp/p", endpoint))
        keys = {o.object_name for o in s3.list_objects("bkp", "p/", recursive=True)}
        assert f"p/{manifest['id']}/encoders/adapted-notes-2/model.safetensors" in keys
        with download(*open_bucket("s3://bkp/p", endpoint)) as got:
            assert verify(got) == manifest
            (done,) = restore(FaissStore(tmp_path / "dst"), got, encoder=ENC,
                              encoders=tmp_path / "dst-enc")
        assert done.reused_vectors and done.rows == 20
        assert (tmp_path / "dst-enc" / "adapted-notes-2" / "model.safetensors").read_bytes() \
            == b"weights " * 100
        part = f"p/{manifest['id']}/{manifest['collections'][0]['parts'][0]['path']}"
        s3.put_object("bkp", part, io.BytesIO(b"damaged"), 7)
        with pytest.raises(BackupError, match=f"s3://bkp/{part}: checksum"), \
                download(*open_bucket("s3://bkp/p", endpoint)) as got:
            verify(got)


def test_a_restore_into_a_server_is_searched_on_its_index_when_readers_come(
        made: tuple[MilvusStore, Path, Any], milvus_server_uri: str) -> None:
    """A Milvus server searches new segments without their index for a while (recall@10
    0.93 right after a restore of 100,000 documents, bench/backup.py): the restore waits for
    the index and loads the collection again before the alias moves to it."""
    from pymilvus import MilvusClient

    source, where, manifest = made
    store = MilvusStore(milvus_server_uri)
    rename = {"docs": "restored_docs", "mt": "restored_mt"}
    done = {r.name: r for r in restore(store, where, encoder=ENC, rename=rename)}
    try:
        assert done["restored_docs"].rows == 2500 and done["restored_mt"].rows == 70
        client = MilvusClient(uri=milvus_server_uri)
        for r in done.values():
            index = client.list_indexes(r.collection, field_name="vector")[0]
            d = client.describe_index(r.collection, index)
            # not pending_index_rows == 0: 15-60 s after the flush the server compacts away the
            # deletes of its upserts into a new segment, whose index is pending for about a
            # second while readers stay on the old, indexed one (seen here with a probe)
            assert int(d["indexed_rows"]) >= int(d["total_rows"]) > 0, d
            segments = client.list_loaded_segments(r.collection)  # none sealed: growing
            assert sum(x.num_rows for x in segments) == r.rows, segments
            assert all(x.state.name == "Sealed" for x in segments), segments
        big = client.list_loaded_segments(done["restored_docs"].collection)  # 70 rows of mt:
        assert all(x.index_name == "vector" for x in big), big  # too few for an index
        client.close()
        assert _rows(store, "restored_docs") == _rows(source, "docs")
        rng = np.random.default_rng(9)
        xq = rng.standard_normal((20, DIM)).astype(np.float32)
        xq /= np.linalg.norm(xq, axis=1, keepdims=True)
        got = store.search("restored_docs", xq, 10, mode="dense", consistency="Bounded")
        want = source.search("docs", xq, 10, mode="dense", consistency="Strong")
        assert [[h.id for h in q] for q in got] == [[h.id for h in q] for q in want]
    finally:
        for r in done.values():
            for alias in r.aliases:
                store.drop_alias(alias)
            store.drop(r.collection)
        store.close()


def _bm25_ids(store: VectorStore, name: str, query: str) -> set[str]:
    return {h.id for h in store.search(name, np.ones((1, DIM), np.float32) / DIM ** 0.5, 10,
                                       consistency="Strong", query_text=[query],
                                       mode="bm25")[0]}


@pytest.mark.parametrize("target", ["faiss", "lite"])
def test_a_rows_keywords_travel_with_its_backup(tmp_path: Path, target: str) -> None:
    """The BM25 terms a row keeps beside its text (a passage's window, ``Item.keywords``)
    come back with a restore: a word that only the keywords hold still finds the row. A
    backup from before keywords (its files without the column) restores its rows indexed
    by their text."""
    import pyarrow.parquet as pq

    source = MilvusStore(str(tmp_path / "src.db"))
    source.create("w", DIM, ENC, hybrid=True)
    items = _items(6, 3)
    items[1].keywords = "zebra quokka"  # analysed terms, as index.passages writes them
    source.upsert("w", items, ENC)
    assert _bm25_ids(source, "w", "quokka") == {"d0001"}
    backup(source, tmp_path / "b")
    source.close()
    store: VectorStore = FaissStore(tmp_path / "f") if target == "faiss" else \
        MilvusStore(str(tmp_path / "dst.db"))
    restore(store, tmp_path / "b", encoder=ENC)
    assert _bm25_ids(store, "w", "quokka") == {"d0001"}
    assert _bm25_ids(store, "w", "text") == {f"d{i:04d}" for i in range(6)} - {"d0001"}
    # the same backup, its files rewritten without keywords (and the manifest's checksums)
    manifest_path = tmp_path / "b" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for part in manifest["collections"][0]["parts"]:
        path = tmp_path / "b" / part["path"]
        pq.write_table(pq.read_table(path).drop_columns(["keywords"]), path)
        part["sha256"] = index_backup._sha256(path)
    manifest_path.write_text(json.dumps(manifest))
    other: VectorStore = FaissStore(tmp_path / "f2") if target == "faiss" else \
        MilvusStore(str(tmp_path / "dst2.db"))
    restore(other, tmp_path / "b", encoder=ENC)
    assert _bm25_ids(other, "w", "quokka") == set()
    assert _bm25_ids(other, "w", "text") == {f"d{i:04d}" for i in range(6)}
    store.close()
    other.close()
