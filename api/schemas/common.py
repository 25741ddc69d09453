"""Request and response parts every route family shares: the one request base (JSON types
as declared, nothing coerced), the error bodies of both client families, texts, collection
names and tenants."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Texts = Annotated[list[str], Field(min_length=1)]


# A collection's name as callers write it; '-' is stored as '_'. index.collection_name
# checks and maps it (with a clearer message than a failed pattern); the pattern documents it.
COLLECTION_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"


COLLECTION_NAME_HELP = ("Collection name: a letter or '_', then letters, digits, '_' or '-'. "
                        "'-' is stored as '_': `tm-en-fr` and `tm_en_fr` are one collection, "
                        "and responses show the stored name.")


class RequestBody(BaseModel):
    """A request body: JSON types as declared, nothing coerced, no field it does not name
    (a misspelt one is a 422 naming it, never silently ignored)."""

    model_config = ConfigDict(strict=True, extra="forbid")


class ErrorBody(BaseModel):
    """An error outside /v1/, in Text Embeddings Inference's shape."""

    error: str
    error_type: str


class OpenAIError(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, "
                      "rate_limit_error or server_error.")
    param: str | None = Field(description="The request field at fault, where one is.")
    code: str | None = Field(description="qkv's error type: not_found, conflict, "
                             "invalid_request, payload_too_large, ...")


class OpenAIErrorBody(BaseModel):
    """An error under /v1/, in OpenAI's shape."""

    error: OpenAIError


class Deleted(BaseModel):
    deleted: str


TENANT_HELP = ("The tenant, in a multi-tenant collection (or send the X-Tenant header); "
               "refused on other collections.")
