"""The bodies of collections, aliases and their hybrid calibration (``/v1/collections``,
``/v1/aliases``, ``.../tune``), and how far a demo collection's filling is."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from api.schemas.common import (
    COLLECTION_NAME_HELP,
    COLLECTION_NAME_PATTERN,
    RequestBody,
)
from index import collection_name
from index.passages import Settings

PASSAGE_DEFAULT = Settings()


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


class JudgedQuery(RequestBody):
    query: str = Field(min_length=1, max_length=10_000)
    relevant: list[str] | dict[str, int] = Field(
        description="The relevant document ids, or id → grade (grades above 0 count).")
    id: str | None = None


class TuneRequest(RequestBody):
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
    return Field(None, description="The collection's last tune job (on any replica).")


# collections
class CollectionCreate(RequestBody):
    name: Annotated[str, Field(min_length=1, max_length=255, description=COLLECTION_NAME_HELP,
                               json_schema_extra={"pattern": COLLECTION_NAME_PATTERN}),
                    AfterValidator(collection_name)]
    hybrid: bool | None = Field(None, description="Also index the documents' text for BM25 "
                                "full-text search (English: lower-cased, stop words dropped, "
                                "stemmed), for search modes bm25 and hybrid. Default: true "
                                "where the store has BM25 (Milvus Lite, Milvus >= 2.5, FAISS), "
                                "false on a Milvus server older than 2.5; true there is 409.")
    dimensions: int | None = Field(None, ge=1, description="The vectors' size: one of the "
                                   "model's `dims` (GET /v1/models), default its full dim. A "
                                   "smaller, Matryoshka-trained size stores and searches the "
                                   "vectors cut to it: less memory, a little less accuracy.")
    multi_tenant: bool = Field(False, description="Every document belongs to a tenant, and "
                               "every read and write names one (X-Tenant header or `tenant`); "
                               "tenants never see each other's documents and may reuse ids.")
    model: str | None = Field(None, max_length=128, description="The encoder that embeds "
                              "for this collection, for good: one of GET /v1/models (default "
                              "the service's own).")
    chunking: bool = Field(True, description="Cut each document into passages that follow "
                           "its paragraphs and headings, so that a document of any length "
                           "(up to 10 MB of text) is searched whole: searches return "
                           "documents with their best passages. false: a document is one "
                           "row, its text cut at the encoder's token limit.")
    passage_tokens: int | None = Field(None, ge=16, le=4096, description="A passage's size "
                                       "in the encoder's tokens (at most), no more than it "
                                       f"reads. Default {PASSAGE_DEFAULT.size} (or what the "
                                       "encoder reads, if less).")
    passage_pack: int | None = Field(None, ge=0, description="A passage of fewer tokens "
                                     "than this takes the next paragraph too (headings and "
                                     "short lines join what follows). Default "
                                     f"{PASSAGE_DEFAULT.pack}, at most a quarter of "
                                     "passage_tokens.")
    passage_overlap: int | None = Field(None, ge=0, description="Tokens that windows cut "
                                        "out of one over-long sentence share (the last "
                                        "resort: passages otherwise end at paragraphs and "
                                        f"sentences); under half of passage_tokens. Default "
                                        f"{PASSAGE_DEFAULT.overlap}, at most a quarter of "
                                        "passage_tokens.")


class PassagesOut(BaseModel):
    size: int = Field(description="A passage's size in tokens (at most).")
    overlap: int = Field(description="Tokens shared by windows of one over-long sentence.")
    pack: int | None = Field(None, description="A passage of fewer tokens takes the next "
                             "paragraph too.")


class EncoderOut(BaseModel):
    name: str
    fingerprint: str
    dim: int


class CollectionOut(BaseModel):
    name: str
    dim: int
    encoder: EncoderOut | None
    count: int | None = Field(None, description="Exact number of documents (null for a "
                              "multi-tenant collection, except on GET of one with X-Tenant: "
                              "the tenant's).")
    decoder: str | None = Field(None, description="The decoder generate uses, if any.")
    hybrid: bool = Field(False, description="Whether the collection has a BM25 index (search "
                         "modes bm25 and hybrid).")
    aliases: list[str] = Field(default_factory=list, description="Aliases pointing at it.")
    multi_tenant: bool = False
    passages: PassagesOut | None = Field(None, description="How its documents are cut into "
                                         "passages (null: a document is one row).")
    calibration: CalibrationOut | None = calibration_field()
    tuning: TuneState | None = tuning_field()
    backend: str = Field("", description="milvus-lite, milvus, faiss-flat or faiss-hnsw.")
    size_warning: str | None = Field(None, description="Set (on GET of one collection) when "
                                     "it holds more documents than its backend serves within "
                                     "the latency targets, with the alternative.")


class AliasSet(RequestBody):
    collection: Annotated[str, Field(min_length=1, max_length=255,
                                     description="The collection the alias points at."),
                          AfterValidator(collection_name)]


class AliasOut(BaseModel):
    alias: str
    collection: str
    previous: str | None = Field(None, description="On PUT: the collection it pointed at "
                                 "before (null when the alias is new).")


class AliasList(BaseModel):
    aliases: list[AliasOut]


class CollectionList(BaseModel):
    collections: list[CollectionOut]


class Health(BaseModel):
    status: str
    detail: str | None = None
    seeding: list[Seeding] | None = Field(
        None, description="The demo collections of this start and how far their filling is.")
