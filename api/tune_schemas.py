"""Request and response bodies of hybrid calibration (``POST/GET
/v1/collections/{name}/tune``, and a collection's ``calibration``): see index.hybrid.calibration."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    """As api.schemas.RequestBody: JSON types as declared, nothing coerced."""

    model_config = ConfigDict(strict=True)


class CalibrationOut(BaseModel):
    dense_weight: float = Field(description="w of hybrid's convex fusion for this collection.")
    source: Literal["collection", "labels", "manual", "encoder default"] = Field(
        description="collection: estimated from its own documents (pseudo-queries, no "
        "labels); labels: chosen by nDCG@10 on judged queries; manual: set by hand; encoder "
        "default: too few documents to calibrate.")
    method: str
    docs: int = Field(description="Documents in the collection when it was tuned.")
    queries: int = Field(description="Pseudo- or judged queries it was chosen on.")
    seed: int
    seconds: float = Field(description="What the tune cost.")
    note: str
    signals: dict[str, Any] = Field(description="What the weight was chosen from.")
    at: float = Field(description="When (Unix time).")


class TuneState(BaseModel):
    collection: str
    state: Literal["queued", "running", "done", "failed"]
    reason: str | None = None
    error: str | None = None
    calibration: CalibrationOut | None = None
    queued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None


class JudgedQuery(_Strict):
    query: str = Field(min_length=1, max_length=10_000)
    relevant: list[str] | dict[str, int] = Field(
        description="The relevant document ids, or id → grade (grades above 0 count).")
    id: str | None = None


class TuneRequest(_Strict):
    labels: list[JudgedQuery] | None = Field(
        None, min_length=1, max_length=5000, description="Judged queries: the weight is "
        "chosen by nDCG@10 on them. Without: estimated from the collection's documents.")
    dense_weight: float | None = Field(None, ge=0, le=1, description="Set the weight by hand "
                                       "instead (answered at once).")
    seed: int = Field(0, ge=0)
    wait: bool = Field(False, description="Answer when the tune is done (200) instead of at "
                       "once (202); it runs off the request path either way.")


WeightSource = Literal["collection", "encoder default", "request"]


def calibration_field() -> Any:
    return Field(None, description="Hybrid search's calibration stored with the collection "
                 "(null: not tuned yet; hybrid uses the encoder's default weight).")


def dense_weight_field() -> Any:
    return Field(None, description="In hybrid mode: the w it fused with (before each "
                 "query's confidence scaling).")


def weight_source_field() -> Any:
    return Field(None, description="In hybrid mode: where w came from (the collection's "
                 "calibration, the encoder's default, or the request).")


def tuning_field() -> Any:
    return Field(None, description="This server's last tune job of the collection.")
