"""Greedy and beam search over a batch of sentences (Sutskever et al. 2014; Wu et al. 2016
for the length penalty).

The memory is encoded once per batch and each decoder block's cross-attention keys and
values with it; self-attention keys and values are cached step by step, so a step costs
one token per hypothesis. Finished sentences leave the batch.

Both searches stop a hypothesis at ``</s>``; at ``max_len[i]`` output tokens only
``</s>`` may follow (the hypothesis is then marked unfinished). ``<pad>``, ``<s>`` and
``<sep>`` are never generated. Scores are sums of natural-log token probabilities,
``</s>`` included; beam search ranks finished hypotheses by
score / (tokens + 1) ** length_penalty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from decoder.layers import KV
from decoder.model import Memory, RetrievalAugmentedTransformer


@dataclass
class Hypothesis:
    """One output: ids without ``</s>``, its log-probability, whether it ended with
    ``</s>`` before the length limit, and cross-attention (len(ids), S) when asked."""

    ids: list[int]
    score: float
    finished: bool
    attention: torch.Tensor | None = None


@dataclass
class _State:
    """The rows still being searched: their sentences' memory, its keys and values, and
    each row's self-attention caches."""

    memory: Memory
    memory_kv: list[KV]
    past: list[KV] | None

    def select(self, rows: torch.Tensor, sentences: torch.Tensor | None) -> _State:
        """Caches of ``rows``; memory of ``sentences`` (None: the memory is unchanged)."""
        past = None if self.past is None else [(k[rows], v[rows]) for k, v in self.past]
        if sentences is None:
            return _State(self.memory, self.memory_kv, past)
        return _State(self.memory.select(sentences),
                      [(k[sentences], v[sentences]) for k, v in self.memory_kv], past)


class Mixer(Protocol):
    """Turns the model's next-token log-probabilities into others, given the output states
    they came from: a token memory (:class:`decoder.knn.KnnMixer`)."""

    def __call__(self, states: torch.Tensor, lp: torch.Tensor) -> torch.Tensor: ...


def _log_probs(
    model: RetrievalAugmentedTransformer, states: torch.Tensor, force_eos: torch.Tensor,
    mix: Mixer | None = None,
) -> torch.Tensor:
    """(R, d) output states → (R, V) log-probabilities (mixed by ``mix`` when given) with
    the never-generated tokens at -inf and only ``</s>`` allowed on the rows of
    ``force_eos`` (R,) bool."""
    c = model.config
    lp = torch.log_softmax(model.project(states).float(), dim=-1)
    if mix is not None:
        lp = mix(states, lp)
    lp[:, [c.pad_id, c.bos_id, c.sep_id]] = float("-inf")
    if force_eos.any():
        eos = lp[force_eos, c.eos_id].clone()
        lp[force_eos] = float("-inf")
        lp[force_eos, c.eos_id] = eos
    return lp


def greedy(
    model: RetrievalAugmentedTransformer,
    memory: Memory,
    max_len: list[int],
    need_weights: bool = False,
    mix: Mixer | None = None,
) -> list[Hypothesis]:
    """The most probable next token at every step, for each of the memory's B rows."""
    c = model.config
    n = memory.states.size(0)
    dev = memory.states.device
    state = _State(memory, model.memory_kv(memory), None)
    rows = torch.arange(n, device=dev)  # original sentence of each active row
    limit = torch.tensor(max_len, device=dev)
    tokens = torch.full((n,), c.bos_id, dtype=torch.long, device=dev)
    seq = torch.zeros(n, 0, dtype=torch.long, device=dev)
    scores = torch.zeros(n, device=dev)
    att: torch.Tensor | None = None
    out: list[Hypothesis | None] = [None] * n
    for t in range(max(max_len) + 1):
        states, state.past, a = model.step(tokens, t, state.memory, state.memory_kv, state.past,
                                           need_weights)
        force = limit[rows] <= t
        lp = _log_probs(model, states, force, mix)
        best, tokens = lp.max(dim=-1)  # (R,), (R,)
        scores = scores + best
        done = (tokens == c.eos_id) | force
        for r in done.nonzero().flatten().tolist():
            out[int(rows[r])] = Hypothesis(seq[r].tolist(), float(scores[r]),
                                           not bool(force[r]), None if att is None else att[r])
        keep = (~done).nonzero().flatten()
        if keep.numel() == 0:
            break
        seq = torch.cat([seq[keep], tokens[keep, None]], dim=1)
        if a is not None:
            att = torch.cat([att[keep], a[keep, None]], 1) if att is not None else a[keep, None]
        rows, tokens, scores = rows[keep], tokens[keep], scores[keep]
        state = state.select(keep, keep)
    assert all(h is not None for h in out)
    return [h for h in out if h is not None]


def beam_search(
    model: RetrievalAugmentedTransformer,
    memory: Memory,
    max_len: list[int],
    beam: int = 4,
    length_penalty: float = 1.0,
    need_weights: bool = False,
    mix: Mixer | None = None,
) -> list[Hypothesis]:
    """Beam search for each of the memory's B rows; returns the best finished hypothesis.

    Each step keeps, per sentence, the ``beam`` best continuations that do not end; those
    that end among the ``beam`` best candidates are set aside, and a sentence is done when
    it has ``beam`` of them (or reached its length limit).
    """
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    c = model.config
    n, dev = memory.states.size(0), memory.states.device
    # Rows b·beam .. b·beam + beam - 1 are sentence b's hypotheses; they share its memory.
    state = _State(memory, model.memory_kv(memory), None)
    sent = torch.arange(n, device=dev)  # original sentence of each active sentence
    limit = torch.tensor(max_len, device=dev)
    scores = torch.zeros(n, beam, device=dev)
    scores[:, 1:] = float("-inf")  # all beams start equal: expand only the first
    tokens = torch.full((n * beam,), c.bos_id, dtype=torch.long, device=dev)
    seq = torch.zeros(n * beam, 0, dtype=torch.long, device=dev)
    att: torch.Tensor | None = None
    ended: list[list[Hypothesis]] = [[] for _ in range(n)]
    for t in range(max(max_len) + 1):
        nb = sent.numel()
        states, state.past, a = model.step(tokens, t, state.memory, state.memory_kv, state.past,
                                           need_weights, group=beam)
        force = limit[sent] <= t  # (nb,)
        lp = _log_probs(model, states, force.repeat_interleave(beam), mix)  # (nb·beam, V)
        v = lp.size(-1)
        cand = (scores.unsqueeze(-1) + lp.view(nb, beam, v)).view(nb, beam * v)
        top_s, top_i = cand.topk(min(2 * beam, beam * v), dim=1)  # (nb, 2·beam)
        offset = torch.arange(nb, device=dev)[:, None] * beam
        src = torch.div(top_i, v, rounding_mode="floor") + offset  # (nb, 2·beam) rows extended
        tok = top_i % v
        is_eos = tok == c.eos_id
        for j, col in (is_eos[:, :beam] & top_s[:, :beam].isfinite()).nonzero().tolist():
            b = int(sent[j])
            if len(ended[b]) < beam:
                r = int(src[j, col])
                ended[b].append(Hypothesis(seq[r].tolist(), float(top_s[j, col]),
                                           not bool(force[j]), None if att is None else att[r]))
        pick = ~is_eos & (torch.cumsum(~is_eos, dim=1) <= beam)  # the first `beam` that go on
        done = force | torch.tensor([len(ended[int(b)]) >= beam for b in sent], device=dev)
        keep = (~done).nonzero().flatten()
        if keep.numel() == 0:
            break
        rows = src[pick].view(nb, beam)[keep].flatten()  # (kept·beam,) rows they extend
        tokens = tok[pick].view(nb, beam)[keep].flatten()
        scores = top_s[pick].view(nb, beam)[keep]
        seq = torch.cat([seq[rows], tokens[:, None]], dim=1)
        if a is not None:
            att = torch.cat([att[rows], a[rows, None]], 1) if att is not None else a[rows, None]
        state = state.select(rows, keep if keep.numel() < nb else None)
        sent = sent[keep]
    return [_best(hs, length_penalty) for hs in ended]


def _best(hyps: list[Hypothesis], length_penalty: float) -> Hypothesis:
    if not hyps:  # every continuation was impossible (-inf): nothing to say
        return Hypothesis([], float("-inf"), False, None)
    return max(hyps, key=lambda h: h.score / (len(h.ids) + 1) ** length_penalty)
