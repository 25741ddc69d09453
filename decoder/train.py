"""Training of the retrieval-augmented decoder (``qkv train-decoder``); reads top to bottom.

Data: (source, target) pairs of ``<data_dir>/train`` and ``val`` (:mod:`decoder.data`).
The translation memory is the training pairs themselves: each pair's neighbours are other
training pairs, found by a ``retrieve`` callable that the caller builds (``api`` wires the
qkv encoder and FAISS; this package imports neither) and that never returns the pair
itself. Neighbours are retrieved once and kept in ``<out>/neighbours.json``.

Loss: cross-entropy with label smoothing on the target tokens. Learning rate: linear
warm-up, then cosine decay to 10%. bf16 autocast where available. Batches: every pair
once per epoch, grouped by length (:class:`BatchPlan`). Seeded: the batch and the dropout
of step s depend only on (seed, s), so a run resumed from ``<out>/last`` (weights,
optimizer state, step) ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm

from decoder import batch as batching
from decoder.config import DecoderConfig
from decoder.data import read_pairs
from decoder.model import RetrievalAugmentedTransformer
from decoder.tokenizer import encode, load_tokenizer, train_joint_tokenizer
from encoder.checkpoint import load_training_state, save_checkpoint, save_training_state
from encoder.device import autocast, pick_device

log = logging.getLogger(__name__)

# (queries, for each the index of the memory pair to leave out or None) → for each query
# up to k (memory index, weight) pairs, weights softmax-normalised, best first.
Retrieve = Callable[[Sequence[str], Sequence[int | None]], list[list[tuple[int, float]]]]
Neighbours = list[list[tuple[int, float]]]


@dataclass
class TrainConfig:
    """One training run (saved in config.json under ``training``)."""

    data_dir: str
    out_dir: str
    src_lang: str = "en"
    tgt_lang: str = "fr"
    k: int = 4  # neighbours per pair; 0 trains the baseline without retrieval
    steps: int = 4000
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 1000
    label_smoothing: float = 0.1
    vocab_size: int = 8000
    eval_every: int = 1000
    checkpoint_every: int = 500
    seed: int = 0
    device: str | None = None
    stop_after: int | None = None  # end this process after N steps (resumable), e.g. a budget
    train_fraction: float = 1.0  # train on this share of the train pairs (train_subset)
    retrieval: dict[str, Any] = field(default_factory=dict)  # who retrieved: recorded, cache key
    arch: dict[str, Any] = field(default_factory=dict)


def train_subset(n: int, fraction: float, seed: int) -> list[int]:
    """The indices of the train pairs a run with ``train_fraction`` trains on: a seeded
    random share, in corpus order (the rest are pairs the decoder never saw)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"train_fraction must be in (0, 1], got {fraction}")
    if fraction == 1.0:
        return list(range(n))
    keep = np.random.default_rng(seed).permutation(n)[: max(1, round(n * fraction))]
    return sorted(int(i) for i in keep)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


class BatchPlan:
    """Which pairs each step trains on: every pair once per epoch, in batches of similar
    length so little padding is computed. Epoch e: a shuffle seeded by (seed, e), cut
    into pools of 50 batches, each pool sorted by length and cut into batches, the
    batches shuffled. Step s is batch s mod E of epoch s div E, a pure function of
    (seed, s), so a resumed run replays the same batches."""

    POOL = 50

    def __init__(self, lengths: Sequence[int], cfg: TrainConfig) -> None:
        self.lengths = np.asarray(lengths)
        self.seed, self.size = cfg.seed, cfg.batch_size
        self.per_epoch = -(-len(self.lengths) // self.size)
        self._epoch: tuple[int, list[np.ndarray]] | None = None

    def epoch(self, e: int) -> list[np.ndarray]:
        if self._epoch is None or self._epoch[0] != e:
            rng = np.random.default_rng([self.seed, e])
            perm = rng.permutation(len(self.lengths))
            batches: list[np.ndarray] = []
            for start in range(0, len(perm), self.size * self.POOL):
                pool = perm[start : start + self.size * self.POOL]
                pool = pool[np.argsort(self.lengths[pool], kind="stable")]
                batches += [pool[i : i + self.size] for i in range(0, len(pool), self.size)]
            self._epoch = (e, [batches[i] for i in rng.permutation(len(batches))])
        return self._epoch[1]

    def __call__(self, step: int) -> np.ndarray:
        return self.epoch(step // self.per_epoch)[step % self.per_epoch]


@dataclass
class Corpus:
    """Token ids of one split and each pair's neighbours (indices into the train split)."""

    src: list[list[int]]
    tgt: list[list[int]]
    neighbours: Neighbours


def make_batch(
    idx: Sequence[int], corpus: Corpus, memory_tgt: list[list[int]], c: DecoderConfig
) -> tuple[torch.Tensor, ...]:
    """(src, tgt_in, tgt_out, neighbour ids or empty, neighbour weights or empty)."""
    src = batching.sources([corpus.src[i] for i in idx], c)
    tgt_in, tgt_out = batching.targets([corpus.tgt[i] for i in idx], c)
    nbrs = [corpus.neighbours[i] for i in idx]
    n_ids, n_w = batching.neighbours([[memory_tgt[j] for j, _ in row] for row in nbrs],
                                     [[w for _, w in row] for row in nbrs], c)
    if n_ids is None or n_w is None:
        n_ids, n_w = torch.zeros(len(idx), 0, 1, dtype=torch.long), torch.zeros(len(idx), 0)
    return src, tgt_in, tgt_out, n_ids, n_w


def loss_on(model: RetrievalAugmentedTransformer, batch: tuple[torch.Tensor, ...],
            device: torch.device, label_smoothing: float = 0.0) -> tuple[torch.Tensor, int]:
    """Mean token cross-entropy of a batch and its number of target tokens."""
    src, tgt_in, tgt_out, n_ids, n_w = (t.to(device) for t in batch)
    with autocast(device):
        logits = model(src, tgt_in, n_ids, n_w)  # (B, T, V)
    pad = model.config.pad_id
    loss = F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=pad,
                           label_smoothing=label_smoothing)
    return loss, int((tgt_out != pad).sum())


@torch.no_grad()
def evaluate(model: RetrievalAugmentedTransformer, corpus: Corpus, memory_tgt: list[list[int]],
             device: torch.device, batch_size: int = 128) -> dict[str, float]:
    """Teacher-forced validation: token-level NLL (no smoothing) and perplexity."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for start in range(0, len(corpus.src), batch_size):
        idx = range(start, min(start + batch_size, len(corpus.src)))
        loss, n = loss_on(model, make_batch(idx, corpus, memory_tgt, model.config), device)
        total, tokens = total + loss.item() * n, tokens + n
    model.train(was_training)
    nll = total / max(1, tokens)
    return {"val_nll": round(nll, 4), "val_ppl": round(math.exp(min(nll, 50.0)), 3)}


def _tokenizer(out: Path, pairs: list[tuple[str, str]], vocab_size: int) -> Tokenizer:
    path = out / "tokenizer.json"
    if path.is_file():
        return load_tokenizer(path)
    tok = train_joint_tokenizer([t for p in pairs for t in p], vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    log.info("trained joint BPE tokenizer: %d tokens", tok.get_vocab_size())
    return tok


def retrieve_neighbours(
    out: Path, cfg: TrainConfig, train: list[tuple[str, str]], val: list[tuple[str, str]],
    retrieve: Retrieve | None,
) -> tuple[Neighbours, Neighbours]:
    """Each train pair's neighbours (itself left out) and each val pair's, from the train
    pairs; cached in ``<out>/neighbours.json`` under the run's k and retrieval record."""
    if cfg.k == 0:
        return [[] for _ in train], [[] for _ in val]
    path = out / "neighbours.json"
    key = {"k": cfg.k, "retrieval": cfg.retrieval, "train": len(train), "val": len(val)}
    if path.is_file():
        cached = json.loads(path.read_text())
        if cached["key"] == key:
            return ([[(int(j), float(w)) for j, w in r] for r in cached["train"]],
                    [[(int(j), float(w)) for j, w in r] for r in cached["val"]])
    if retrieve is None:
        raise ValueError(f"k={cfg.k} needs a retrieve function (or k=0 for the baseline)")
    t0 = time.time()
    tr = retrieve([s for s, _ in train], list(range(len(train))))
    va = retrieve([s for s, _ in val], [None] * len(val))
    assert all(i not in {j for j, _ in r} for i, r in enumerate(tr)), "a pair retrieved itself"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "train": tr, "val": va}))
    log.info("retrieved %d neighbours for %d + %d pairs in %.0fs", cfg.k, len(train), len(val),
             time.time() - t0)
    return tr, va


def train(cfg: TrainConfig, retrieve: Retrieve | None = None) -> Path:
    """Run training; returns the checkpoint directory (``cfg.out_dir``)."""
    device = pick_device(cfg.device)
    out = Path(cfg.out_dir)
    train_pairs = read_pairs(cfg.data_dir, "train", cfg.src_lang, cfg.tgt_lang)
    if cfg.train_fraction < 1.0:
        if cfg.k > 0:  # the training retriever indexes every train pair
            raise ValueError("train_fraction < 1 trains the baseline only (k = 0)")
        train_pairs = [train_pairs[i] for i in
                       train_subset(len(train_pairs), cfg.train_fraction, cfg.seed)]
    val_pairs = read_pairs(cfg.data_dir, "val", cfg.src_lang, cfg.tgt_lang)
    tok = _tokenizer(out, train_pairs, cfg.vocab_size)
    arch = DecoderConfig(**{**cfg.arch, "vocab_size": tok.get_vocab_size()})
    tr_nbrs, va_nbrs = retrieve_neighbours(out, cfg, train_pairs, val_pairs, retrieve)

    def ids(texts: list[str]) -> list[list[int]]:
        return encode(tok, texts, arch.max_tokens)[0]

    corpus = Corpus(ids([s for s, _ in train_pairs]), ids([t for _, t in train_pairs]), tr_nbrs)
    val = Corpus(ids([s for s, _ in val_pairs]), ids([t for _, t in val_pairs]), va_nbrs)
    plan = BatchPlan([len(a) + len(b) for a, b in zip(corpus.src, corpus.tgt, strict=True)], cfg)
    torch.manual_seed(cfg.seed)
    model = RetrievalAugmentedTransformer(arch).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = load_training_state(out, model, opt)
    end = cfg.steps if cfg.stop_after is None else min(cfg.steps, start + cfg.stop_after)
    bar = tqdm(range(start, end), initial=start, total=cfg.steps, desc="train-decoder",
               mininterval=5)
    ema = None
    metrics: dict[str, float] = {}
    t0 = time.time()
    for step in bar:
        torch.manual_seed(cfg.seed * 1_000_003 + step)  # dropout of step s: resumable
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        model.train()
        batch = make_batch(plan(step).tolist(), corpus, corpus.tgt, arch)
        loss, _ = loss_on(model, batch, device, cfg.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        bar.set_postfix(loss=f"{ema:.3f}", **metrics, refresh=False)
        if (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
            metrics = evaluate(model, val, corpus.tgt, device)
            log.info("step %d: %s", step + 1, metrics)
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == end:
            save_training_state(out, model, tok, opt, step + 1, asdict(cfg))
    bar.close()
    if end == cfg.steps:
        metrics = evaluate(model, val, corpus.tgt, device)
        log.info("final: %s", metrics)
        extra = {"training": {**asdict(cfg), "train_minutes_this_session":
                              round((time.time() - t0) / 60, 1), "final_loss_ema": ema,
                              "pairs": {"train": len(train_pairs), "val": len(val_pairs)}},
                 "metrics": metrics}
        save_checkpoint(out, model, tok, extra)
    return out
