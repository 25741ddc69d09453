"""``TextEncoder``: tokenizer + network, the public face of the encoder package."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np
import torch

from encoder import graph_cache, token_bag
from encoder.checkpoint import LoadedModel, read_checkpoint
from encoder.config import EncoderConfig
from encoder.cpu import cpu_flags
from encoder.device import autocast, inference_attention
from encoder.model import TransformerEncoder
from encoder.onnx_graph import activations_mode, calibration_texts, pick_backend
from encoder.onnx_session import OnnxForward
from encoder.tokenizer import clean_text

log = logging.getLogger(__name__)

# A batch's packed tokens are rounded up to a multiple of this many rows: fewer distinct
# shapes, so the CPU kernels' (oneDNN) caches of per-shape primitives stay small in a
# long-running process.
PAD_MULTIPLE = 8
ONNX_PAD_BUDGET = 10_000  # summed T² - L² of an onnx batch at d = 256 (_length_groups)...
ONNX_PAD_BUDGET_AVX2 = 3_000  # ...on a CPU without AVX-512 (onnx_pad_budget)
CUT_ROWS = 1024  # texts whose batches' costs _cheapest_cut computes at once...
CUT_CELLS = 1 << 20  # ...at most this many costs (8 MB; a batch size of 100,000 is possible)


@dataclass(frozen=True)
class TokenWeights:
    """Pooling weights of one text: the tokens it was cut into and each one's weight; with
    the text as the encoder read it (cleaned) and each token's character span in it."""

    tokens: list[str]
    weights: list[float]
    truncated: bool
    text: str = ""
    offsets: list[tuple[int, int]] = field(default_factory=list)

    def segments(self) -> list[tuple[str, float | None]]:
        """``text`` cut at token boundaries, each piece with the pooling weight of the token
        it came from and ``None`` for what no token weighs (the space a word's token starts
        with, text past the token limit): the pieces join back to ``text``. Tokens of one
        span (the byte-level pieces of one character) add up; ``<s>``, which spans nothing,
        is left out."""
        spans: dict[tuple[int, int], float] = {}
        for (a, b), w in zip(self.offsets, self.weights, strict=True):
            if b > a:
                spans[(a, b)] = spans.get((a, b), 0.0) + w
        out: list[tuple[str, float | None]] = []
        pos = 0
        for (a, b), w in sorted(spans.items()):
            a = max(a, pos)
            if a >= b:
                continue
            piece = self.text[a:b]
            word = piece.lstrip()
            if a > pos:
                out.append((self.text[pos:a], None))
            if not word:  # a token of spaces only (as before a symbol) keeps its weight
                out.append((piece, w))
            else:
                if len(word) < len(piece):
                    out.append((piece[: len(piece) - len(word)], None))
                out.append((word, w))
            pos = b
        if pos < len(self.text):
            out.append((self.text[pos:], None))
        return out


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not a single string")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")


class TextEncoder(LoadedModel):
    """Text → L2-normalised float32 vectors (inner product = cosine).

    Every text is cleaned the one documented way (:func:`encoder.tokenizer.clean_text`),
    cut at ``max_tokens`` tokens (``truncated`` tells which were), and encoded in
    length-sorted batches so padding is rarely computed.
    """

    model: TransformerEncoder
    config: EncoderConfig
    backend: str = "torch"
    _onnx: OnnxForward | None = None
    _spin: bool = True
    _arena: bool = True
    _call_threads: int | None = None
    _bag_tables: tuple[tuple[int, int], np.ndarray, np.ndarray] | None = None  # token bag's

    def use_backend(self, name: str | None = None) -> None:
        """Run :meth:`encode` on ``name``'s network (``torch`` or ``onnx``: the int8 ONNX
        Runtime graph of :mod:`encoder.onnx_graph`); ``None`` picks as
        :func:`encoder.onnx_graph.pick_backend` does (``onnx`` on a CPU). The ONNX graph is
        built from the weights now (or read from the process's graph cache,
        :mod:`encoder.graph_cache`, where these weights' was built before): call this again
        after changing them. An architecture the graph does not cover (``additive``
        pooling) stays on torch unless ``onnx`` is asked for, which is then a
        ``ValueError``. :meth:`token_vectors` always runs on torch."""
        self.backend = pick_backend(name, self.device.type, self.config)
        calibration = self.tokenize(calibration_texts())[0] if (
            self.backend == "onnx" and activations_mode() == "static") else None
        self._onnx = OnnxForward(self.model, spin=self._spin, calibration=calibration,
                                 cache=graph_cache.Defaults.directory
                                 ) if self.backend == "onnx" else None
        if self._onnx is not None:
            self._onnx.arena, self._onnx.threads = self._arena, self._call_threads

    def set_call_threads(self, threads: int | None) -> None:
        """How many threads one call of the onnx backend runs on (None: torch's setting,
        the default). 1 where several threads each encode their own batch at once (the
        service's batcher, ``api.batcher``). Torch's path is not affected."""
        self._call_threads = threads
        if self._onnx is not None:
            self._onnx.threads = threads
            if threads is not None:
                self._onnx.keep_only(threads)

    def add_token_bag(self, ids: Sequence[Sequence[int]], out: np.ndarray) -> np.ndarray:
        """The network's vectors ``out`` of the token id lists ``ids`` with the checkpoint's
        token bag added (:mod:`encoder.token_bag`; unchanged without one), as :meth:`encode`
        returns them before normalising."""
        weight = self.config.lexical_weight
        if not weight:
            return out
        emb = (self.model.lexical if self.config.lexical_table else self.model.embed).weight
        key = (emb.data_ptr(), emb._version)  # read again once training changed the weights
        if self._bag_tables is None or self._bag_tables[0] != key:
            self._bag_tables = (key, self.model.get_buffer("lexical_idf").float().cpu().numpy(),
                                emb.detach().float().cpu().numpy())
        _, idf, table = self._bag_tables
        return token_bag.mix(out, token_bag.bags(ids, idf, table), weight)

    def set_spin(self, spin: bool) -> None:
        """Whether the onnx backend's threads spin-wait between operators (the default:
        fastest when encoding has the cores to itself) or sleep, leaving the cores to the
        process's other threads, as a server's event loop needs (see
        :class:`encoder.onnx_session.OnnxForward`). Torch's path is not affected."""
        self._spin = spin
        if self._onnx is not None:
            self._onnx.spin = spin

    def set_arena(self, arena: bool) -> None:
        """Whether the onnx backend's sessions keep ONNX Runtime's memory arena (the
        default). Off for an encoder served beside others; in the service
        (bench/encoders_load.py) the RSS did not move with it (968 against 955 MB with three
        encoders), so most of an extra encoder's cost is elsewhere (issue 38). Set it
        before the first call."""
        self._arena = arena
        if self._onnx is not None:
            self._onnx.arena = arena

    @property
    def dim(self) -> int:
        return self.config.d_model

    @property
    def dims(self) -> tuple[int, ...]:
        """The sizes the vectors may be cut to (trained Matryoshka prefixes), and ``dim``."""
        return tuple(sorted({*self.config.matryoshka, self.dim}))

    def _encodings(self, texts: Sequence[str], offsets: bool = False
                   ) -> tuple[list[str], list[Any]]:
        """The texts cleaned, and the tokenizer's encodings of them (ids; their character
        offsets too with ``offsets``: without them a batch is tokenized in 0.62 x the time,
        21.6 against 34.8 us a text of bench/ingest.py's documents, Intel Xeon, 2 cores,
        throwaway script)."""
        _check_texts(texts)
        cleaned = [clean_text(t) for t in texts]
        # one text (the API's common case): no batch to hand to the tokenizer's threads;
        # POST /v1/embeddings spent 241 against 213 us of event-loop CPU a request with
        # encode_batch (in-process rounds alternating, 2 cores, not recorded)
        if len(cleaned) == 1:
            return cleaned, [self.tokenizer.encode(cleaned[0])]
        if offsets:
            return cleaned, self.tokenizer.encode_batch(cleaned)
        return cleaned, self.tokenizer.encode_batch_fast(cleaned)

    def _cut(self, encs: Sequence[Any]) -> tuple[list[list[int]], list[bool]]:
        ids = [e.ids for e in encs]
        truncated = [len(x) > self.max_tokens for x in ids]
        return [x[: self.max_tokens] for x in ids], truncated

    def tokenize(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """Token ids per text (starting with ``<s>``), cut at ``max_tokens``; and which were cut."""
        return self._cut(self._encodings(texts)[1])

    def truncated(self, texts: Sequence[str]) -> list[bool]:
        """Whether each text is longer than ``max_tokens`` and would be cut."""
        return self.tokenize(texts)[1]

    @overload
    def encode(
        self, texts: Sequence[str], batch_size: int = 64, return_weights: Literal[False] = False
    ) -> np.ndarray: ...

    @overload
    def encode(
        self, texts: Sequence[str], batch_size: int = 64, *, return_weights: Literal[True]
    ) -> tuple[np.ndarray, list[TokenWeights]]: ...

    def encode(
        self, texts: Sequence[str], batch_size: int = 64, return_weights: bool = False
    ) -> np.ndarray | tuple[np.ndarray, list[TokenWeights]]:
        """Encode ``texts`` to an (n, dim) float32 array of unit rows, in input order.

        With ``return_weights`` also returns, per text, its tokens and pooling weights.
        """
        cleaned, encs = self._encodings(texts, offsets=return_weights)
        ids, truncated = self._cut(encs)
        out, weights = self._forward(ids, batch_size, return_weights)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        if not return_weights:
            return out
        explained = [
            TokenWeights(
                tokens=[self.tokenizer.id_to_token(t) or "" for t in ids[i]],
                weights=[float(x) for x in weights[i]],
                truncated=truncated[i],
                text=cleaned[i],
                offsets=[tuple(o) for o in encs[i].offsets[: len(ids[i])]],  # type: ignore[misc]
            )
            for i in range(len(ids))
        ]
        return out, explained

    def pooling_weights(self, texts: Sequence[str], batch_size: int = 64) -> list[np.ndarray]:
        """Each text's attention-pooling weights over its tokens as :meth:`encode` pools
        them (``<s>`` first, cut at ``max_tokens``; float32, summing to 1), without the
        tokens' strings and offsets ``return_weights`` adds."""
        ids, _ = self.tokenize(texts)
        return self._forward(ids, batch_size, True, normalize=False, bag=False)[1]

    def token_vectors(self, texts: Sequence[str], batch_size: int = 64) -> list[np.ndarray]:
        """Each text's token states after the last block (what the pooling weighs), one
        (tokens, dim) float32 array per text, ``<s>`` first; texts cut at ``max_tokens``."""
        ids, _ = self.tokenize(texts)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        out: list[np.ndarray] = []
        with torch.inference_mode(), autocast(self.device), inference_attention(self.device):
            for start in range(0, len(ids), batch_size):
                chunk = ids[start:start + batch_size]
                h, _ = self.model.token_states(_pad(chunk, self.config.pad_id).to(self.device))
                h_np = h.float().cpu().numpy()
                out.extend(h_np[row, : len(x)] for row, x in enumerate(chunk))
        return out

    def encode_ids(
        self, ids: Sequence[Sequence[int]], batch_size: int = 64, normalize: bool = True,
        bag: bool = True, fp32: bool = False,
    ) -> np.ndarray:
        """Encode token id lists from :meth:`tokenize` (each at most ``max_tokens``) to an
        (n, dim) float32 array, unit rows unless ``normalize`` is false (then the pooled
        vectors as the model makes them). Callers that batch texts from many requests
        (the API's dynamic batcher) tokenize on arrival and encode here. ``bag`` false
        leaves the token bag out: the network's vectors alone (what encoder.bag_train
        trains the bag beside). ``fp32`` runs torch's path without bf16 autocast (the
        reference :mod:`encoder.backend_pick` checks the backends against)."""
        for x in ids:
            if not 0 < len(x) <= self.max_tokens:
                raise ValueError(f"token lists must have 1..{self.max_tokens} ids, got {len(x)}")
        out, _ = self._forward(ids, batch_size, False, normalize, bag, fp32)
        if normalize:  # again in float32: the model's own normalisation ran under bf16
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def _forward(
        self, ids: Sequence[Sequence[int]], batch_size: int, return_weights: bool,
        normalize: bool = True, bag: bool = True, fp32: bool = False,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Pooled vectors in input order, batches sorted by length (the token bag added
        unless ``bag`` is false)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        weights: list[np.ndarray] = [np.zeros(0, np.float32)] * len(ids)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        lengths = [len(x) for x in ids]
        if self._onnx is not None and not fp32:
            for idx in _length_groups(order, lengths, batch_size, self.dim, onnx=True):
                vec_np, w_np = self._onnx([ids[i] for i in idx])  # packed, as torch's
                out[idx] = vec_np  # not normalised: encode and encode_ids do that in fp32
                if return_weights:
                    for row, i in enumerate(idx):
                        weights[i] = w_np[row, : lengths[i]]
            return (self.add_token_bag(ids, out) if bag else out), weights
        with (torch.inference_mode(), autocast(self.device, enabled=not fp32),
              inference_attention(self.device)):
            for idx in _length_groups(order, lengths, batch_size, self.dim):
                batch = _pad([ids[i] for i in idx], self.config.pad_id).to(self.device)
                vec, w = self.model.forward_packed(  # (b, d), (b, T)
                    batch, batch != self.config.pad_id, normalize, PAD_MULTIPLE)
                out[idx] = vec.float().cpu().numpy()
                if return_weights:
                    w_np = w.float().cpu().numpy()
                    for row, i in enumerate(idx):
                        weights[i] = w_np[row, : len(ids[i])]
        return (self.add_token_bag(ids, out) if bag else out), weights


def _length_groups(order: list[int], lengths: list[int], batch_size: int, d_model: int,
                   onnx: bool = False) -> list[list[int]]:
    """Cut ``order`` (indices by decreasing length) into batches of at most ``batch_size``.

    Batches run packed (:meth:`TransformerEncoder.forward_packed`, and so does the onnx
    graph, :func:`encoder.onnx_graph.pack`): the projections and
    feed-forward cost what the real tokens cost, only attention is padded to the batch's
    longest text T.

    On torch, a text of L tokens in that batch wastes about (T² - L²)·4d attention FLOPs a
    layer against the 24·L·d² it costs anyway; a new batch starts where that waste would
    pass a quarter of it, T² - L² > 1.5·L·d. Short texts (T up to ~60 tokens at d = 256)
    are never split, so the API's dynamic batches stay whole; long documents with short
    ones are.

    On the onnx graph, padded attention costs far more than its FLOPs (ONNX Runtime's
    fp32 MultiHeadAttention beside int8 products: 43 % of a mixed batch of 32 whose
    longest text was 79 tokens and median 34, bench/encode_profile.py), and a run costs
    about a millisecond whatever its size. So the cut is the one that costs least when a
    run costs :func:`onnx_pad_budget` · 256 / d and a batch its summed waste Σ (T² - L²)
    (dynamic programming over the sorted lengths; batches hold consecutive texts). On 2
    cores, Intel AVX-512 VNNI, with a greedy cut at that budget: mixed API batches of 32
    and 64 sentences went from 930 and 766 to 1,264 and 1,358 sentences/s, a sorted bulk
    of 1,024 from 1,225 to 1,491; budgets of 3,000 and 30,000 did no better. On the
    AVX2-only AMD EPYC 3,000 did better on the API's small batches: ``POST /v1/embeddings``
    under 32 connections (mean batch ~10) 1,044-1,054 requests/s against 918-1,031 at
    10,000 in turns, server CPU 1.62-1.64 against 1.68-1.88 ms a request (a second A/B of
    4 rounds, the machine noisier: 911-1,003 against 745-984, 3,000 ahead in 3); sorted bulk
    batches alike (1,632 against 1,635 documents/s; throwaway A/Bs, 2026-12-05). So a CPU
    without AVX-512 takes 3,000 (:data:`ONNX_PAD_BUDGET_AVX2`) and the AVX-512 kinds keep
    10,000 (tuned on the Intel Xeon; the AVX-512 AMD EPYC not measured). Why the two differ
    is a guess: with narrower vectors padded attention may cost more against a run's
    fixed cost."""
    if onnx:
        return _cheapest_cut(order, lengths, batch_size, onnx_pad_budget() * 256 / d_model)
    groups: list[list[int]] = []
    for i in order:
        g = groups[-1] if groups else None
        if g is None or len(g) >= batch_size or (
                lengths[g[0]] ** 2 - lengths[i] ** 2 > 1.5 * lengths[i] * d_model):
            groups.append([i])
        else:
            g.append(i)
    return groups


@functools.cache
def onnx_pad_budget() -> int:
    """What padding an onnx run is worth here (:func:`_length_groups`): by whether this
    CPU has AVX-512 (``avx512f``)."""
    return ONNX_PAD_BUDGET if "avx512f" in cpu_flags() else ONNX_PAD_BUDGET_AVX2


def _cheapest_cut(order: list[int], lengths: list[int], batch_size: int, run_cost: float
                  ) -> list[list[int]]:
    """``order`` cut into consecutive batches of at most ``batch_size`` minimising
    Σ (run_cost + Σ (T² - L²)) over the batches (T: a batch's first, longest, length).

    Dynamic programming over the texts: the best cut of the first j ends with a batch of
    texts i..j-1, i within ``batch_size`` of j. What a batch costs apart from the best cut
    before it is computed for :data:`CUT_ROWS` values of j at once (fewer for a large
    ``batch_size``: at most :data:`CUT_CELLS` costs); only the sum with the
    cuts before it and its minimum are left to a step per text (a step per text of a
    dozen numpy calls took 2.2 s of a ``qkv index`` of 100,000 documents, a py-spy
    profile on the AVX2-only AMD EPYC). On ties the batch starting earliest wins, as
    before; where the run cost is a whole number (the shipped encoder's, d = 256) every sum
    is of integers, exact in float64, and the cut is the one a step per text made; else
    one of the same cost up to rounding."""
    n = len(order)
    if n <= 1:  # nothing to cut (the API's batches of one)
        return [order] if n else []
    sq = np.array([lengths[i] for i in order], dtype=np.float64) ** 2
    prefix = np.concatenate([[0.0], np.cumsum(sq)])
    best = np.zeros(n + 1)
    start = np.zeros(n + 1, dtype=np.int64)
    width = min(batch_size, n)
    size = np.arange(width, 0, -1)  # the last batch's size, its first text i ascending
    rows = max(1, min(CUT_ROWS, CUT_CELLS // width))
    for a in range(1, n + 1, rows):
        js = np.arange(a, min(n, a + rows - 1) + 1)
        first = np.maximum(js[:, None] - size[None, :], 0)  # (rows, width): i, clipped
        # the batch i..j-1's own cost (rows where j - size < 0 are cut off below)
        own = run_cost + size[None, :] * sq[first] - (prefix[js][:, None] - prefix[first])
        for r, j in enumerate(js.tolist()):
            lo = j - width
            cost = best[lo:j] + own[r] if lo >= 0 else best[:j] + own[r, -lo:]
            k = int(cost.argmin())
            best[j], start[j] = cost[k], max(lo, 0) + k
    groups: list[list[int]] = []
    j = n
    while j > 0:
        groups.append(order[int(start[j]):j])
        j = int(start[j])
    return groups[::-1]


def _pad(seqs: Sequence[Sequence[int]], pad_id: int, multiple: int = 1) -> torch.Tensor:
    t = max(len(s) for s in seqs)
    t = -(-t // multiple) * multiple
    batch = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    for row, s in enumerate(seqs):
        batch[row, : len(s)] = torch.tensor(s, dtype=torch.long)
    return batch



def load(path: str | Path, device: torch.device | str | None = None,
         backend: str | None = None) -> TextEncoder:
    """Load a checkpoint directory written by :func:`save_checkpoint`, encoding on
    ``backend`` (see :meth:`TextEncoder.use_backend`: by default ONNX Runtime int8 on a
    CPU, torch on CUDA)."""
    meta, state, tokenizer = read_checkpoint(path, "an encoder")
    model = TransformerEncoder(EncoderConfig.from_dict(meta["architecture"]))
    model.load_state_dict(state)
    text_encoder = TextEncoder(model, tokenizer, device=device, meta=meta)
    text_encoder.use_backend(backend)
    return text_encoder
