"""``/v1/backups``: back up collections into the service's backup directory (or bucket:
``QKV_BACKUP_DIR=s3://...``), list the backups, restore one (issue 72;
:mod:`wiring.backups`). Admin scope. Each call answers when its work is done, or at once
with a job to follow (``"wait": false``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field

from api.access import authorize
from api.routes import ERRORS, json_response, service
from api.schemas import RequestBody
from index import collection_name

backups_v1 = APIRouter(dependencies=[Depends(authorize)], responses=ERRORS)
NAME_HELP = ("1..64 letters, digits, '_', '.' or '-': a directory in QKV_BACKUP_DIR (a "
             "prefix in its bucket).")
WAIT_HELP = ("Answer when the work is done (true), or at once with the job (false: 202; "
             "GET /v1/backups/jobs/{id} follows it).")


class BackupRequest(RequestBody):
    name: str = Field(description=f"The backup's name ({NAME_HELP}); an earlier backup of "
                      "that name is replaced once this one is complete.")
    collections: list[str] | None = Field(None, description="Collections or aliases to back "
                                          "up; every collection when left out.")
    wait: bool = Field(True, description=WAIT_HELP)


class RestoreRequest(RequestBody):
    collections: list[str] | None = Field(None, description="Which of the backup's "
                                          "collections; all when left out.")
    as_: str | None = Field(None, alias="as", description="Restore the one collection under "
                            "this name instead of its own.")
    replace: bool = Field(False, description="Move an alias of that name that points at "
                          "another collection (else 409).")
    wait: bool = Field(True, description=WAIT_HELP)


class BackupOut(BaseModel):
    name: str
    id: str | None = None
    created: str | None = None
    collections: list[dict[str, Any]] = Field(default_factory=list, description="Each with "
                                              "its name and rows (a new backup: the whole "
                                              "manifest entry).")
    error: str | None = Field(None, description="Why a listed backup cannot be restored.")


class BackupList(BaseModel):
    backups: list[BackupOut]


class RestoredOut(BaseModel):
    name: str = Field(description="The name readers use: an alias of `collection`.")
    collection: str = Field(description="The collection restored into.")
    rows: int
    reused_vectors: bool = Field(description="False: the texts were embedded again.")
    dropped: list[str] = Field(description="What this store could not keep.")
    aliases: list[str]
    seconds: float


class RestoreOut(BaseModel):
    restored: list[RestoredOut]


class BackupJob(BaseModel):
    id: str = Field(description="backup-... or restore-...")
    kind: str = Field(description="backup or restore")
    name: str = Field(description="The backup's name.")
    state: str = Field(description="running, done or failed")
    owner: str | None = Field(None, description="The server running it (host:pid).")
    created_at: float
    updated_at: float
    result: dict[str, Any] | None = Field(None, description="Once done: what a call with "
                                          "`wait` answers.")
    error: str | None = Field(None, description="Once failed: why (a server stopped under "
                              "it: interrupted, to be run again).")


def _names(names: list[str] | None) -> list[str] | None:
    return [collection_name(n) for n in names] if names is not None else None


@backups_v1.post("/v1/backups", response_model=BackupOut, status_code=201, tags=["backups"],
                 responses={202: {"model": BackupJob, "description": "Started (`wait`: "
                                  "false)."}})
async def make_backup(body: BackupRequest, request: Request) -> Response:
    """Back up collections (rows with their vectors, settings, calibration and aliases)
    into the backup directory, as ``name``. Taken while writes go on, each page of rows is
    as it was when read (see the backups how-to)."""
    svc = service(request)
    got = await svc.backups.backup(body.name, _names(body.collections), body.wait)
    return json_response(got, 201 if body.wait else 202)


@backups_v1.get("/v1/backups", response_model=BackupList, tags=["backups"])
async def list_backups(request: Request) -> Response:
    """The backups in the backup directory, newest first."""
    return json_response({"backups": await service(request).backups.listed()})


@backups_v1.post("/v1/backups/{name}/restore", response_model=RestoreOut, tags=["backups"],
                 responses={202: {"model": BackupJob, "description": "Started (`wait`: "
                                  "false)."}})
async def restore_backup(name: str, body: RestoreRequest, request: Request) -> Response:
    """Restore a backup's collections: each into a new collection, then its name made an
    alias of it (readers see nothing, then all of it). 409 when the name is a collection,
    or an alias of another one without ``replace``; 422 for a damaged backup, naming the
    file."""
    svc = service(request)
    as_ = collection_name(body.as_) if body.as_ is not None else None
    got = await svc.backups.restore(name, _names(body.collections), as_, body.replace,
                                    body.wait)
    return json_response(got, 200 if body.wait else 202)


@backups_v1.get("/v1/backups/jobs/{job_id}", response_model=BackupJob, tags=["backups"])
async def backup_job(job_id: str, request: Request) -> Response:
    """A backup or restore started with ``"wait": false``: running, done (with what the
    call would have answered) or failed (why). Every server sharing the backup directory
    sees it; it outlives a restart."""
    return json_response(await service(request).backups.state(job_id))
