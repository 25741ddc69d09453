"""Request and response bodies. Field limits that depend on settings (batch sizes, top_k)
are checked in the routes, with the status the contract gives them (413, 422), and written
into the OpenAPI document by ``api.app``.

Request bodies are validated strictly: a JSON type other than the declared one is a 422,
not coerced (``"normalize": 0`` is not ``false``, ``"top_k": "5"`` is not 5), so the
server accepts exactly what its OpenAPI document describes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from api import tune_schemas as ts
from api.demo_schemas import Seeding, seeding_field
from api.knn_schemas import KnnOut, KnnRequest
from index import collection_name

Consistency = Literal["Strong", "Session", "Bounded", "Eventually"]
HitField = Literal["text", "value", "metadata", "vector"]
SearchMode = Literal["dense", "bm25", "hybrid"]
Fusion = Literal["convex", "rrf", "weighted"]
Texts = Annotated[list[str], Field(min_length=1)]
# A collection's name as callers write it; '-' is stored as '_'. index.collection_name
# checks and maps it (with a clearer message than a failed pattern); the pattern documents it.
COLLECTION_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
COLLECTION_NAME_HELP = ("Collection name: a letter or '_', then letters, digits, '_' or '-'. "
                        "'-' is stored as '_': `tm-en-fr` and `tm_en_fr` are one collection, "
                        "and responses show the stored name.")


FILTER_HELP = (
    "{'key','op','value'} on a metadata key, or {'and': [...]}, {'or': [...]}. Ops: eq, ne, "
    "in, nin (a list), lt, lte, gt, gte (a number), exists (true/false: the key is there and "
    "not null), like (a prefix pattern: 'doc%'; write \\_ \\% \\\\ for a literal _ % \\). "
    "ne and nin also match documents without the key. Values are typed as JSON: 1 is not '1'.")


class RequestBody(BaseModel):
    """A request body: JSON types as declared, nothing coerced."""

    model_config = ConfigDict(strict=True)


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


# embeddings (TEI)
class TeiEmbedRequest(RequestBody):
    inputs: str | Texts
    truncate: bool = False
    normalize: bool = True
    truncation_direction: Literal["Right", "right"] = "Right"


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


class EncoderOut(BaseModel):
    name: str
    fingerprint: str
    dim: int


class CollectionOut(BaseModel):
    name: str
    dim: int
    encoder: EncoderOut | None
    count: int | None = Field(None, description="Exact number of documents (only on GET of "
                              "one collection).")
    decoder: str | None = Field(None, description="The decoder generate uses, if any.")
    hybrid: bool = Field(False, description="Whether the collection has a BM25 index (search "
                         "modes bm25 and hybrid).")
    aliases: list[str] = Field(default_factory=list, description="Aliases pointing at it.")
    multi_tenant: bool = False
    calibration: ts.CalibrationOut | None = ts.calibration_field()
    tuning: ts.TuneState | None = ts.tuning_field()
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


class Deleted(BaseModel):
    deleted: str


# documents
class Document(RequestBody):
    model_config = ConfigDict(strict=True, extra="forbid")
    id: str = Field(min_length=1, max_length=512)
    text: str = Field(min_length=1)
    value: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


TENANT_HELP = ("The tenant, in a multi-tenant collection (or send the X-Tenant header); "
               "refused on other collections.")


class DocumentsUpsert(RequestBody):
    documents: list[Document] = Field(min_length=1)
    tenant: str | None = Field(None, description=TENANT_HELP)
    truncate: bool = Field(True, description="Cut texts over the token limit (listed in "
                           "`truncated`); false answers 422 instead.")


class UpsertResult(BaseModel):
    upserted: int
    truncated: list[str] = Field(description="Ids whose text was cut to the token limit.")


class DocumentsDelete(RequestBody):
    ids: list[str] = Field(min_length=1)
    tenant: str | None = Field(None, description=TENANT_HELP)


class DeleteResult(BaseModel):
    deleted: int = Field(description="Number of ids asked to delete (absent ids are no-ops).")


class DocumentOut(BaseModel):
    id: str
    text: str
    value: str | None
    metadata: dict[str, Any]
    vector: list[float] | None = None


# search / attend / generate
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
    score_threshold: float | None = Field(None, description="Return only hits whose `score` "
                                          "is at least this (a cosine in dense mode, a BM25 "
                                          "score in bm25 mode, the fused score in hybrid).")
    filter: dict[str, Any] | None = Field(None, description=FILTER_HELP)
    fields: list[HitField] = Field(["text", "value", "metadata"], description="Which fields "
                                   "each hit carries besides id, score and weight.")
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


class SearchBatchRequest(RequestBody):
    searches: list[SearchRequest] = Field(min_length=1, description="Searches of this one "
                                          "collection, each as POST .../search takes it; "
                                          "their texts are encoded together, and searches "
                                          "that differ only in the query go to the store "
                                          "as one.")


class HitOut(BaseModel):
    id: str
    score: float = Field(description="The ranking's score: the cosine in dense mode, the "
                         "BM25 score in bm25 mode, the fused score in hybrid mode.")
    weight: float = Field(description="softmax(cosine / temperature) over the returned hits, "
                          "where cosine is the hit's dense similarity to the query (its "
                          "score in dense mode; in bm25 and hybrid modes computed from its "
                          "vector): the mode picks the neighbours, attention weighs them.")
    sources: dict[str, float] = Field(description="Each side that found the hit, 'dense' "
                                      "and/or 'bm25', with its score on that side.")
    text: str | None = None
    value: str | None = None
    metadata: dict[str, Any] | None = None
    vector: list[float] | None = None


class SearchResponse(BaseModel):
    hits: list[HitOut]
    temperature: float
    truncated: bool
    mode: SearchMode = Field(description="The mode that ran.")
    dense_weight: float | None = ts.dense_weight_field()
    weight_source: ts.WeightSource | None = ts.weight_source_field()
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


class Health(BaseModel):
    status: str
    detail: str | None = None
    seeding: list[Seeding] | None = Field(
        None, description="The demo collections of this start and how far their filling is.")
