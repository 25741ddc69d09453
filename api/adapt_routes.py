"""``POST /v1/collections/{name}/adapt`` and ``GET /v1/jobs/{id}`` (issue 38): adapt the
encoder to a collection's documents in the background (:mod:`wiring.adapter`)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field

from api.access import authorize, current, may_use
from api.errors import not_found
from api.routes import ERRORS, CollectionName, json_response, service
from api.schemas import RequestBody
from index import CollectionNotFoundError

adapt_v1 = APIRouter(dependencies=[Depends(authorize)], responses=ERRORS)
PHASES = Literal["queued", "reading", "training", "re-indexing", "calibrating", "swapping",
                 "done", "skipped", "rejected", "failed", "interrupted"]


class AdaptRequest(RequestBody):
    budget_s: float = Field(540.0, ge=30, le=86_400, description="About how long the whole "
                            "job may take (seconds): reading, training, checking and "
                            "re-indexing. Training gets what the rest is expected to leave "
                            "(at least 20 s, so a large collection may run over).")
    force: bool = Field(False, description="Adapt even where the check says it would not "
                        "help (text the encoder already reads as well as BM25 does).")
    wait: bool = Field(False, description="Answer when the job has finished (else 202 at "
                       "once; GET /v1/jobs/{id} for its progress).")


class JobState(BaseModel):
    id: str
    kind: Literal["adapt"]
    collection: str
    phase: PHASES = Field(description="Where it is. done: the collection now searches with "
                          "the adapted encoder; skipped / rejected: adapting would not help "
                          "/ checked no better, the collection is as it was (see reason).")
    progress: float = Field(description="0 to 1.")
    step: str | None = None
    reason: str | None = None
    encoder: str | None = Field(None, description="The adapted encoder's name (a model).")
    target: str | None = Field(None, description="The collection the name points at after.")
    documents: int | None = None
    report: dict[str, Any] | None = Field(None, description="What the check measured "
                                          "(encoder.domain.Adapted).")
    calibration: dict[str, Any] | None = None
    options: dict[str, Any]
    created_at: float
    updated_at: float | None = None


@adapt_v1.post("/v1/collections/{name}/adapt", response_model=JobState, status_code=202,
               tags=["collections"])
async def adapt_collection(name: CollectionName, body: AdaptRequest, request: Request
                           ) -> Response:
    """Adapt the encoder to this collection's documents (no labels), re-index them with it
    into a new collection, calibrate hybrid search there and point this name at it in one
    step; searches keep answering from the old one meanwhile. Skipped where it would not
    help (unless ``force``), not swapped in where it checks no better. 409 while another
    adapt of it runs; 422 for a multi-tenant collection or one under 300 documents."""
    state, job = await service(request).collections.start_adapt(name, body.budget_s,
                                                                body.force)
    if body.wait:
        return json_response(await asyncio.wrap_future(job))
    return json_response(state, 202)


@adapt_v1.get("/v1/jobs/{job_id}", response_model=JobState, tags=["collections"])
async def job_state(job_id: str, request: Request) -> Response:
    """A background job's phase and progress (it outlives a restart of the service). A key
    bound to tenants or collections sees only the jobs of collections it may use (another's
    is a 404, as an unknown job)."""
    svc = service(request)
    state = svc.adapter.state(job_id)
    key = current.get()
    if key is not None and (key.tenants is not None or key.collections is not None):
        try:
            info = await svc.collections.describe(state["collection"])
        except CollectionNotFoundError:
            info = None
        if info is None or not may_use(key, info, state["collection"]):
            raise not_found(f"no job {job_id!r}")
    return json_response(state)
