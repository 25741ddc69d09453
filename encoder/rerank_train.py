"""Training the cross-encoder reranker (``qkv train-reranker``; :mod:`encoder.reranker`).

Examples are (query, relevant passage, negatives) read from a JSON-lines file
(:func:`read_examples`; :mod:`encoder.rerank_data` writes one from the shared data, its
negatives mined with BM25 and with the encoder). Each step draws ``queries`` examples and
scores each query against its positive and ``negatives`` of its negatives (the passages of
other queries in the batch when it has too few): a softmax cross-entropy over those scores
(the positive first), the listwise loss cross-encoders are trained with.

The network starts from an encoder checkpoint (the shipped one by default) with a zero head;
the head learns at ten times the network's rate. Seeded (a step's batch is a function of
the seed and the step); ``out/last`` holds the state every ``checkpoint_every_s`` seconds
(fp32 with the optimiser, safetensors as the encoder's training writes it: a stopped run
resumes from it), and ``out`` the reranker each time as well (fp16, 8-bit embedding
tables), so a run cut short (a GPU lease that ends) still leaves the best so far.
A time budget (``budget_s``) ends the run where the time runs out, the schedule cut to fit.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from encoder.checkpoint import load_training_state, read_checkpoint, save_training_state
from encoder.config import EncoderConfig
from encoder.device import autocast, pick_device
from encoder.model import TransformerEncoder
from encoder.reranker import QUERY_TOKENS, CrossScorer, from_encoder, pair_ids, save

log = logging.getLogger(__name__)
PROBE = 5  # steps timed before a time budget sets how many the run takes


@dataclass
class RerankTrainConfig:
    """One reranker training run (saved in its config.json under ``training``)."""

    examples: str  # JSON lines: {"query", "positive", "negatives": [...], "source"?}
    out_dir: str
    init_from: str = "models/encoder-default"
    steps: int = 2000
    queries: int = 16  # examples a step
    negatives: int = 7  # passages against each positive
    lr: float = 1e-4
    head_lr_scale: float = 10.0
    weight_decay: float = 0.01
    warmup_steps: int = 100
    max_tokens: int = 192  # a pair is cut here (at most the encoder's max_tokens)
    query_tokens: int = QUERY_TOKENS
    seed: int = 1
    device: str | None = None
    budget_s: float | None = None  # end where this many seconds run out, schedule cut to fit
    checkpoint_every_s: float = 180.0
    marked: bool = True  # match-marked ids (encoder.reranker's module doc)


@dataclass
class Example:
    query: list[int]
    positive: list[int]
    negatives: list[list[int]]


def read_examples(path: str | Path, tokenizer: Any, max_tokens: int) -> list[Example]:
    """The examples of a JSON-lines file, tokenized (each text cut at ``max_tokens``)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path} holds no examples")
    texts: list[str] = []
    for r in rows:
        texts += [r["query"], r["positive"], *r.get("negatives", [])]
    from encoder.tokenizer import clean_text

    ids = [e.ids[:max_tokens] for e in tokenizer.encode_batch([clean_text(t) for t in texts])]
    out, i = [], 0
    for r in rows:
        n = len(r.get("negatives", []))
        out.append(Example(ids[i], ids[i + 1], ids[i + 2:i + 2 + n]))
        i += 2 + n
    return out


def lr_scale(step: int, steps: int, warmup: int) -> float:
    """Linear warm-up, then linear decay to 10 % of the peak at ``steps``."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.1, 1.0 - 0.9 * (step - warmup) / max(1, steps - warmup))


def batch_of(examples: Sequence[Example], step: int, cfg: RerankTrainConfig,
             vocab: int | None = None) -> list[list[list[int]]]:
    """Step ``step``'s groups: per drawn example, its positive's pair first, then
    ``cfg.negatives`` negatives' pairs (a pure function of the seed and the step); ids
    match-marked with ``vocab`` (:func:`encoder.reranker.pair_ids`)."""
    rng = np.random.default_rng([cfg.seed, step])
    picked = rng.choice(len(examples), size=min(cfg.queries, len(examples)), replace=False)
    groups = []
    for j, k in enumerate(picked):
        ex = examples[int(k)]
        negs = list(ex.negatives)
        rng.shuffle(negs)  # type: ignore[arg-type]
        negs = negs[:cfg.negatives]
        others = [examples[int(o)].positive for o in picked if o != k]
        while len(negs) < cfg.negatives and others:  # in-batch passages fill the group
            negs.append(others[(j + len(negs)) % len(others)])
        groups.append([pair_ids(ex.query, p, cfg.max_tokens, cfg.query_tokens, vocab)
                       for p in [ex.positive, *negs]])
    return groups


def _padded(seqs: Sequence[Sequence[int]], pad: int) -> torch.Tensor:
    t = max(len(s) for s in seqs)
    out = torch.full((len(seqs), t), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def group_loss(scorer: CrossScorer, groups: list[list[list[int]]], device: torch.device
               ) -> tuple[torch.Tensor, float]:
    """The listwise loss of a step's groups (equal sizes) and the share ranked right."""
    flat = [p for g in groups for p in g]
    ids = _padded(flat, scorer.config.pad_id).to(device)
    with autocast(device):
        scores = scorer(ids).float().view(len(groups), -1)
    target = torch.zeros(len(groups), dtype=torch.long, device=device)
    loss = F.cross_entropy(scores, target)
    acc = float((scores[:, 0] > scores[:, 1:].amax(dim=1)).float().mean())  # ties: wrong
    return loss, acc


def train(cfg: RerankTrainConfig, on_save: Callable[[Path, int], None] | None = None) -> Path:
    """Train; returns ``cfg.out_dir`` (the reranker as of the last save)."""
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    meta, state, tokenizer = read_checkpoint(cfg.init_from, "an encoder")
    base = TransformerEncoder(EncoderConfig.from_dict(meta["architecture"]))
    base.load_state_dict(state)
    cfg.max_tokens = min(cfg.max_tokens, base.config.max_tokens)
    scorer = from_encoder(base, cfg.marked)
    scorer = scorer.to(device).train()
    head = list(scorer.head.parameters())
    body = [p for n, p in scorer.named_parameters() if not n.startswith("head.")]
    opt = torch.optim.AdamW([{"params": body, "lr": cfg.lr},
                             {"params": head, "lr": cfg.lr * cfg.head_lr_scale}],
                            weight_decay=cfg.weight_decay)
    start = load_training_state(out, scorer, opt)  # out/last, as the encoder's training
    examples = read_examples(cfg.examples, tokenizer, cfg.max_tokens)
    log.info("%d examples; steps %d..%d of %d queries x %d passages", len(examples), start,
             cfg.steps, cfg.queries, cfg.negatives + 1)
    steps, saved_at, ema = cfg.steps, time.time(), None
    history: list[dict[str, float]] = []

    def checkpoint(step: int) -> None:
        save_training_state(out, scorer, tokenizer, opt, step, asdict(cfg))
        extra = {"training": {**asdict(cfg), "step": step, "steps": steps,
                              "seconds": round(time.time() - t_start, 1),
                              "device": str(device), "history": history[-20:]},
                 "kind": "reranker"}
        # fp16 with 8-bit embedding tables, as shipped: the match-marked table is twice the
        # encoder's, and at fp16 the weights (23 MB) would not come back from a lent GPU
        # (16 MiB a file)
        save(scorer, tokenizer, out, extra, precision="fp16+q8", pair_tokens=cfg.max_tokens,
             query_tokens=cfg.query_tokens)
        if on_save is not None:
            on_save(out, step)

    t_loop = t_probe = time.time()
    for step in range(start, cfg.steps):
        if step >= steps:
            break
        if cfg.budget_s is not None and step >= start + PROBE and (step - start) % PROBE == 0:
            # cut the schedule to fit, re-read every PROBE steps: the first steps (a GPU's
            # warm-up) run far slower than the rest, and one early reading ended a run at a
            # fraction of its budget
            if step == start + PROBE:
                t_probe = time.time()
                rate = (t_probe - t_loop) / PROBE
            else:
                rate = (time.time() - t_probe) / (step - start - PROBE)
            left = cfg.budget_s - (time.time() - t_start)
            fit = min(cfg.steps, step + max(0, int(left / rate)))
            if step == start + PROBE or (step - start) % (PROBE * 40) == 0:
                log.info("time budget %.0f s: %d steps at %.3f s a step", cfg.budget_s, fit,
                         rate)
            steps = max(fit, step)
            if step >= steps:
                break
        for g, scale in zip(opt.param_groups, (1.0, cfg.head_lr_scale), strict=True):
            g["lr"] = cfg.lr * scale * lr_scale(step, steps, cfg.warmup_steps)
        loss, acc = group_loss(scorer, batch_of(examples, step, cfg, scorer.vocab), device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(scorer.parameters(), 1.0)
        opt.step()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError(f"the loss is {value} at step {step}")
        ema = (value, acc) if ema is None else (0.98 * ema[0] + 0.02 * value,
                                               0.98 * ema[1] + 0.02 * acc)
        if (step + 1) % 50 == 0:
            history.append({"step": step + 1, "loss": round(ema[0], 4),
                            "accuracy": round(ema[1], 4)})
            log.info("step %d/%d loss %.4f accuracy %.3f", step + 1, steps, *ema)
        if time.time() - saved_at >= cfg.checkpoint_every_s:
            checkpoint(step + 1)
            saved_at = time.time()
    checkpoint(min(steps, cfg.steps))
    return out
