"""How far a demo collection's filling is, in ``/ready`` and in the answers of a
collection still being filled on a first start (wiring.demo)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Seeding(BaseModel):
    collection: str
    state: Literal["waiting", "seeding", "complete", "stopped", "failed"]
    written: int = Field(description="Documents written (and searchable) so far.")
    of: int = Field(description="Documents in the demo corpus.")
    error: str | None = None


def seeding_field() -> Any:
    return Field(None, description="Only while this demo collection is still being filled "
                 "on a first start: how far it is (the answer comes from the documents "
                 "written so far).")
