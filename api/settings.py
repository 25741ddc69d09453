"""Service settings, read from ``QKV_*`` environment variables (pydantic-settings).

Every field here is one variable: ``store`` is ``QKV_STORE``, ``api_key`` is
``QKV_API_KEY``, and so on. ``decoders`` is JSON: ``QKV_DECODERS='{"tm-en-fr":
"models/decoder-en-fr"}'`` gives collection ``tm-en-fr`` that decoder for ``generate``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="QKV_", extra="ignore")

    # where things are
    store: str = Field("var/qkv.db", description="Milvus Lite file, http://host:port, or "
                       "faiss://DIR.")
    milvus_token: str = Field("", description="Milvus token (user:password or API key).")
    store_timeout_s: float = Field(10.0, gt=0, description="Timeout of each store call.")
    model: Path = Field(Path("models/encoder-default"), description="Encoder checkpoint.")
    decoders: dict[str, Path] = Field(default_factory=dict,
                                      description="Collection name -> decoder checkpoint.")
    device: str | None = Field(None, description="cpu, cuda, cuda:1 ... (default: auto).")
    encoder_threads: int | None = Field(None, ge=1, description="CPU threads of the encoder "
                                        "(default: half the cores, at least 1: the other half "
                                        "serves HTTP).")

    # security
    api_key: str | None = Field(None, description="When set, /v1/*, /embed and writes need "
                                "'Authorization: Bearer <key>'.")

    # limits
    max_body_bytes: int = Field(8 * 2**20, ge=1024, description="Largest request body (413).")
    max_inputs: int = Field(256, ge=1, description="Texts per embedding request (413).")
    max_documents: int = Field(1000, ge=1, description="Documents per upsert request (413).")
    max_top_k: int = Field(100, ge=1, description="Largest top_k (422 above).")
    max_generate_tokens: int = Field(256, ge=1, description="Largest max_tokens of generate.")
    default_temperature: float = Field(0.05, gt=0, description="Softmax temperature of "
                                       "search weights and attend when a request gives none.")

    # dynamic batching
    batch_max_size: int = Field(64, ge=1, description="Texts per encoder batch; 1 turns "
                                "dynamic batching off.")
    batch_max_tokens: int = Field(8192, ge=1, description="Padded tokens per encoder batch.")
    batch_max_wait_ms: float = Field(2.0, ge=0, description="How long the first text of a "
                                     "batch waits for company.")
    queue_max: int = Field(2048, ge=1, description="Texts waiting for the encoder before "
                           "requests get 429.")

    # first start
    demo_corpus: Path | None = Field(None, description="JSONL of demo documents loaded into "
                                     "collection `demo_collection` when it does not exist.")
    demo_collection: str = Field("docs", description="Name of the demo collection.")
