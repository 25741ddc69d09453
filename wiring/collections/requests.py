"""What callers ask the collections for and get back: a search, its neighbours and the
query-key-value view of them, a generate and its answer, a document to write (and vectors a
writer already has), and the limits of one request."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decoder.knn import KnnOptions
from index import EncoderInfo, Filter, Hit, Mix
from index.hybrid.fusion import DEFAULT_FUSION

Async = Callable[..., Coroutine[Any, Any, Any]]


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (the server's settings)."""

    max_top_k: int = 1000
    max_offset: int = 10_000
    max_documents: int = 1000
    max_searches: int = 64
    max_generate_tokens: int = 128
    default_temperature: float = 0.05


@dataclass(frozen=True)
class Search:
    """One search: a text ``query`` or a ``vector``, how many hits (``top_k`` after
    ``offset``), and how (``mode``, ``fusion``, ``dense_weight``; None: the collection's)."""

    query: str | None = None
    vector: Sequence[float] | None = None
    top_k: int = 10
    offset: int = 0
    filter: dict[str, Any] | None = None
    mode: str | None = None
    fusion: str = DEFAULT_FUSION
    dense_weight: float | None = None
    consistency: str = "Session"
    score_threshold: float | None = None
    truncate: bool = True
    tenant: str | None = None
    group_by_document: bool = True  # a collection with passages: documents (else passages)
    rerank: int | None = None  # the first this many hits reordered by the reranker


@dataclass
class Neighbours:
    """One query's hits, the query vector, the mode that ran and whether the text was cut."""

    hits: list[Hit]
    xq: np.ndarray
    mode: str
    truncated: bool
    weight: tuple[float, str] | None = None  # hybrid's w and where it came from
    mix: Mix | None = None  # hybrid: the weight this query was fused with, and why

    def cosines(self) -> np.ndarray:
        """Each hit's dense similarity to the query: its score in dense mode, else q·key
        (bm25 and hybrid searches fetch the vectors for it)."""
        if self.mode == "dense":
            return np.array([h.score for h in self.hits], np.float32)
        keys = [h.vector for h in self.hits if h.vector is not None]
        assert len(keys) == len(self.hits), "bm25/hybrid searches fetch the vectors"
        return (np.stack(keys) @ self.xq if keys else np.zeros(0)).astype(np.float32)


@dataclass
class Attended:
    """The query-key-value view: the neighbours, their weights and the output Σ wᵢ vᵢ."""

    neighbours: Neighbours
    weights: np.ndarray
    output: np.ndarray
    temperature: float


@dataclass(frozen=True)
class KnnAsk:
    """A generate's word on the token memory: off (``enabled`` false), or these options."""

    enabled: bool = True
    options: KnnOptions = field(default_factory=KnnOptions)
    return_votes: bool = False


@dataclass(frozen=True)
class Generation:
    """A generate: retrieve ``top_k`` dense neighbours of ``query``, weight them at
    ``temperature``, decode (``beam``, ``max_tokens``); ``knn`` None uses the collection's
    token memory with its defaults when it has one."""

    query: str
    top_k: int = 4
    filter: dict[str, Any] | None = None
    temperature: float | None = None
    beam: int = 4
    max_tokens: int | None = None
    return_attention: bool = False
    knn: KnnAsk | None = None
    tenant: str | None = None


@dataclass
class Generated:
    text: str
    hits: list[Hit]
    weights: np.ndarray
    attention: dict[str, Any] | None
    knn: dict[str, Any] | None


@dataclass
class Document:
    """A document to write: the caller's id, its text, the value a decoder reads."""

    id: str
    text: str
    value: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    """One checked search: its filter, the mode to run and how deep to search."""

    search: Search
    filter: Filter | None
    mode: str
    depth: int


@dataclass(frozen=True)
class Given:
    """Vectors a writer already has for its documents (the demo corpus' shipped ones), and
    the encoder that made them: used when that encoder made the collection, else the texts
    are embedded as without them."""

    encoder: EncoderInfo
    vectors: np.ndarray
