"""The server's parts: one :class:`Service` loads the components (the encoder, the store,
the decoders: :mod:`wiring.components`) from the settings, makes the dynamic batchers and
the encoder registry, queues texts for an encoder (charging the caller's key), runs store
and decoding work off the event loop and counts store errors, and hands all of it to the
wiring's :class:`wiring.collections.Collections`, which the routes call for searches and
writes."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from starlette.concurrency import run_in_threadpool

from api.access import Limiter, charge_texts
from api.batcher import DynamicBatcher, TextTooLongError
from api.disk import DiskGuard, data_dir
from api.errors import invalid
from api.metrics import Metrics
from api.settings import Settings, backup_dir, encoders_dir
from encoder.backend_pick import Choice
from index import CollectionInfo, StoreError, StoreUnavailableError
from index.hybrid.calibration import model_mapping
from index.hybrid.fusion import model_dense_weight
from wiring import memory
from wiring.adapter import Adapter
from wiring.backup_remote import BackupBucket
from wiring.backups import Backups
from wiring.calibrator import Calibrator
from wiring.collections import Collections, Limits
from wiring.components import encoder_info, load_components, load_encoder, load_reranker
from wiring.demo import Seeding
from wiring.encoders import Encoders, Served, read_card
from wiring.errors import ConflictError

log = logging.getLogger(__name__)
T = TypeVar("T")
EMBED_CHUNK = 256  # texts of one request in the encoder's queue at a time


@dataclass
class Embedded:
    """Vectors of a request's texts, their token counts and which were cut."""

    vectors: np.ndarray
    tokens: list[int]
    truncated: list[bool]


def pick_encoder_backend(encoder: Any, settings: Settings) -> Choice:
    """The encoder's backend: as set (``QKV_ENCODER_BACKEND``), torch on a GPU, else the
    fastest on this CPU by a self-timing cached under the encoders directory
    (:mod:`encoder.backend_pick`)."""
    from encoder.backend_pick import choose
    from encoder.cpu import cpu_model

    if settings.encoder_backend is not None:
        return Choice(encoder.backend, f"{encoder.backend}: set by QKV_ENCODER_BACKEND",
                      cpu=cpu_model())
    if encoder.device.type != "cpu":
        return Choice(encoder.backend, f"{encoder.backend} on {encoder.device.type}, with "
                      "bf16 autocast")
    threads = settings.encoder_threads or os.cpu_count() or 1
    return choose(encoder, encoders_dir(settings) / "backend-choice.json", threads)


class Service:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings, self.metrics = settings, metrics
        self.limiter = Limiter()  # per API key (api.access)
        settings.use()  # the process's device, precision and search paths (api.settings.Runtime)
        memory.cap_arenas()  # before the batcher and ONNX Runtime threads start (wiring.memory)
        # On the CPU the encoder's threads share the cores with the event loop (HTTP, JSON,
        # tokenizing). Driven by wrk (a C client that costs next to nothing), all the cores
        # served more than half of them: 310 against 234 requests/s on 2 cores here
        # (bench/api_load.py's sentences, 32 connections; bench/history/ has the run).
        self.parts = load_components(
            settings.model, settings.store, token=settings.milvus_token,
            timeout=settings.store_timeout_s, ef=settings.search_ef, device=settings.device,
            cpu_threads=settings.encoder_threads or os.cpu_count() or 1,
            backend=settings.encoder_backend, decoders=settings.decoders,
            token_memories=settings.token_memories)
        self.encoder, self.info, self.store = self.parts.encoder, self.parts.info, self.parts.store
        self.encoder.set_spin(settings.encoder_spin)  # sleep between operators: see Settings
        # timed as it will serve (spin set first); says why in /v1/models
        self.backend = pick_encoder_backend(self.encoder, settings)
        self.decoders, self.decoder_paths = self.parts.decoders, self.parts.decoder_paths
        self.model_created = int(settings.model.joinpath("model.safetensors").stat().st_mtime)
        self.dense_weight = model_dense_weight(settings.model)  # hybrid's default w
        self.mapping = model_mapping(settings.model)  # collection signals -> w
        # batches of every encoder at once, at most (_batcher)
        self.slot_count = settings.batch_workers or settings.encoder_threads or os.cpu_count() or 1
        self.encode_slots = threading.BoundedSemaphore(self.slot_count)
        self.batcher = self._batcher(self.encoder)
        self.encoder.encode(["warm-up"])  # the session the batcher runs, made now
        self._rerank_parts = 1  # a reranking's parts, one a core (_load_reranker)
        self.reranker = self._load_reranker() if settings.reranker else None
        default = Served(self.info.name, settings.model, self.encoder, self.info, self.batcher,
                         self.model_created, {"base": None})
        self.encoders = Encoders(default, encoders_dir(settings), self._load_encoder,
                                 settings.encoders_loaded)

        self.disk = DiskGuard(data_dir(settings.store), settings.disk_flood_mb, metrics)
        self.seeding: dict[str, Seeding] = {}  # demo collections (api.app fills them)
        self.calibrator = Calibrator(self.store, self.embed_for, self.mapping, self.dense_weight,
                           settings.auto_tune, settings.auto_tune_min_docs)
        self.adapter = Adapter(self.store, self.encoders, self._calibrate,  # its re-embedding
                               workers=self.slot_count if self.batcher.slots else 1)  # per core
        self.adapter.recover()  # an adapt job a previous process left: finished or undone
        backups = backup_dir(settings)  # a directory, or a bucket's URL
        self.backups = Backups(
            self.store, backups if isinstance(backups, Path) else
            BackupBucket(backups, settings.s3_endpoint), self.call, self.encoder, self.info,
            self.disk.check, self.encoders.root)
        self.collections = Collections(
            self.store, self.encoders, self.embed, self.call, self.run, self.calibrator,
            self.adapter, self.decoders, self.parts.token_memories, self.disk.check,
            self.dense_weight, Limits(
                max_top_k=settings.max_top_k, max_offset=settings.max_offset,
                max_documents=settings.max_documents, max_searches=settings.max_searches,
                max_generate_tokens=settings.max_generate_tokens,
                default_temperature=settings.default_temperature),
            rerank=self.rerank if self.reranker is not None else None, aside=self.encoder_turn)

    def _batcher(self, encoder: Any) -> DynamicBatcher:
        # One batcher per encoder, their forwards free to overlap: a lock serialising them
        # served 0.746 x one encoder's requests/s with three loaded, against 0.877 x without
        # (bench/encoders_load.py, same machine, 2 cores).
        # On a CPU with the onnx backend, one batch per core at a time (QKV_BATCH_WORKERS):
        # one batch on both cores of 2 spends much of its time in operators waiting for the
        # other core's share (the threads sleep between operators, see Settings.encoder_spin)
        # With several encoders loaded, their batches share the same slots: no more run at
        # once than one encoder's workers, each batch taken once its worker holds a slot
        # (six single-threaded batches of three encoders at once on 2 cores served 0.612 x
        # one encoder's requests/s, bench/encoders_load.py)
        st = self.settings
        workers, per_core = self._per_core(encoder)
        return DynamicBatcher(
            lambda ids: encoder.encode_ids(ids, batch_size=len(ids), normalize=False),
            encoder.dim, max_size=st.batch_max_size, max_tokens=st.batch_max_tokens,
            max_wait_s=st.batch_max_wait_ms / 1e3, queue_max=st.queue_max,
            metrics=self.metrics, workers=workers,
            slots=self.encode_slots if per_core else None, tokenize=encoder.tokenize,
            text_tokens=encoder.max_tokens)

    def _per_core(self, encoder: Any) -> tuple[int, bool]:
        """How many batches of ``encoder`` run side by side, and whether each runs on its
        own core holding one of the encoder slots (the CPU's onnx backend with more than
        one worker: its call threads are set to the cores' share here)."""
        st = self.settings
        threads = st.encoder_threads or os.cpu_count() or 1
        on_cores = encoder.backend == "onnx" and encoder.device.type == "cpu"
        workers = st.batch_workers or (threads if on_cores else 1)
        per_core = on_cores and workers > 1
        if per_core:
            encoder.set_call_threads(max(1, threads // workers))
        return workers, per_core

    def _load_reranker(self) -> Any:
        st = self.settings
        assert st.reranker is not None
        rr = load_reranker(st.reranker, st.device, self.encoder.backend)
        rr.encoder.set_spin(st.encoder_spin)
        workers, per_core = self._per_core(rr.encoder)  # a reranking is cut as batches are
        self._rerank_parts = workers if per_core else 1
        rr.score("warm-up", ["warm-up"])  # its ONNX session, made now
        return rr

    async def rerank(self, query: str, texts: Sequence[str], truncate: bool = True
                     ) -> np.ndarray:
        """Each text's score for ``query`` by the reranker (:mod:`encoder.reranker`; higher:
        more relevant), a conflict without one; without ``truncate``, a text over the
        token limit (the query is input 0) is a 422. Charged to the caller's key as embeddings
        are (one text a passage), refused (429) while the encoder's queue is full, and run
        holding the encoder's slots, one part a core, so it takes its turn with the
        batches."""
        rr = self.reranker
        if rr is None:
            raise ConflictError("this server has no reranker: start it with QKV_RERANKER="
                                "DIR (a checkpoint of `qkv train-reranker`), or search "
                                "without `rerank`")
        if not texts:
            return np.zeros(0, np.float32)
        await charge_texts(self.limiter, len(texts), self.metrics)
        self.batcher.admit(len(texts))
        ids, cut = await run_in_threadpool(rr.encoder.tokenize, [query, *texts])
        if not truncate and any(cut):
            raise self._too_long(cut.index(True), rr.encoder)
        pairs = rr.pairs_of(ids)
        # longest first, dealt round-robin: parts of like tokens
        order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i]))
        n = min(self._rerank_parts, len(pairs))
        parts = [order[k::n] for k in range(n)]

        def score(idx: list[int]) -> np.ndarray:
            with self.encode_slots:
                return np.asarray(rr.score_ids([pairs[i] for i in idx], batch_size=64))
        scored = await asyncio.gather(*(run_in_threadpool(score, idx) for idx in parts))
        out = np.zeros(len(pairs), np.float32)
        for idx, values in zip(parts, scored, strict=True):
            out[idx] = values
        return out

    def _load_encoder(self, name: str, path: Path) -> Served:
        """A derived encoder (:mod:`wiring.encoders`), on the default's device and threads."""
        st = self.settings
        enc = load_encoder(path, st.device, st.encoder_threads or os.cpu_count() or 1,
                           self.encoder.backend)  # the same network: the default's pick
        enc.set_spin(st.encoder_spin)
        enc.set_arena(False)  # one of several: memory over the arena's reuse (set_arena)
        info = encoder_info(enc)
        if info.name != name:
            raise ValueError(f"{path} holds encoder {info.name!r}, not {name!r}")
        card = read_card(path) or {}
        batcher = self._batcher(enc)  # first: it sets the threads the session is made for
        enc.encode(["warm-up"])  # makes its ONNX session here, so the trim below sees it
        served = Served(name, path, enc, info, batcher,
                        int(path.joinpath("model.safetensors").stat().st_mtime), card)
        memory.trim()  # the checkpoint's float16 and dequantisation buffers (wiring.memory)
        return served

    def _calibrate(self, store: Any, collection: str, embed: Callable[..., np.ndarray],
                   held: Sequence[str] | None = None) -> Any:
        from wiring.calibrating import calibrate

        return calibrate(store, collection, embed, self.mapping, self.dense_weight, held=held)

    def close(self) -> None:
        self.adapter.close()
        self.calibrator.close()
        self.encoders.close()
        self.batcher.close()
        self.parts.close()

    # encoding
    def tokenize(self, texts: Sequence[str], truncate: bool, encoder: Any = None
                 ) -> tuple[list[list[int]], list[bool]]:
        encoder = encoder or self.encoder
        ids, cut = encoder.tokenize(texts)
        if not truncate and any(cut):
            raise self._too_long(cut.index(True), encoder)
        return ids, cut

    @staticmethod
    def _too_long(n: int, encoder: Any) -> Exception:
        return invalid(f"input {n} is longer than the encoder's {encoder.max_tokens} tokens; "
                       "send shorter text or set truncate to true", "input")

    async def embed(self, texts: Sequence[str], truncate: bool, normalize: bool = True,
                    dim: int | None = None, model: Served | None = None) -> Embedded:
        """Vectors of ``texts`` by ``model`` (the default encoder when None), queued for
        its batcher ``EMBED_CHUNK`` at a time: a request of thousands of texts holds the
        queue no longer than its share, and requests that come meanwhile are batched in
        between."""
        served = model or self.encoders.default
        await charge_texts(self.limiter, len(texts), self.metrics)  # the caller's key
        if len(texts) == 1:  # tokenized in the encoder's thread, with the rest of its batch
            try:
                row, n, was_cut = await served.batcher.embed_text(texts[0], not truncate)
            except TextTooLongError:
                raise self._too_long(0, served.encoder) from None
            x, tokens, cut = row[None], [n], [was_cut]
        else:
            ids, cut = self.tokenize(texts, truncate, served.encoder)
            tokens = [len(i) for i in ids]
            # Longest first, so the batcher's batches (cut in arrival order) hold texts of
            # like length and pad less than texts of mixed lengths as they came.
            order = np.argsort([-n for n in tokens], kind="stable")
            ranked = [ids[i] for i in order]
            parts = [await served.batcher.embed(ranked[i:i + EMBED_CHUNK])
                     for i in range(0, len(ranked), EMBED_CHUNK)]
            x = np.concatenate(parts) if parts else np.zeros((0, served.info.dim), np.float32)
            x = x[np.argsort(order)]  # back in the caller's order
        if dim is not None and dim < x.shape[1]:  # a Matryoshka size: cut, then renormalise
            x = x[:, :dim]
        if normalize:
            x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return Embedded(np.ascontiguousarray(x, dtype=np.float32), tokens, cut)

    async def encode_aside(self, texts: Sequence[str], fn: Callable[..., T], *args: Any,
                           **kwargs: Any) -> T:
        """Work on ``texts`` that runs the encoder (or its tokenizer) outside the batcher
        (``/embed_all``'s token vectors, ``/v1/pooling``'s weights, ``/tokenize``): the
        texts are charged to the caller's key as embeddings are, the work is refused (429)
        while the encoder's queue is full, and it runs holding one of the encoder's slots,
        so it takes its turn with the batches instead of crowding them."""
        await charge_texts(self.limiter, len(texts), self.metrics)  # the caller's key
        return await self.encoder_turn(texts, fn, *args, **kwargs)

    async def encoder_turn(self, texts: Sequence[str], fn: Callable[..., T], *args: Any,
                           **kwargs: Any) -> T:
        """:meth:`encode_aside` without charging the caller's key: encoder work a request
        has already paid for (a hybrid query's pooling, :mod:`index.hybrid.relevance`)."""
        self.batcher.admit(len(texts))

        def held() -> T:
            with self.encode_slots:
                return fn(*args, **kwargs)
        return await run_in_threadpool(held)

    async def embed_for(self, texts: Sequence[str], truncate: bool, dim: int | None = None,
                        collection: CollectionInfo | None = None) -> Embedded:
        """:meth:`embed` by the encoder that made ``collection``."""
        model = self.encoders.of(collection) if collection is not None else None
        return await self.embed(texts, truncate, dim=dim, model=model)

    # the store, off the event loop
    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return await run_in_threadpool(fn, *args, **kwargs)
        except StoreUnavailableError:
            self.metrics.store_errors.labels("unavailable").inc()
            raise
        except StoreError:
            self.metrics.store_errors.labels("error").inc()
            raise

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """CPU-bound work (decoding) off the event loop."""
        return await run_in_threadpool(fn, *args, **kwargs)

    async def ready(self) -> tuple[bool, str]:
        try:
            await self.call(self.store.list_collections)
            if getattr(self.store, "damaged", None) is not None:
                await self.call(self.store.heal)  # type: ignore[attr-defined]
        except StoreError as e:
            damaged = getattr(self.store, "damaged", None)
            return False, (f"writes: blocked (store re-opening after: {damaged})" if damaged
                           else f"store not reachable: {e}")
        filling = [f"{p.collection}{'' if p.kind == 'documents' else ' ' + p.kind} "
                   f"{p.written} of {p.of}" for p in self.seeding.values() if not p.done]
        ok = "ok; writes: blocked (disk)" if self.disk.blocked() else "ok"
        if filling:
            return True, ok + "; demo collections filling in the background: " + ", ".join(
                filling)
        return True, ok

    def seeding_of(self, collection: str) -> dict[str, Any] | None:
        """How far a demo collection still being filled is (None once it is complete)."""
        p = self.seeding.get(collection)
        return None if p is None or p.state == "complete" else p.to_dict()
