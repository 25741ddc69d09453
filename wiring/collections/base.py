"""The ground of :class:`wiring.collections.Collections`: the parts it is built from and
what a collection is made of (the encoder that made it, its decoder and token memory,
hybrid's weight for it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from index import CollectionInfo, EncoderInfo, VectorStore
from index.hybrid.relevance import Relevance
from wiring.adapter import Adapter
from wiring.calibrator import Calibrator
from wiring.collections.requests import Async, Limits
from wiring.encoders import Encoders, Served
from wiring.errors import ConflictError


class Base:
    """What every part of :class:`wiring.collections.Collections` stands on: the parts it
    is built from, and what a collection is made of (its encoder, decoder, token memory)."""

    def __init__(self, store: VectorStore, encoders: Encoders, embed: Async, call: Async,
                 run: Async, calibrator: Calibrator, adapter: Adapter, decoders: dict[str, Any],
                 token_memories: dict[str, Any], writable: Callable[[], None],
                 default_weight: float, limits: Limits, rerank: Async | None = None,
                 aside: Async | None = None) -> None:
        """``embed(texts, truncate, dim=, model=)`` returns the vectors, token counts and
        cut flags of ``texts`` by the encoder ``model`` (:class:`Served`); ``call`` runs a
        store call off the event loop (and counts its failures), ``run`` CPU work;
        ``writable()`` raises while writes must be refused; ``rerank(query, texts)`` scores
        texts for a query with the server's reranker (a conflict without one);
        ``aside(texts, fn, *args)`` runs other encoder work on ``texts`` (a query's pooling)
        in its turn with the batches (default: ``run``, uncharged)."""
        self.store, self.encoders, self.embed = store, encoders, embed
        self.call, self.run, self.calibrator, self.adapter = call, run, calibrator, adapter
        self.decoders, self.token_memories = decoders, token_memories
        self.writable, self.default_weight, self.limits = writable, default_weight, limits
        self.rerank = rerank
        self.aside: Async = aside or (lambda texts, fn, *args: run(fn, *args))
        self._relevance: dict[Path, Relevance] = {}  # each encoder's, by its directory

    # what a collection is made of
    async def describe(self, name: str) -> CollectionInfo:
        """The collection ``name`` is (an alias's target); ``CollectionNotFoundError``. From
        the store's memory where it holds it fresh (``described``), else on a thread: the
        hop was a tenth of a millisecond on every search."""
        info = self.store.described(name)
        if info is None:
            info = await self.call(self.store.describe, name)
        return info

    def encoder_of(self, info: CollectionInfo) -> Served:
        """The encoder that made collection ``info``; a conflict when this server lacks it."""
        return self.encoders.of(info)

    def info_for(self, dim: int, model: Served | None = None) -> EncoderInfo:
        """An encoder (the default when None) as a collection of ``dim`` records it: its
        vectors cut to ``dim`` (a Matryoshka size) are another space than the full ones."""
        info = (model or self.encoders.default).info
        return info if dim == info.dim else EncoderInfo(info.name, info.fingerprint, dim)

    def hybrid_weight(self, info: CollectionInfo, requested: float | None
                      ) -> tuple[float, str]:
        """Hybrid's dense weight for a search of ``info``, and where it came from: the
        request's, else the collection's calibration, else the encoder's default."""
        if requested is not None:
            return requested, "request"
        cal = info.calibration
        if cal is not None and "dense_weight" in cal:
            source = "encoder default" if cal.get("source") == "encoder default" else "collection"
            return float(cal["dense_weight"]), source
        return self.default_weight, "encoder default"

    def decoder_for(self, collection: str, *names: str) -> Any:
        """The decoder configured for ``collection``, or for another name of it (the
        alias the request used, or the collection an alias points at)."""
        dec = next((self.decoders[n] for n in (collection, *names) if n in self.decoders), None)
        if dec is None:
            configured = ", ".join(sorted(self.decoders)) or "none"
            raise ConflictError(
                f"collection {collection!r} has no decoder (collections with one: "
                f"{configured}); configure one with QKV_DECODERS='{{\"{collection}\": "
                "\"models/DECODER\"}'")
        return dec

    def token_memory_for(self, collection: str, *names: str) -> Any:
        """The token memory configured for ``collection`` (or another name of it), or None."""
        return next((self.token_memories[n] for n in (collection, *names)
                     if n in self.token_memories), None)
