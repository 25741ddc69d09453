"""``qkv index --engine ray --load bulk-import``: a very large one-off load into a new
collection on a Milvus server through Milvus' bulk import, not upserts.

The encoder actors encode the job's ranges as for upserts (``wiring.ray_indexing``); the
driver writes each encoded range as a Parquet file with the collection's columns under
``--bulk-dir`` (a temporary file, then a rename) and marks the range done. Once every range
is, the driver merges them into files of at most ``group_rows`` rows (an import costs
seconds beyond its rows), starts one Milvus import per merged file (at most
:data:`IN_FLIGHT` at a time), polls them to the end and waits until the rows are visible.

Imports do not de-duplicate primary keys, so nothing may be imported twice:

- the inputs' repeated ids are resolved before any file is written (``index.bulk.ranges``: the
  last occurrence stays), so no id is in two files;
- only a collection this job created is imported into: a collection that exists before the
  job's first run is refused (upsert into it instead);
- each file's import is recorded in the job's imports file (``STEM.imports.json``) before
  it is asked for ("starting") and its task id as soon as Milvus answers. A rerun asks
  Milvus for the state of each recorded task; a file left "starting" (a kill between the
  request and the record) is matched against the collection's import tasks by file name
  and adopted if one exists. Only a file with no task, or whose task failed (a failed
  import leaves no rows), is imported again.

The server reads the files itself: a local ``--bulk-dir`` must be a directory it reads at
the same path, e.g. the data directory of a standalone on local storage on this machine, or
a volume mounted at the same path in its container. A server on object storage (MinIO, S3:
the docker-compose stack, a cluster) reads from its bucket: ``--bulk-dir s3://BUCKET/PREFIX``
uploads the merged files there first (``wiring.bulk_remote``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import socket
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from index import Item, StoreError, StoreUnavailableError, open_store
from index.bulk.ranges import Range, done_reports, mark_done, write_json
from index.store import check_item
from wiring.bulk_remote import Bucket, is_remote

IN_FLIGHT = 2  # imports asked for at once (a standalone's one data node takes one at a time)
# rows a file imported: an import costs about 2 s beyond its rows on a 2.3.5 standalone (98
# files of 2,048 rows took 197 s to import), so the ranges' files are merged first
GROUP_ROWS = 250_000
POLL_S = 1.0
VISIBLE_TIMEOUT_S = 300.0  # imported rows become searchable once indexed and loaded
FAILED = ("Failed", "Failed and cleaned")
_aliases = itertools.count()


@contextlib.contextmanager
def _orm() -> Iterator[None]:
    """pymilvus' ORM API (``connections``, ``utility``), the one that imports in pymilvus
    3.0, without its deprecation warning on every call."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ORM-style")
        yield


def parquet_path(bulk_dir: Path, stem: str, r: Range) -> Path:
    return bulk_dir / stem / f"{r.key}.parquet"


def write_parquet_range(job: Any, r: Range, meta: dict[str, Any], items: list[Item],
                        bulk_dir: Path, stem: str, bm25: bool) -> dict[str, Any]:
    """One encoded range (``wiring.ray_indexing.encoded_range``) as a Parquet file with the
    collection's columns (``bm25``: also the analysed text that a hybrid collection's BM25
    function reads); then its marker, with the file and its rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from index.milvus.schema import BM25_FIELD, bm25_of

    for it in items:
        check_item(it)  # as an upsert would: the import would fail on the whole file
    path: Path | None = None
    if items:
        columns: dict[str, Any] = {
            "id": [it.id for it in items],
            "vector": pa.array([it.vector for it in items], type=pa.list_(pa.float32())),
            "text": [it.text for it in items], "value": [it.value or "" for it in items],
            "metadata": [json.dumps(it.metadata, ensure_ascii=False) for it in items]}
        if bm25:
            columns[BM25_FIELD] = [bm25_of(it) for it in items]
        path = parquet_path(bulk_dir, stem, r)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(pa.table(columns), tmp)
        os.replace(tmp, path)
    report = {"written": len(meta["ids"]), "rows": len(items), "rejects": meta["rejects"],
              "superseded": meta["superseded"], "worker": meta["worker"],
              "writer": f"{socket.gethostname()}:{os.getpid()}", "retries": 0,
              "encode_s": meta["encode_s"], "file": str(path) if path else None}
    mark_done(Path(job.done_dir), r, report)
    return report


def merge_plan(done_dir: Path, out_dir: Path, group_rows: int) -> list[dict[str, Any]]:
    """The done ranges' files, in key order, cut into groups of at most ``group_rows`` rows,
    each to be merged into ``out_dir/import-NNNNN.parquet``."""
    ranges = sorted((d["file"], d.get("rows", d["written"]))  # passages: rows > documents
                    for d in done_reports(done_dir).values() if d.get("file"))
    plan: list[dict[str, Any]] = []
    for path, rows in ranges:
        if not plan or plan[-1]["rows"] + rows > group_rows:
            plan.append({"file": str(out_dir / f"import-{len(plan):05d}.parquet"),
                         "rows": 0, "parts": []})
        plan[-1]["rows"] += rows
        plan[-1]["parts"].append(path)
    return plan


def files_to_import(state_path: Path, done_dir: Path, out_dir: Path,
                    group_rows: int = GROUP_ROWS) -> list[tuple[str, int]]:
    """(Parquet file, rows) to import: the ranges' files merged as the job's imports file
    plans (:func:`merge_plan`, planned once and kept there, so a rerun, even with another
    ``group_rows``, merges and imports the same files). A merged file is written to a
    temporary name and renamed, so one that exists is whole; the ranges' own files are
    removed once it is in place."""
    import pyarrow.parquet as pq

    state = json.loads(state_path.read_text())
    if state.get("merged") is None:  # a new plan: merged files of an earlier one are stale
        for stale in out_dir.glob("import-*.parquet*"):  # (a --restart keeps the directory)
            stale.unlink()
        out_dir.mkdir(parents=True, exist_ok=True)
        state["merged"] = merge_plan(done_dir, out_dir, group_rows)
        write_json(state_path, state)
    for group in state["merged"]:
        target = Path(group["file"])
        if not target.exists() and not any(Path(p).exists() for p in group["parts"]):
            continue  # uploaded and imported, then removed (wiring.bulk_remote)
        if not target.exists():
            tmp = target.with_name(target.name + ".tmp")
            writer = None
            for path in group["parts"]:
                table = pq.read_table(path)
                writer = writer or pq.ParquetWriter(tmp, table.schema)
                writer.write_table(table)
            if writer is not None:
                writer.close()
            os.replace(tmp, target)
        for path in group["parts"]:
            Path(path).unlink(missing_ok=True)
    return [(g["file"], g["rows"]) for g in state["merged"]]


def refuse_existing(state_path: Path, collections: list[str], collection: str) -> None:
    """A bulk import goes only into a collection this job creates: refuse one that exists
    where the job has no imports file yet (its first run)."""
    if not state_path.exists() and collection in collections:
        raise StoreError(
            f"collection {collection!r} exists: --load bulk-import only fills a new "
            "collection (imports do not de-duplicate ids); index into it without "
            "--load (upserts), or give a new --collection")


def start_state(state_path: Path, collection: str) -> None:
    """The job's imports file, written before the collection is created, so a rerun knows
    the collection is its own."""
    if not state_path.exists():
        write_json(state_path, {"collection": collection, "files": {}})


class Importer:
    """Milvus' bulk imports of a job's files, recorded in its imports file (module doc)."""

    def __init__(self, uri: str, token: str, collection: str, state_path: Path,
                 timeout: float = 30.0, retries: int = 2) -> None:
        from pymilvus import connections

        self.collection, self.state_path = collection, state_path
        self.timeout, self.retries = timeout, retries
        self.using = f"qkv-bulk-{os.getpid()}-{next(_aliases)}"
        try:
            with _orm():
                connections.connect(self.using, uri=uri, token=token, timeout=timeout)
        except Exception as e:
            raise StoreUnavailableError(f"cannot reach {uri} for bulk import: {e}") from e
        self.state: dict[str, Any] = json.loads(state_path.read_text())

    def close(self) -> None:
        from pymilvus import connections

        with _orm():
            connections.disconnect(self.using)

    def _utility(self, name: str, *args: Any, **kwargs: Any) -> Any:
        from pymilvus import utility

        with _orm():
            try:
                return getattr(utility, name)(*args, using=self.using, timeout=self.timeout,
                                              **kwargs)
            except Exception as e:
                raise StoreUnavailableError(f"bulk import: {name} failed: {e}") from e

    def _save(self) -> None:
        write_json(self.state_path, self.state)

    def _adopt(self, entries: dict[str, dict[str, Any]]) -> None:
        """Files left "starting" by a killed run: their task, if Milvus has one."""
        starting = [p for p, e in entries.items() if e["state"] == "starting"]
        if not starting:
            return
        tasks = self._utility("list_bulk_insert_tasks", limit=0,
                              collection_name=self.collection)
        for path in starting:
            mine = [t for t in tasks if path in str(t.files).split(",")
                    and t.state_name not in FAILED]
            if mine:
                entries[path].update(task=mine[-1].task_id, state="started")
            else:
                entries[path].update(task=None, state="new")
        self._save()

    def run(self, files: list[tuple[str, int]],
            progress: Callable[[dict[str, Any]], None] = lambda _: None) -> dict[str, Any]:
        """Import every file not imported yet; returns the figures once all are done."""
        entries: dict[str, dict[str, Any]] = self.state.setdefault("files", {})
        for path, rows in files:
            entries.setdefault(path, {"rows": rows, "task": None, "state": "new",
                                      "failures": 0})
        self._save()
        self._adopt(entries)
        t0 = time.monotonic()
        while True:
            for path, e in entries.items():
                if e["state"] != "started":
                    continue
                s = self._utility("get_bulk_insert_state", e["task"])
                if s.state_name == "Completed":
                    e.update(state="done", imported=s.row_count)
                elif s.state_name in FAILED:
                    e["failures"] += 1
                    reason = s.infos.get("failed_reason", "")
                    if e["failures"] > self.retries:
                        self._save()
                        raise StoreError(
                            f"bulk import of {path} failed {e['failures']} times: {reason}. "
                            "Earlier files may be imported: drop the collection, then run "
                            "the command again with --restart")
                    e.update(state="new", task=None, reason=reason)
            waiting = [p for p, e in entries.items() if e["state"] == "new"]
            busy = sum(e["state"] == "started" for e in entries.values())
            for path in waiting[: max(0, IN_FLIGHT - busy)]:
                entries[path]["state"] = "starting"
                self._save()  # before the request: a kill now is adopted on the rerun
                task = self._utility("do_bulk_insert", self.collection, files=[path])
                entries[path].update(task=task, state="started")
                self._save()
            figures = self.figures(entries, time.monotonic() - t0)
            self.state["figures"] = figures  # for a dashboard, as the Ray job's state file
            self._save()
            progress(figures)
            if figures["files_done"] == len(entries):
                return figures
            time.sleep(POLL_S)

    @staticmethod
    def figures(entries: dict[str, dict[str, Any]], seconds: float) -> dict[str, Any]:
        done = [e for e in entries.values() if e["state"] == "done"]
        return {"files": len(entries), "files_done": len(done),
                "rows": sum(e["rows"] for e in entries.values()),
                "rows_imported": sum(e.get("imported", e["rows"]) for e in done),
                "seconds": round(seconds, 1)}


Stage = Callable[[list[tuple[str, int]], set[str]], list[tuple[str, int]]]


def import_files(uri: str, token: str, collection: str, state_path: Path, done_dir: Path,
                 bulk_dir: Path, count: Callable[[], int], show: Callable[[str], None],
                 group_rows: int = GROUP_ROWS, stage: Stage | None = None) -> dict[str, Any]:
    """Import the job's files (:class:`Importer`), then wait until ``count()`` shows every
    row; returns the figures. ``stage``: what puts the merged files where the server reads
    them (an upload, :meth:`Bucket.upload`) and names them as it does, given the names
    already imported."""
    files = files_to_import(state_path, done_dir, bulk_dir, group_rows)
    if stage is not None:
        entries = json.loads(state_path.read_text()).get("files", {})
        files = stage(files, {p for p, e in entries.items() if e["state"] == "done"})
    importer = Importer(uri, token, collection, state_path)
    try:
        figures = importer.run(files, lambda f: show(
            f"bulk import: {f['files_done']}/{f['files']} files, "
            f"{f['rows_imported']:,} rows"))
    finally:
        importer.close()
    deadline = time.monotonic() + VISIBLE_TIMEOUT_S
    while (visible := count()) < figures["rows"]:
        if time.monotonic() > deadline:
            raise StoreUnavailableError(
                f"bulk import done but {visible:,} of {figures['rows']:,} rows are visible "
                f"after {VISIBLE_TIMEOUT_S:.0f} s; run the same command again to wait")
        time.sleep(POLL_S)
    figures["visible"] = visible
    write_json(state_path, {**importer.state, "figures": figures, "complete": True})
    show(f"bulk import: {figures['files']} files, {visible:,} rows visible\n")
    return figures


class BulkLoad:
    """The bulk-import side of :func:`index_with_ray` (``wiring.ray_bulk``): refuses an
    existing collection at the job's first run, writes the files, imports them."""

    def __init__(self, bulk_dir: str, stem: str, store: str, token: str, timeout: float,
                 collection: str, imports_path: Path, group_rows: int = GROUP_ROWS,
                 s3_endpoint: str | None = None) -> None:
        if not store.startswith(("http://", "https://")):
            raise ValueError("--load bulk-import needs a Milvus server (http://host:port): "
                             "Milvus Lite and FAISS have no bulk import")
        self.bucket: Bucket | None = None
        if is_remote(bulk_dir):  # staged beside the job's files, then uploaded
            self.bucket = Bucket.parse(bulk_dir, s3_endpoint)
            self.bucket.check()
            local = imports_path.parent / f"{stem}.bulk"
        else:
            local = Path(bulk_dir)
        self.bulk_dir, self.stem, self.uri, self.token = local.resolve(), stem, store, token
        self.collection, self.imports_path = collection, imports_path
        if group_rows < 1:
            raise ValueError(f"rows per imported file must be >= 1, got {group_rows}")
        self.group_rows = group_rows
        self.store = open_store(store, token=token, timeout=timeout)
        try:
            refuse_existing(imports_path, self.store.list_collections(), collection)
            start_state(imports_path, collection)
        except BaseException:
            self.store.close()
            raise

    def writer(self, job: Any) -> Callable[[Range, dict[str, Any], list[Item]], Any]:
        """What the driver does with each encoded range: its Parquet file."""
        bm25: list[bool] = []

        def write(r: Range, meta: dict[str, Any], items: list[Item]) -> Any:
            if not bm25:  # the collection exists by the first range (run_ray creates it)
                bm25.append(self.store.describe(self.collection).hybrid)
            return write_parquet_range(job, r, meta, items, self.bulk_dir, self.stem, bm25[0])

        return write

    def run(self, done_dir: Path, show: bool) -> dict[str, Any]:
        def say(line: str) -> None:
            if show:
                sys.stderr.write(f"\r{line}")
                sys.stderr.flush()

        bucket, path = self.bucket, self.imports_path

        def upload(files: list[tuple[str, int]], done: set[str]) -> list[tuple[str, int]]:
            assert bucket is not None
            state = json.loads(path.read_text())
            sent: list[str] = state.setdefault("uploaded", [])

            def record(key: str) -> None:
                sent.append(key)
                write_json(path, state)

            return bucket.upload(files, self.stem, done | set(sent), record)

        stage = upload if bucket else None
        figures = import_files(self.uri, self.token, self.collection, self.imports_path,
                               done_dir, self.bulk_dir / self.stem,
                               lambda: self.store.count(self.collection), say,
                               self.group_rows, stage)
        if bucket is not None:  # complete: the bucket holds the files, the local copies go
            shutil.rmtree(self.bulk_dir, ignore_errors=True)
        return figures

    def close(self) -> None:
        self.store.close()
