"""Request and response bodies of ``POST /v1/pooling``: which tokens the attention
pooling weighed, and how much."""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.schemas import RequestBody, Texts


class PoolingRequest(RequestBody):
    input: str | Texts = Field(description="A text or a list of texts.")
    truncate: bool = Field(True, description="Cut texts over the encoder's token limit "
                           "(false answers 422 instead).")


class Segment(BaseModel):
    text: str
    weight: float | None = Field(description="The pooling weight of the token this piece "
                                 "is; null for the spaces between tokens and text past the "
                                 "token limit.")


class PoolingData(BaseModel):
    index: int
    text: str = Field(description="The text as the encoder read it (control characters and "
                      "runs of whitespace made one space).")
    tokens: list[str]
    weights: list[float] = Field(description="One per token; they sum to 1.")
    offsets: list[tuple[int, int]] = Field(description="Each token's [start, end) in `text` "
                                           "(`<s>` spans nothing).")
    segments: list[Segment] = Field(description="`text` cut at token boundaries.")
    truncated: bool


class PoolingResponse(BaseModel):
    model: str
    data: list[PoolingData]
