"""The bodies of a collection's documents (upsert, delete, get, pages of them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import (
    TENANT_HELP,
    RequestBody,
)


# documents
class Document(RequestBody):
    model_config = ConfigDict(strict=True, extra="forbid")
    id: str = Field(min_length=1, max_length=512)
    text: str = Field(min_length=1)
    value: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class DocumentsUpsert(RequestBody):
    documents: list[Document] = Field(min_length=1)
    tenant: str | None = Field(None, description=TENANT_HELP)
    truncate: bool = Field(True, description="Cut texts over the token limit (listed in "
                           "`truncated`); false answers 422 instead.")


class UpsertResult(BaseModel):
    upserted: int
    truncated: list[str] = Field(description="Ids whose text was cut to the token limit.")


class DocumentsDelete(RequestBody):
    # exactly one of `ids` and `filter` (the other absent or null), stated in the schema
    model_config = ConfigDict(strict=True, extra="forbid", json_schema_extra={"oneOf": [
        {"required": ["ids"], "properties": {"ids": {"type": "array"}}},
        {"required": ["filter"], "properties": {"filter": {"type": "object"}}}]})

    ids: list[str] | None = Field(None, min_length=1, description="The documents to delete, "
                                  "or give `filter`.")
    filter: dict[str, Any] | None = Field(None, description="Delete every document (the "
                                          "tenant's) that matches, instead of `ids`: "
                                          "a search's filter.")
    tenant: str | None = Field(None, description=TENANT_HELP)


class DeleteResult(BaseModel):
    deleted: int = Field(description="Ids asked to delete (absent ids are no-ops), or the "
                         "documents a filter matched.")


class DocumentOut(BaseModel):
    id: str
    text: str
    value: str | None
    metadata: dict[str, Any]
    vector: list[float] | None = None


class DocumentsPage(BaseModel):
    documents: list[DocumentOut] = Field(description="Whole documents, in id order.")
    next_cursor: str | None = Field(description="Pass it as `cursor` for the next page; null "
                                    "after the last.")


class FileUpserted(BaseModel):
    id: str = Field(description="The document's id.")
    format: str = Field(description="How it was read: text, markdown, html or pdf.")
    characters: int = Field(description="Characters of text read from it.")
