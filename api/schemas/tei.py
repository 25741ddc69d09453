"""The bodies of the Text Embeddings Inference routes (``POST /``, ``/embed``,
``/embed_all``, ``/rerank``, ``/similarity``, ``/tokenize``, ``/decode``, ``/info``), as
TEI writes them, so that TEI's clients work unchanged."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.schemas.common import (
    RequestBody,
    Texts,
)


# embeddings (TEI)
class TeiEmbedRequest(RequestBody):
    inputs: str | Texts
    truncate: bool = False
    normalize: bool = True
    truncation_direction: Literal["Right", "right"] = "Right"


Direction = Literal["Right", "right"]


class TeiEmbedAllRequest(RequestBody):
    inputs: str | Texts
    truncate: bool = False
    truncation_direction: Direction = "Right"


class RerankRequest(RequestBody):
    query: str = Field(min_length=1)
    texts: Texts
    truncate: bool = False
    truncation_direction: Direction = "Right"
    raw_scores: bool = Field(False, description="The cosine itself instead of (1 + cos) / 2; "
                             "with a reranker, its logit instead of sigmoid(logit).")
    return_text: bool = False
    hybrid: bool = Field(False, description="qkv extension: fuse the cosine with BM25 over "
                         "the given texts (convex fusion, as hybrid search); the score is "
                         "then the fused one, in [0, 1]; the reranker is not used.")
    dense_weight: float | None = Field(None, ge=0, le=1, description="qkv extension: w of the "
                                       "fusion (default: the served encoder's).")


class Rank(BaseModel):
    index: int
    score: float
    text: str | None = None


class SimilarityInputs(RequestBody):
    source_sentence: str = Field(min_length=1)
    sentences: Texts


class SimilarityRequest(RequestBody):
    inputs: SimilarityInputs
    parameters: dict[str, object] | None = Field(None, description="Accepted, as TEI does; "
                                                 "`truncate` (bool) is read from it.")


class TokenizeRequest(RequestBody):
    inputs: str | Texts
    add_special_tokens: bool = True


class SimpleToken(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None = Field(description="Byte offset of the token in the input (TEI's).")
    stop: int | None


Ids = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class DecodeRequest(RequestBody):
    ids: Ids | Annotated[list[Ids], Field(min_length=1)]
    skip_special_tokens: bool = True


class Info(BaseModel):
    model_id: str
    model_sha: str | None = Field(description="The encoder's fingerprint.")
    model_dtype: str
    model_type: dict[str, dict[str, str]] = Field(description="`embedding`, and `reranker` "
                                                  "(id, fingerprint, backend) where one is "
                                                  "loaded (QKV_RERANKER).")
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    sha: str | None = None
    docker_label: str | None = None
