"""Service settings, read from ``QKV_*`` environment variables (pydantic-settings).

Every field here is one variable: ``store`` is ``QKV_STORE``, ``api_key`` is
``QKV_API_KEY``, and so on. ``decoders`` gives collections a decoder for ``generate``, as
JSON or as ``NAME=DIR`` pairs separated by commas: ``QKV_DECODERS='{"tm-en-fr":
"models/decoder-en-fr"}'`` and ``QKV_DECODERS=tm-en-fr=models/decoder-en-fr`` say the same.

Collection names are checked here and mapped to their stored names (``-`` becomes ``_``,
:func:`index.collection_name`) where they are used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from index import collection_name


def decoder_entry(text: str, what: str = "a decoder is COLLECTION=CHECKPOINT_DIR"
                  ) -> tuple[str, Path]:
    """``NAME=DIR`` -> (collection name, decoder checkpoint); ``ValueError`` otherwise."""
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise ValueError(f"{what}, got {text!r}")
    return name.strip(), Path(path.strip())


def parse_decoders(text: str, what: str = "QKV_DECODERS") -> dict[str, Any]:
    """``QKV_DECODERS``: a JSON object, or ``NAME=DIR[,NAME=DIR...]`` (a form that also fits
    in a docker-compose ``${VAR:-default}``, which cannot hold braces); empty is none."""
    text = text.strip()
    if text.startswith("{"):
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(f"{what} must be a JSON object")
        return value
    return dict(decoder_entry(part, f"{what} entries are COLLECTION=DIR")
                for part in text.split(",") if part.strip())


def backup_dir(settings: Settings) -> Path | str:
    """Where the HTTP backups go: ``QKV_BACKUP_DIR`` (a directory, or an ``s3://`` URL),
    else ``backups/`` beside a local store, else ``var/backups``."""
    if settings.backup_dir is not None:
        got = settings.backup_dir
        return got if got.startswith("s3://") else Path(got)
    return encoders_dir(settings.model_copy(update={"encoders_dir": None})).parent / "backups"


def encoders_dir(settings: Settings) -> Path:
    """Where derived encoders live: ``QKV_ENCODERS_DIR``, else ``encoders/`` beside a local
    store (a Lite file's or a FAISS directory's parent), else ``var/encoders``."""
    if settings.encoders_dir is not None:
        return settings.encoders_dir
    store = settings.store
    if store.startswith(("faiss://", "faiss+hnsw://")):
        return Path(store.split("://", 1)[1]).expanduser().parent / "encoders"
    if "://" in store:
        return Path("var/encoders")
    return Path(store).expanduser().parent / "encoders"


class Runtime(BaseSettings):
    """The settings a whole process runs with, the service or any ``qkv`` command: where
    the encoder runs and at what precision, and Milvus Lite's search paths. Read once at
    the process's edge and handed down (:meth:`use`): nothing below reads them from the
    environment."""

    model_config = SettingsConfigDict(env_prefix="QKV_", extra="ignore")

    device: str | None = Field(None, description="cpu, cuda, cuda:1 ... (default: auto).")
    encoder_backend: Literal["torch", "onnx"] | None = Field(
        None, description="torch, or onnx: the encoder's int8 ONNX Runtime graph, 1.1-1.6 x "
        "torch's speed on the CPUs timed so far, vectors within cosine 0.999 of fp32. Default "
        "(or empty): on a CPU, whichever of the two a self-timing at start finds faster "
        "(about 2 s, cached per CPU, threads and encoder in the encoders directory; GET "
        "/v1/models says which and why); torch on CUDA.")
    no_bf16: bool = Field(False, description="Run torch in fp32 even where bf16 is native "
                          "(CUDA, CPUs with AVX-512 BF16 or AMX): exact comparisons.")
    onnx_activations: Literal["static", "token"] = Field(
        "static", description="The onnx backend's activation ranges: static (calibrated "
        "once, the default) or token (a range per token).")
    lite_fast_search: bool = Field(True, description="Milvus Lite's searches on qkv's paths "
                                   "(no rescan of the collection per search), its writes "
                                   "without per-value Python loops, and a Lite file's "
                                   "searches and upserts called in this process without the "
                                   "gRPC loopback; false keeps Lite's own, for comparison.")

    graph_cache: str | None = Field(
        "~/.cache/qkv/graphs",
        description="Where the onnx backend keeps the encoder graphs it built (about 19 MB "
        "each, the 8 last used), so that the next process loading the same encoder skips "
        "about 2 s of building; empty: build them every time.")

    @field_validator("encoder_backend", "graph_cache", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    def use(self) -> None:
        """Hand these to the rooms that use them (:func:`wiring.runtime.use`)."""
        from wiring import runtime

        runtime.use(self.device, self.encoder_backend, self.no_bf16, self.onnx_activations,
                    self.lite_fast_search, self.graph_cache)


class Settings(Runtime):
    model_config = SettingsConfigDict(env_prefix="QKV_", extra="ignore")

    # where things are
    store: str = Field("var/qkv.db", description="Milvus Lite file, http://host:port, or "
                       "faiss://DIR.")
    milvus_token: str = Field("", description="Milvus token (user:password or API key).")
    store_timeout_s: float = Field(10.0, gt=0, description="Timeout of each store call.")
    search_ef: int | None = Field(None, ge=16, le=2048, description=(
        "How wide an HNSW index is searched (Milvus' `ef`, on a server or in Lite; "
        "`efSearch` of a `faiss+hnsw://` store), at least the hits asked for (a hybrid "
        "search asks 100 a side): higher finds more of the exact nearest neighbours, more "
        "slowly. Default: 64 in Lite, 128 on a server and in `faiss+hnsw://`. On a Milvus "
        "2.3.5 server at 100,000 documents (its HNSW built with M 32), recall@10 0.979 at "
        "64, 0.9925 at 128 and 0.999 at 256, p50 4.1, 4.6 and 5.5 ms (`bench/server_hnsw.py`,"
        " Intel Xeon); in Lite at 522,000 documents (graphs of M 16), 0.973 at 64 and 0.986 "
        "at 128, the store's search p50 4.5 and 8.6 ms (throwaway scripts, Intel Xeon); "
        "with Lite's graphs of M 20, efConstruction 100 (since 7eb8dcf), 0.966 at 64, "
        "and over bf16 vectors (since 5b00a4e), 0.962 (`bench/scale.py`, Intel Xeon)."))
    model: Path = Field(Path("models/encoder-default"), description="Encoder checkpoint.")
    reranker: Path | None = Field(
        None, description="A cross-encoder reranker checkpoint (`qkv train-reranker`): a "
        "search's `rerank` and TEI's `/rerank` score query and passage read together with "
        "it. None: no reranker (a search asking for `rerank` is a 409; `/rerank` scores with "
        "the encoder's cosine).")
    decoders: Annotated[dict[str, Path], NoDecode] = Field(
        default_factory=dict, description="Collection name -> decoder checkpoint, as JSON "
        "or NAME=DIR[,NAME=DIR...].")
    token_memories: Annotated[dict[str, Path], NoDecode] = Field(
        default_factory=dict, description="Collection name -> token memory directory (kNN-MT, "
        "`qkv build-token-memory`), as JSON or NAME=DIR[,...]; the collection's decoder must "
        "be the one that built it.")
    encoders_dir: Path | None = Field(
        None, description="Derived encoders (qkv adapt writes them here), served beside "
        "`model` to the collections they made; default encoders/ beside a local store, else "
        "var/encoders.")
    backup_dir: str | None = Field(
        None, description="Where `POST /v1/backups` writes backups and restores read them "
        "(one directory each, by name): a directory, or s3://BUCKET/PREFIX (MinIO or any S3 "
        "API: `s3_endpoint`, credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); "
        "default backups/ beside a local store, else var/backups.")
    s3_endpoint: str | None = Field(
        None, description="The S3 endpoint of an s3:// `backup_dir` (http(s)://host:port; "
        "none: AWS S3), the one `qkv index --bulk-dir` and `qkv backup --to` read too.")
    encoders_loaded: int = Field(3, ge=1, description="Encoders kept loaded at once, the "
                                 "default included (least recently used unloaded first).")
    encoder_threads: int | None = Field(None, ge=1, description="CPU threads of the encoder "
                                        "(default: all the cores).")
    encoder_spin: bool = Field(False, description="Let the onnx encoder's threads spin-wait "
                               "between operators. Off by default: the event loop shares the "
                               "cores with them, and on 2 cores /v1/embeddings served 1.2-1.4 x "
                               "more requests with it off.")

    # security
    api_key: str | None = Field(None, description="One admin key (with or without a keys "
                                "file): every /v1, TEI and web route then needs "
                                "'Authorization: Bearer <key>' (/health, /ready and /metrics "
                                "stay open).")
    keys_file: Path | None = Field(None, description="API keys (qkv keys create), re-read "
                                   "when changed; default keys.jsonl beside a local store.")
    keys_empty_opens: bool = Field(False, description="Let a keys file that goes missing or "
                                   "empty while the service runs open it (no keys). Off: "
                                   "the keys last read stay in force, and it is logged.")

    # limits
    max_body_bytes: int = Field(16 * 2**20, ge=1024, description="Largest request body (413): "
                                "room for one document of 10 MB of text, the most a "
                                "collection with passages takes.")
    disk_flood_mb: float = Field(256, ge=0, description="Writes are refused (507) while the "
                                 "store's data directory (Milvus Lite, FAISS) has less free "
                                 "space than this; a Lite merge needs up to ~200 MB.")
    max_inputs: int = Field(2048, ge=1, description="Texts per embedding request (413); "
                            "OpenAI's limit. They are queued for the encoder 256 at a time.")
    max_documents: int = Field(1000, ge=1, description="Documents per upsert request (413).")
    max_top_k: int = Field(100, ge=1, description="Largest top_k (422 above).")
    max_offset: int = Field(1000, ge=0, description="Largest search offset (422 above).")
    max_searches: int = Field(64, ge=1, description="Searches per batch request (413).")
    max_generate_tokens: int = Field(256, ge=1, description="Largest max_tokens of generate.")
    default_temperature: float = Field(0.05, gt=0, description="Softmax temperature of "
                                       "search weights and attend when a request gives none.")

    # hybrid calibration (index.hybrid.calibration, wiring.calibrator)
    auto_tune: bool = Field(True, description="Calibrate an API-written hybrid collection's "
                            "hybrid search in the background once it holds "
                            "`auto_tune_min_docs` documents, and again each time it has "
                            "doubled (a weight set by hand or chosen on labels is kept).")
    auto_tune_min_docs: int = Field(1000, ge=1, description="Documents a collection holds "
                                    "before it is first calibrated by itself.")

    lean_embeddings: bool = Field(True, description="Answer a valid `POST /v1/embeddings` "
                                  "(and TEI's `/embed` and `/`, and a collection's `/search`) "
                                  "past FastAPI's routing and body machinery (same checks, "
                                  "answer and errors; api.lean); false: through the routes "
                                  "alone.")

    # dynamic batching
    batch_max_size: int = Field(64, ge=1, description="Texts per encoder batch; 1 turns "
                                "dynamic batching off.")
    batch_max_tokens: int = Field(8192, ge=1, description="Padded tokens per encoder batch.")
    batch_max_wait_ms: float = Field(0.0, ge=0, description="How long the first text of a "
                                     "batch waits for company, when other requests are "
                                     "under way (a request alone goes at once); 0: batches "
                                     "fill with what queued while the encoder ran.")
    queue_max: int = Field(2048, ge=1, description="Texts waiting for the encoder before "
                           "requests get 429.")
    batch_workers: int = Field(0, ge=0, description="Batches encoded side by side, each on "
                               "its own thread; 0: one per encoder CPU thread with the onnx "
                               "backend on a CPU (each batch then runs on one core: "
                               "/v1/embeddings served 798-843 against 697-722 requests/s "
                               "with one batch on both cores of 2), else 1.")

    # first start
    demo_corpus: Path | None = Field(None, description="JSONL of demo documents loaded into "
                                     "collection `demo_collection` when it does not exist.")
    demo_collection: str = Field("docs", description="Name of the demo collection.")
    demo_tm: Path | None = Field(None, description="JSONL of translation pairs (text: source, "
                                 "value: target) loaded into collection `demo_tm_collection` "
                                 "when it does not exist.")
    demo_tm_collection: str = Field("tm-en-fr", description="Name of the demo translation "
                                    "memory (give it a decoder in `decoders`).")
    demo_token_memory: Path | None = Field(
        None, description="Directory of the demo translation memory's token memory (kNN-MT): "
        "read when built before, else built from the filled collection in the background "
        "(resumable) and used by generate once built. Ignored when `token_memories` names one.")

    @field_validator("decoders", mode="before")
    @classmethod
    def _decoders_from_text(cls, value: Any) -> Any:
        return parse_decoders(value) if isinstance(value, str) else value

    @field_validator("token_memories", mode="before")
    @classmethod
    def _memories_from_text(cls, value: Any) -> Any:
        return parse_decoders(value, "QKV_TOKEN_MEMORIES") if isinstance(value, str) else value

    @field_validator("decoders")
    @classmethod
    def _decoder_collections(cls, value: dict[str, Path]) -> dict[str, Path]:
        seen: dict[str, str] = {}
        for name in value:
            stored = collection_name(name)
            if stored in seen:
                raise ValueError(f"decoders {seen[stored]!r} and {name!r} are for the same "
                                 f"collection {stored!r}")
            seen[stored] = name
        return value

    @field_validator("demo_token_memory", "encoders_dir", "backup_dir", "s3_endpoint",
                     mode="before")
    @classmethod
    def _no_token_memory(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("backup_dir", mode="before")
    @classmethod
    def _backup_dir(cls, value: Any) -> Any:
        return str(value) if isinstance(value, Path) else value  # a directory or s3:// URL

    @field_validator("demo_collection", "demo_tm_collection")
    @classmethod
    def _collection(cls, value: str) -> str:
        collection_name(value)  # checked here; mapped to the stored name where it is used
        return value
