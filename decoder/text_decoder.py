"""``Decoder``: tokenizer + network + search, the public face of the decoder package."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from decoder import batch as batching
from decoder.config import DecoderConfig
from decoder.model import RetrievalAugmentedTransformer
from decoder.search import Hypothesis, Mixer, beam_search, greedy
from decoder.tokenizer import decode, encode, token_strings
from encoder.checkpoint import LoadedModel, read_checkpoint
from encoder.device import autocast

Neighbour = tuple[str, float]  # (value text, retrieval weight)


@dataclass
class Generation:
    """One output text and its tokens.

    ``score`` is the output's log-probability (natural log, ``</s>`` included);
    ``truncated``: the source or a neighbour was cut at ``max_tokens``; ``finished``: the
    output ended by itself (False when it hit the token limit). With ``return_attention``:
    ``attention`` (output tokens × memory tokens, cross-attention averaged over heads and
    layers), the ``memory_tokens`` and each one's ``memory_segments`` (-1 for the source,
    i for neighbour i).
    """

    text: str
    tokens: list[str]
    score: float = 0.0
    truncated: bool = False
    finished: bool = True
    attention: list[list[float]] | None = None
    memory_tokens: list[str] | None = None
    memory_segments: list[int] | None = field(default=None)
    ids: list[int] = field(default_factory=list)  # the output's token ids, without </s>


def _check(sources: Sequence[str], neighbours: Sequence[Sequence[Neighbour]] | None,
           beam: int, max_tokens: int | None) -> None:
    if isinstance(sources, str):
        raise TypeError("sources must be a list of strings, not a single string")
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if neighbours is not None and len(neighbours) != len(sources):
        raise ValueError(f"got {len(neighbours)} neighbour lists for {len(sources)} sources")
    for i, s in enumerate(sources):
        if not isinstance(s, str):
            raise TypeError(f"sources[{i}] is {type(s).__name__}, expected str")
    for row in neighbours or []:
        for value, w in row:
            if not isinstance(value, str):
                raise TypeError(f"a neighbour's value is {type(value).__name__}, expected str")
            if not (math.isfinite(w) and w >= 0):
                raise ValueError(f"neighbour weights must be finite and >= 0, got {w}")


class Decoder(LoadedModel):
    """Source text + weighted neighbours (value text, weight) → target text.

    Weights are the retrieval weights, already softmax-normalised by the caller
    (``index.attend``); a neighbour of weight 0 is ignored. Inputs longer than
    ``max_tokens`` tokens are cut (``Generation.truncated``); an empty source gives an
    empty output without running the model.
    """

    model: RetrievalAugmentedTransformer
    config: DecoderConfig

    def generate(
        self,
        source: str,
        neighbours: Sequence[Neighbour] = (),
        beam: int = 4,
        max_tokens: int | None = None,
        return_attention: bool = False,
        length_penalty: float = 1.0,
        mix: Mixer | None = None,
    ) -> Generation:
        """Translate one source with its neighbours (see :meth:`generate_batch`)."""
        return self.generate_batch([source], [list(neighbours)], beam, max_tokens,
                                   return_attention, length_penalty, mix=mix)[0]

    def translate(
        self,
        sources: Sequence[str],
        neighbours: Sequence[Sequence[Neighbour]] | None = None,
        beam: int = 4,
        max_tokens: int | None = None,
        length_penalty: float = 1.0,
        batch_size: int = 32,
        progress: bool = False,
        mix: Mixer | None = None,
    ) -> list[str]:
        """Texts only, for many sources at once (see :meth:`generate_batch`)."""
        gens = self.generate_batch(sources, neighbours, beam, max_tokens, False, length_penalty,
                                   batch_size, progress, mix)
        return [g.text for g in gens]

    def generate_batch(
        self,
        sources: Sequence[str],
        neighbours: Sequence[Sequence[Neighbour]] | None = None,
        beam: int = 4,
        max_tokens: int | None = None,
        return_attention: bool = False,
        length_penalty: float = 1.0,
        batch_size: int = 32,
        progress: bool = False,
        mix: Mixer | None = None,
    ) -> list[Generation]:
        """One :class:`Generation` per source, in input order; beam 1 is greedy search.

        Outputs stop at ``max_tokens`` tokens (at most the model's ``max_tokens``); left
        None, at 2 × the source's tokens + 10. Sources are decoded in length-sorted
        batches of ``batch_size``, each batch's memory encoded once. ``mix`` (a token
        memory: :class:`decoder.knn.KnnMixer`) reshapes each step's distribution.
        """
        _check(sources, neighbours, beam, max_tokens)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        nbrs = [list(n) for n in neighbours] if neighbours is not None else [[]] * len(sources)
        c = self.config
        src_ids, src_cut = encode(self.tokenizer, list(sources), c.max_tokens)
        out: list[Generation | None] = [
            None if ids else Generation("", [], truncated=cut) for ids, cut in
            zip(src_ids, src_cut, strict=True)]
        todo = sorted((i for i, g in enumerate(out) if g is None), key=lambda i: -len(src_ids[i]))
        cap = c.max_tokens if max_tokens is None else min(max_tokens, c.max_tokens)
        bar = tqdm(total=len(todo), desc="translate", disable=not progress, mininterval=2)
        for start in range(0, len(todo), batch_size):
            idx = todo[start : start + batch_size]
            limits = [cap if max_tokens is not None else min(cap, 2 * len(src_ids[i]) + 10)
                      for i in idx]
            gens = self._generate_ids([src_ids[i] for i in idx], [nbrs[i] for i in idx],
                                      limits, beam, return_attention, length_penalty, mix)
            for i, g in zip(idx, gens, strict=True):
                g.truncated = g.truncated or src_cut[i]
                out[i] = g
            bar.update(len(idx))
        bar.close()
        return [g for g in out if g is not None]

    def _generate_ids(
        self,
        src_ids: list[list[int]],
        nbrs: list[list[Neighbour]],
        limits: list[int],
        beam: int,
        return_attention: bool,
        length_penalty: float,
        mix: Mixer | None = None,
    ) -> list[Generation]:
        c = self.config
        flat = [v for row in nbrs for v, _ in row]
        flat_ids, flat_cut = encode(self.tokenizer, flat, c.max_tokens) if flat else ([], [])
        n_ids: list[list[list[int]]] = []
        n_cut: list[bool] = []
        pos = 0
        for row in nbrs:
            n_ids.append(flat_ids[pos : pos + len(row)])
            n_cut.append(any(flat_cut[pos : pos + len(row)]))
            pos += len(row)
        src = batching.sources(src_ids, c).to(self.device)
        n_t, n_w = batching.neighbours(n_ids, [[w for _, w in row] for row in nbrs], c)
        with torch.inference_mode(), autocast(self.device):
            memory = self.model.encode_memory(
                src, None if n_t is None else n_t.to(self.device),
                None if n_w is None else n_w.to(self.device))
            if beam == 1:
                hyps = greedy(self.model, memory, limits, return_attention, mix)
            else:
                hyps = beam_search(self.model, memory, limits, beam, length_penalty,
                                   return_attention, mix)
        gens = []
        for b, h in enumerate(hyps):
            g = Generation(decode(self.tokenizer, h.ids), token_strings(self.tokenizer, h.ids),
                           h.score, n_cut[b], h.finished, ids=list(h.ids))
            if return_attention:
                self._explain(g, h, memory.mask[b], memory.segments[b], memory.ids[b])
            gens.append(g)
        return gens

    def _explain(self, g: Generation, h: Hypothesis, mask: torch.Tensor, segments: torch.Tensor,
                 ids: torch.Tensor) -> None:
        """Fill ``g``'s attention over the memory slots that exist (mask True)."""
        keep = mask.cpu()
        g.memory_tokens = token_strings(self.tokenizer, ids.cpu()[keep].tolist())
        g.memory_segments = segments.cpu()[keep].tolist()
        att = h.attention if h.attention is not None else torch.zeros(0, keep.numel())
        g.attention = att.float().cpu()[:, keep].tolist()



def load(path: str | Path, device: torch.device | str | None = None) -> Decoder:
    """Load a checkpoint directory written by :func:`save_checkpoint`."""
    meta, state, tokenizer = read_checkpoint(path, "a decoder")
    model = RetrievalAugmentedTransformer(DecoderConfig.from_dict(meta["architecture"]))
    model.load_state_dict(state)
    return Decoder(model, tokenizer, device=device, meta=meta)
