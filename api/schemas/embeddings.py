"""The bodies of OpenAI's embeddings (``/v1/embeddings``, ``/v1/models``) and of
``/v1/pooling`` (which tokens made each vector)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.schemas.common import (
    RequestBody,
    Texts,
)

# embeddings (OpenAI)
TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class EmbeddingsRequest(RequestBody):
    input: str | Texts | TokenIds | Annotated[list[TokenIds], Field(min_length=1)] = Field(
        description="A text, a list of texts, or OpenAI token ids (one list of ints, or a "
        "list of them), which are decoded with OpenAI's cl100k_base vocabulary and encoded "
        "with the served encoder's own (usage counts its tokens).")
    model: str | None = Field(None, description="An id from GET /v1/models; missing means the "
                              "served encoder, unknown is 404.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, description="One of the model's `dims` (GET "
                                   "/v1/models): its full dim, or a size it was trained to be "
                                   "cut to (Matryoshka); the vectors are cut and renormalised.")
    user: str | None = None
    truncate: bool = Field(False, description="qkv extension: cut texts over the encoder's "
                           "token limit instead of answering 422.")


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="Floats, or base64 of little-endian "
                                         "float32 with encoding_format=base64.")


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: Usage
    truncated: bool = Field(description="Whether any input was cut to the token limit.")


# pooling weights
# models
class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "qkv"
    dim: int
    dims: list[int] = Field(description="The `dimensions` /v1/embeddings accepts: the sizes "
                            "the vectors were trained to be cut to (Matryoshka), and `dim`.")
    fingerprint: str
    max_tokens: int
    backend: str | None = Field(description="What runs the encoder: `torch`, or `onnx` (its "
                                "int8 ONNX Runtime graph on a CPU); null for a derived encoder "
                                "(it runs as the default does, once loaded).")
    backend_why: str | None = Field(None, description="Why that backend: on a CPU, the self-timing "
                                    "that picked it at start (sentences/s of each backend that "
                                    "keeps cosine 0.999 of fp32; cached per CPU, threads and "
                                    "encoder), or the setting that fixed it.")
    dense_weight: float | None = Field(description="The default w of hybrid search's convex "
                                       "fusion for the default encoder's vectors (a derived "
                                       "encoder's collection is calibrated when adapted).")
    default: bool = Field(True, description="The service's own encoder (QKV_MODEL).")
    loaded: bool = Field(True, description="In memory now (QKV_ENCODERS_LOADED at most).")
    base: str | None = Field(None, description="The encoder a derived one was adapted from.")
    collection: str | None = Field(None, description="The collection it was adapted to.")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


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
