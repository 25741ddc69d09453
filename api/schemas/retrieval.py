"""The bodies of search (one or a batch), attend and generate, with a generate's token
memory (kNN-MT: decoder.knn)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.collections import (
    Seeding,
    WeightSource,
    dense_weight_field,
    seeding_field,
    weight_source_field,
)
from api.schemas.common import (
    TENANT_HELP,
    RequestBody,
)


class KnnRequest(BaseModel):
    """The collection's token memory (kNN-MT) for this generate; see decoder.knn."""

    model_config = ConfigDict(strict=True, populate_by_name=True, extra="forbid")

    enabled: bool = Field(True, description="false: the decoder alone.")
    k: int = Field(8, ge=1, le=1024, description="Memory tokens that vote at each step.")
    lambda_: float = Field(0.35, ge=0.0, le=1.0, alias="lambda",
                           description="The most weight the memory's votes get.")
    temperature: float = Field(10.0, gt=0.0, description="Softmax temperature over the "
                               "voters' squared distances.")
    reach: float = Field(400.0, gt=0.0, description="λ shrinks linearly to 0 as the nearest "
                         "key's squared distance reaches this (nothing close: no effect).")
    adaptive: bool = Field(True, description="false: λ whatever the distance.")
    return_votes: bool = Field(False, description="Say which memory tokens voted for each "
                               "output token, with their weights.")


class KnnVote(BaseModel):
    id: str = Field(description="The translation-memory pair the voting token comes from.")
    token: str
    weight: float


class KnnToken(BaseModel):
    token: str = Field(description="An output token (the last is </s>).")
    lambda_: float = Field(alias="lambda", description="The memory's weight at this step.")
    p_memory: float = Field(description="The memory's probability of this token.")
    votes: list[KnnVote]


class KnnOut(BaseModel):
    keys: int = Field(description="Tokens in the memory.")
    mean_lambda: float = Field(description="The memory's mean weight over the steps "
                               "searched (every hypothesis of every step).")
    tokens: list[KnnToken] | None = Field(None, description="With return_votes.")


Consistency = Literal["Strong", "Session", "Bounded", "Eventually"]


HitField = Literal["text", "value", "metadata", "vector", "passages"]


SearchMode = Literal["dense", "bm25", "hybrid"]


Fusion = Literal["convex", "rrf", "weighted"]


FILTER_HELP = (
    "{'key','op','value'} on a metadata key, or {'and': [...]}, {'or': [...]}. Ops: eq, ne, "
    "in, nin (a list), lt, lte, gt, gte (a number), exists (true/false: the key is there and "
    "not null), like (a prefix pattern: 'doc%'; write \\_ \\% \\\\ for a literal _ % \\). "
    "ne and nin also match documents without the key. Values are typed as JSON: 1 is not '1'.")


# search / attend / generate
class RerankOptions(RequestBody):
    top: int = Field(50, ge=1, description="How many of the first stage's best hits the "
                     "reranker reads (at least offset + top_k, at most QKV_MAX_TOP_K).")


class SearchRequest(RequestBody):
    # exactly one of `query` and `vector` (the other absent or null), stated in the schema
    model_config = ConfigDict(strict=True, json_schema_extra={"oneOf": [
        {"required": ["query"], "properties": {"query": {"type": "string"}}},
        {"required": ["vector"], "properties": {"vector": {"type": "array"}}}]})

    query: str | None = Field(None, min_length=1, description="Text to search for, or give "
                              "`vector`.")
    vector: list[float] | None = Field(None, description="A query vector of the "
                                       "collection's dim (instead of `query`).")
    top_k: int = Field(10, ge=1)
    offset: int = Field(0, ge=0, description="Skip this many of the best hits first (pages: "
                        "offset = page × top_k). Weights are over the returned hits.")
    score_threshold: float | None = Field(None, description="Return only hits that reach "
                                          "this: their `score` in dense mode (a cosine) and "
                                          "bm25 mode (a BM25 score); their `relevance` in "
                                          "hybrid mode (0 to 1; 0.5 is the threshold to use: "
                                          "see the search how-to).")
    filter: dict[str, Any] | None = Field(None, description=FILTER_HELP)
    fields: list[HitField] = Field(["text", "value", "metadata", "passages"],
                                   description="Which fields each hit carries besides id, "
                                   "score and weight (`passages`: in a collection with "
                                   "passages).")
    temperature: float | None = Field(None, gt=0, description="Softmax temperature of the "
                                      "hits' weights (default: the server's).")
    truncate: bool = True
    tenant: str | None = Field(None, description=TENANT_HELP)
    consistency: Consistency = "Session"
    mode: SearchMode | None = Field(None, description="Which neighbours: 'dense' (nearest "
                                    "vectors), 'bm25' (the query text's keywords, Milvus "
                                    "full-text search) or 'hybrid' (both rankings fused). "
                                    "Default: 'hybrid' on a collection created with hybrid "
                                    "and a text query, else 'dense'. bm25 and hybrid need "
                                    "`query` (422 with `vector`) and a hybrid collection "
                                    "(409).")
    fusion: Fusion = Field("convex", description="How hybrid fuses the two rankings (each "
                           "searched at least 100 deep): 'convex' (default) scores "
                           "w·(1 + cos)/(1 + max cos) + (1 − w)·bm25/max bm25, each side "
                           "normalised by its best hit; 'rrf' scores Σ 1/(60 + rank) over the "
                           "sides that found the hit; 'weighted' scores "
                           "w·(1 + cos)/2 + (1 − w)·(2/π)·atan(bm25). w = dense_weight.")
    dense_weight: float | None = Field(None, ge=0, le=1, description="w of the convex and "
                                       "weighted fusions. Default: the collection's (POST "
                                       ".../tune), else the encoder's (GET /v1/models).")
    rerank: RerankOptions | None = Field(None, description="Reorder the best `top` hits "
                                         "with the server's cross-encoder reranker "
                                         "(QKV_RERANKER; 409 without one), which reads the "
                                         "query and each hit's text together: a hit's "
                                         "`score` becomes the reranker's (a logit: compare "
                                         "hits of one query), `sources.rerank` too. "
                                         "`score_threshold` applies before, to the first "
                                         "stage's score or relevance. Needs `query`.")
    group_by_document: bool = Field(True, description="In a collection with passages: one "
                                    "hit per document, scored by its best passage, with its "
                                    "best passages (true), or one hit per passage (false). "
                                    "Hits carry `passages` either way (with `passages` in "
                                    "`fields`).")


class SearchBatchRequest(RequestBody):
    searches: list[SearchRequest] = Field(min_length=1, description="Searches of this one "
                                          "collection, each as POST .../search takes it; "
                                          "their texts are encoded together, and searches "
                                          "that differ only in the query go to the store "
                                          "as one.")


class PassageOut(BaseModel):
    index: int = Field(description="The passage's place in its document (0 first).")
    start: int = Field(description="Where it starts in the document's text (characters).")
    end: int = Field(description="Where it ends (exclusive).")
    score: float = Field(description="The passage's score in the ranking.")
    sources: dict[str, float] = Field(description="Its score on each side that found it.")
    text: str | None = Field(None, description="The passage's text (with `text` in fields).")


class HitOut(BaseModel):
    id: str
    score: float = Field(description="The ranking's score: the cosine in dense mode, the "
                         "BM25 score in bm25 mode, the fused score in hybrid mode, the "
                         "reranker's with `rerank`.")
    weight: float = Field(description="softmax(cosine / temperature) over the returned hits, "
                          "where cosine is the hit's dense similarity to the query (its "
                          "score in dense mode; in bm25 and hybrid modes computed from its "
                          "vector): the mode picks the neighbours, attention weighs them.")
    sources: dict[str, float] = Field(description="Each side that found the hit, 'dense' "
                                      "and/or 'bm25', with its score on that side; "
                                      "'rerank': the reranker's score.")
    relevance: float | None = Field(None, description="Hybrid mode: how good a match the "
                                    "hit is, 0 to 1 (unlike `score`, which puts every "
                                    "query's best hit near 1): how far its cosine stands "
                                    "above the query's 100th best and how many of the "
                                    "query's words it has, held below 0.5 for a query whose "
                                    "words the collection has only apart and that the "
                                    "encoder pools evenly (unrelated words), on scales "
                                    "fitted per encoder; `score_threshold` applies to it.")
    text: str | None = None
    value: str | None = None
    metadata: dict[str, Any] | None = None
    vector: list[float] | None = None
    passages: list[PassageOut] | None = Field(None, description="In a collection with "
                                              "passages: the hit's best passages, best first "
                                              "(its `text` is the best one's; GET the "
                                              "document for all of it).")


class SideConfidence(BaseModel):
    """How sure each side of a hybrid search was of this query (what moved its weight)."""

    dense: float = Field(description="How far the dense list's best cosine stands above "
                         "what a document it did not return gets (its last cosine at the "
                         "search depth).")
    bm25: float = Field(description="1 − BM25's last score over its best at the search depth "
                        "(1 when the query matched fewer documents than that: a rare term).")


class SearchResponse(BaseModel):
    hits: list[HitOut]
    temperature: float
    truncated: bool
    mode: SearchMode = Field(description="The mode that ran.")
    dense_weight: float | None = dense_weight_field()
    weight_source: WeightSource | None = weight_source_field()
    query_weight: float | None = Field(None, description="In hybrid mode: the dense weight "
                                       "this query was fused with. Convex fusion moves "
                                       "`dense_weight` towards the side that is surer of "
                                       "the query: w·c_dense / (w·c_dense + (1 − w)·c_bm25), "
                                       "c from `confidence`; weighted fusion uses it as it "
                                       "is; rrf has none. Absent when neither side found "
                                       "anything.")
    confidence: SideConfidence | None = Field(None, description="In hybrid mode with convex "
                                              "fusion: each side's confidence for this "
                                              "query, from its own list.")
    seeding: Seeding | None = seeding_field()


class SearchBatchResponse(BaseModel):
    results: list[SearchResponse] = Field(description="One per search, in order.")


class AttendResponse(BaseModel):
    neighbours: list[HitOut]
    weights: list[float] = Field(description="The neighbours' weights; they sum to 1.")
    output: list[float] = Field(description="Σ weightᵢ · vectorᵢ over the neighbours.")
    temperature: float
    truncated: bool
    mode: SearchMode = Field(description="The mode that ran.")
    seeding: Seeding | None = seeding_field()


class GenerateRequest(RequestBody):
    query: str = Field(min_length=1)
    top_k: int = Field(4, ge=0)
    filter: dict[str, Any] | None = Field(None, description=FILTER_HELP)
    temperature: float | None = Field(None, gt=0)
    tenant: str | None = Field(None, description=TENANT_HELP)
    beam: int = Field(4, ge=1, le=16)
    max_tokens: int | None = Field(None, ge=1)
    return_attention: bool = False
    knn: KnnRequest | None = Field(None, description="Token memory options; left out, a "
                                   "collection with a token memory uses it with the defaults.")


class AttentionMap(BaseModel):
    tokens: list[str] = Field(description="The generated tokens (rows).")
    memory_tokens: list[str] = Field(description="Source and neighbour tokens (columns).")
    memory_segments: list[int] = Field(description="-1 for the query, i for neighbour i.")
    weights: list[list[float]]


class GenerateResponse(BaseModel):
    text: str
    neighbours: list[HitOut]
    weights: list[float]
    attention: AttentionMap | None = None
    knn: KnnOut | None = Field(None, description="Present when a token memory was used.")
    seeding: Seeding | None = seeding_field()
