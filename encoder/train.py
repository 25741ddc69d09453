"""Contrastive training of the encoder (``qkv train-encoder``); reads top to bottom.

Single process on CPU or one GPU; several GPUs with ``torchrun`` (DDP, each rank draws its
own batches, in-batch negatives are per rank). Seeded; resumable from ``<out>/last``;
writes a self-describing checkpoint to ``<out>`` and its evaluation report.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tokenizers import Tokenizer
from tqdm import tqdm

from encoder.checkpoint import load_training_state, save_checkpoint, save_training_state
from encoder.config import EncoderConfig
from encoder.device import autocast, pick_device
from encoder.losses import InfoNCE
from encoder.mining import mine_hard_negatives
from encoder.model import TransformerEncoder
from encoder.pairs import PairSource, build_sources, tokenizer_corpus
from encoder.text_encoder import TextEncoder, _pad
from encoder.tokenizer import clean_text, load_tokenizer, train_tokenizer

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """One training run (saved in config.json under ``training``)."""

    data_dir: str
    out_dir: str
    steps: int = 3000
    batch_size: int = 128
    lr: float = 7e-4
    weight_decay: float = 0.01
    warmup_steps: int = 300
    temperature: float = 0.05
    max_query_tokens: int = 64
    max_doc_tokens: int = 192
    hard_negatives: bool = True
    mine_at: float = 0.6  # fraction of the run after which hard negatives are mined
    checkpoint_every: int = 200
    seed: int = 0
    device: str | None = None
    stop_after: int | None = None  # end this process after N steps (resumable), e.g. a budget
    arch: dict[str, Any] = field(default_factory=dict)


class PairForward(torch.nn.Module):
    """Encodes a step's queries, documents and hard negatives in one module call (so DDP
    sees one forward per backward). Ids (B, Tq), (B, Td), (H, Td) → unit vectors."""

    def __init__(self, model: TransformerEncoder) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, q_ids: torch.Tensor, d_ids: torch.Tensor, h_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        q, _ = self.model(q_ids)
        d, _ = self.model(d_ids)
        h = self.model(h_ids)[0] if h_ids is not None else None
        return q, d, h


def _rank() -> tuple[int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def draw_batch(
    sources: list[PairSource], step: int, cfg: TrainConfig, rank: int
) -> tuple[PairSource, np.ndarray]:
    """The batch of ``step`` is a pure function of (seed, step, rank): resuming replays it."""
    rng = np.random.default_rng([cfg.seed, step, rank])
    p = np.array([s.weight for s in sources])
    src = sources[rng.choice(len(sources), p=p / p.sum())]
    n = min(cfg.batch_size, len(src.pairs))
    return src, rng.choice(len(src.pairs), size=n, replace=False)


def _ids(tok: Tokenizer, texts: list[str], max_len: int) -> torch.Tensor:
    encs = tok.encode_batch([clean_text(t) for t in texts])
    return _pad([e.ids[:max_len] for e in encs], 0)


def _tokenizer(out: Path, sources: list[PairSource], vocab_size: int) -> Tokenizer:
    path = out / "tokenizer.json"
    if path.is_file():
        return load_tokenizer(path)
    t0 = time.time()
    tok = train_tokenizer(tokenizer_corpus(sources), vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    log.info("trained BPE tokenizer (%d tokens) in %.0fs", tok.get_vocab_size(), time.time() - t0)
    return tok


def train(cfg: TrainConfig) -> Path:
    """Run training; returns the checkpoint directory (``cfg.out_dir``)."""
    rank, world = _rank()
    device = pick_device(cfg.device)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
    torch.manual_seed(cfg.seed)
    out = Path(cfg.out_dir)
    sources = build_sources(cfg.data_dir, cfg.seed)
    arch = EncoderConfig(**cfg.arch)
    tok = _tokenizer(out, sources, arch.vocab_size) if rank == 0 else None
    if world > 1:
        dist.barrier()
        tok = load_tokenizer(out / "tokenizer.json")
    assert tok is not None
    arch = EncoderConfig(**{**arch.to_dict(), "vocab_size": tok.get_vocab_size()})
    max_q, max_d = (
        min(cfg.max_query_tokens, arch.max_tokens),
        min(cfg.max_doc_tokens, arch.max_tokens),
    )
    model = TransformerEncoder(arch).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = load_training_state(out, model, opt)
    pairs: torch.nn.Module = PairForward(model)
    if world > 1:  # one forward call per step, as DDP expects
        pairs = torch.nn.parallel.DistributedDataParallel(pairs)
    loss_fn = InfoNCE(cfg.temperature)
    hard: dict[str, dict[int, str]] = _load_hard(out)
    mine_step = int(cfg.mine_at * cfg.steps) if cfg.hard_negatives else cfg.steps + 1
    bar = tqdm(
        range(start, cfg.steps),
        initial=start,
        total=cfg.steps,
        disable=rank != 0,
        desc="train-encoder",
        mininterval=5,
    )
    ema_loss = ema_acc = None
    t0 = time.time()
    end = cfg.steps if cfg.stop_after is None else min(cfg.steps, start + cfg.stop_after)
    for step in bar:
        if step >= end:
            break
        if step == mine_step and not hard:
            hard = _mine(model, tok, sources, device, out, cfg, rank)
        src, idx = draw_batch(sources, step, cfg, rank)
        queries = [src.pairs[i][0] for i in idx]
        docs = [src.pairs[i][1] for i in idx]
        negs = [hard[src.name][i] for i in idx if i in hard.get(src.name, {})]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        model.train()
        with autocast(device):
            q, d, h = pairs(
                _ids(tok, queries, max_q).to(device),
                _ids(tok, docs, max_d).to(device),
                _ids(tok, negs, max_d).to(device) if negs else None,
            )
        loss, acc = loss_fn(q, d, h)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema_loss = loss.item() if ema_loss is None else 0.95 * ema_loss + 0.05 * loss.item()
        ema_acc = acc.item() if ema_acc is None else 0.95 * ema_acc + 0.05 * acc.item()
        bar.set_postfix(loss=f"{ema_loss:.3f}", acc=f"{ema_acc:.3f}", src=src.name[:12])
        if rank == 0 and ((step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps):
            save_training_state(out, model, tok, opt, step + 1, asdict(cfg))
    bar.close()
    minutes = (time.time() - t0) / 60
    if rank == 0 and end == cfg.steps:
        extra = {
            "training": {
                **asdict(cfg),
                "train_minutes_this_session": round(minutes, 1),
                "final_loss_ema": ema_loss,
                "final_acc_ema": ema_acc,
                "sources": {s.name: len(s.pairs) for s in sources},
            }
        }
        save_checkpoint(out, model, tok, extra)
    if world > 1:
        dist.destroy_process_group()
    return out


def _load_hard(out: Path) -> dict[str, dict[int, str]]:
    path = out / "hard_negatives.json"
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text())
    return {name: {int(i): t for i, t in negs.items()} for name, negs in raw.items()}


def _mine(
    model: TransformerEncoder,
    tok: Tokenizer,
    sources: list[PairSource],
    device: torch.device,
    out: Path,
    cfg: TrainConfig,
    rank: int,
) -> dict[str, dict[int, str]]:
    """Mine one hard negative per pair of each retrieval source with the current model."""
    enc = TextEncoder(model, tok, device=device)
    hard = {
        s.name: mine_hard_negatives(enc, s.pairs, seed=cfg.seed)
        for s in sources
        if s.retrieval and len(s.pairs) <= 20_000
    }
    model.train()
    if rank == 0:
        (out / "hard_negatives.json").write_text(json.dumps(hard))
    return hard
