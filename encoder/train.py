"""Contrastive training of the encoder (``qkv train-encoder``); reads top to bottom.

Single process on CPU or one GPU; several GPUs with ``torchrun`` (DDP, each rank draws its
own batches, in-batch negatives are per rank). The pairs come from a :class:`Bundle`
(built from the data directory, or read from ``qkv build-pairs``' folder), tokenised once
before the first step; a loader thread cuts the next batches while the device works. Hard
negatives: each pair's fixed one (BM25's, NLI's contradiction) or, from ``mine_at`` of the
run on, one mined by the current model every ``mine_every`` steps (false negatives
filtered). Seeded; resumable from ``<out>/last``; writes a self-describing checkpoint to
``<out>`` with where and how fast it trained.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from encoder.adapt import corpus_sources
from encoder.checkpoint import (
    load_training_state,
    read_checkpoint,
    save_checkpoint,
    save_training_state,
)
from encoder.config import EncoderConfig
from encoder.dataset import META, TOKEN_CACHE, Bundle, Source, TokenTable
from encoder.device import autocast, pick_device
from encoder.grad_cache import cached_backward
from encoder.losses import InfoNCE, Matryoshka, duplicates
from encoder.mining import load_mined, mine_rows, save_mined
from encoder.model import TransformerEncoder
from encoder.sources import build_sources
from encoder.tokenizer import bundle_tokenizer, load_tokenizer

log = logging.getLogger(__name__)
BUDGET_PROBE = 5  # steps timed before a time budget (TrainConfig.budget_s) sets the rest


@dataclass
class TrainConfig:
    """One training run (saved in config.json under ``training``)."""

    data_dir: str  # the shared data directory, or a folder written by ``qkv build-pairs``
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
    mine_at: float = 0.3  # fraction of the run after which the model mines negatives
    mine_every: int = 1000  # and again every this many steps
    mine_pairs: int | None = None  # pairs of a retrieval source mined at a time (a sample);
    # None: 50,000 on a GPU, 2,000 on the CPU (where encoding them is the slow part)
    matryoshka: list[int] = field(default_factory=lambda: [32, 64, 128])
    lexical_share: float | None = None  # the BM25-imitation sources' share of the batches
    drop_sources: list[str] = field(default_factory=list)  # train without these (ablations)
    init_from: str | None = None  # go on from this checkpoint (its architecture, tokenizer)
    corpus: str | None = None  # adapt to a user's documents (no labels) instead of data_dir
    corpus_teacher: str | None = None  # with corpus: imitate hybrid search with this encoder
    checkpoint_every: int = 200
    seed: int = 0
    device: str | None = None
    stop_after: int | None = None  # end this process after N steps (resumable), e.g. a budget
    # train for about this many seconds, setting up (data, tokenizing) included: after
    # BUDGET_PROBE steps the run is cut to the steps that fit (its learning-rate schedule
    # with it), re-read every BUDGET_PROBE steps; ``steps`` stays the most it may run
    budget_s: float | None = None
    arch: dict[str, Any] = field(default_factory=dict)
    grad_cache: int | None = None  # texts a forward at most (encoder.grad_cache); None: all
    # graded pairs in the mixture from the start (issue 74's v4): a JSON-lines file of
    # {"a", "b", "score" in [0, 1]} (STS-B and SICK train, ``qkv graded-pairs``); every step
    # adds ``graded_weight`` x CoSENT (encoder.graded.cosent) over ``graded_batch`` of them
    graded: str | None = None
    graded_weight: float = 0.0
    graded_batch: int = 64


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


def load_graded(path: str, tok: Any, max_tokens: int) -> tuple[list[list[int]],
                                                               list[list[int]], np.ndarray]:
    """The graded pairs of ``path`` tokenized: first texts' ids, second texts' ids, scores."""
    import json

    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    if not rows:
        raise ValueError(f"{path} holds no graded pairs")
    from encoder.tokenizer import clean_text

    enc = tok.encode_batch([clean_text(r[k]) for r in rows for k in ("a", "b")])
    ids = [e.ids[:max_tokens] for e in enc]
    return ids[0::2], ids[1::2], np.array([float(r["score"]) for r in rows], np.float32)


def graded_loss(model: TransformerEncoder, graded: tuple[list[list[int]], list[list[int]],
                np.ndarray], step: int, cfg: TrainConfig, device: torch.device
                ) -> torch.Tensor:
    """CoSENT over step ``step``'s draw of graded pairs (a function of the seed and step)."""
    from encoder.graded import cosent
    from encoder.text_encoder import _pad

    a, b, gold = graded
    rng = np.random.default_rng([cfg.seed, step, 74])
    pick = rng.choice(len(gold), size=min(cfg.graded_batch, len(gold)), replace=False)
    with autocast(device):
        va, _ = model(_pad([a[i] for i in pick], model.config.pad_id).to(device))
        vb, _ = model(_pad([b[i] for i in pick], model.config.pad_id).to(device))
    cos = (va.float() * vb.float()).sum(-1)
    return cosent(cos, torch.from_numpy(gold[pick]).to(device), 20.0)


def _rank() -> tuple[int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def draw_batch(sources: list[Source], step: int, cfg: TrainConfig, rank: int
               ) -> tuple[int, np.ndarray]:
    """The batch of ``step`` is a pure function of (seed, step, rank): resuming replays it.
    Returns (source index, pair indices)."""
    rng = np.random.default_rng([cfg.seed, step, rank])
    p = np.array([s.weight for s in sources])
    k = int(rng.choice(len(sources), p=p / p.sum()))
    n = min(cfg.batch_size, len(sources[k]))
    return k, rng.choice(len(sources[k]), size=n, replace=False)


def load_bundle(cfg: TrainConfig) -> Bundle:
    """``cfg.data_dir``'s bundle: read when it is a ``qkv build-pairs`` folder, else built
    from the data directory (BM25 mining included: minutes). With ``lexical_share``, the
    BM25-imitation sources' weights are scaled to sum to it, the others to the rest."""
    if cfg.corpus:
        bundle = Bundle.from_sources(corpus_sources(cfg.corpus, cfg.seed,
                                                    teacher=cfg.corpus_teacher))
    elif (Path(cfg.data_dir) / META).is_file():
        bundle = Bundle.load(cfg.data_dir)
    else:
        bundle = Bundle.from_sources(build_sources(cfg.data_dir, cfg.seed))
    if cfg.drop_sources:
        bundle = bundle.without(cfg.drop_sources)
    share = cfg.lexical_share
    lex = [s for s in bundle.sources if s.name.startswith("lex-")]
    rest = [s for s in bundle.sources if not s.name.startswith("lex-")]
    if share is not None and lex and rest:
        for group, target in ((lex, share), (rest, 1 - share)):
            total = sum(s.weight for s in group)
            for s in group:
                s.weight = s.weight * target / total
    return bundle


class Loader:
    """Cuts the padded id tensors of steps ``start``, ``start + 1`` ... on a thread, a few
    ahead of the training loop (pinned, for an asynchronous copy to a GPU)."""

    def __init__(self, table: TokenTable, sources: list[Source], cfg: TrainConfig, rank: int,
                 start: int, end: int, pin: bool, ahead: int = 6) -> None:
        self.q: queue.Queue[tuple[int, np.ndarray, torch.Tensor, torch.Tensor] | BaseException
                            ] = queue.Queue(ahead)
        self.args = (table, sources, cfg, rank, start, end, pin)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        table, sources, cfg, rank, start, end, pin = self.args
        try:
            for step in range(start, end):
                k, idx = draw_batch(sources, step, cfg, rank)
                src = sources[k]
                q = table.batch(src.q[idx], cfg.max_query_tokens)
                d = table.batch(src.d[idx], cfg.max_doc_tokens)
                if pin:
                    q, d = q.pin_memory(), d.pin_memory()
                while not self.stopped.is_set():
                    try:
                        self.q.put((k, idx, q, d), timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if self.stopped.is_set():
                    return
        except BaseException as e:  # the training loop raises it rather than wait forever
            self.q.put(e)

    def stop(self) -> None:
        """The loop ended early (a time budget): the thread ends instead of waiting."""
        self.stopped.set()
        self.thread.join(timeout=5)

    def get(self) -> tuple[int, np.ndarray, torch.Tensor, torch.Tensor]:
        item = self.q.get()
        if isinstance(item, BaseException):
            raise RuntimeError("the batch loader failed") from item
        return item


@torch.no_grad()
def embed_rows(model: TransformerEncoder, table: TokenTable, rows: np.ndarray, max_len: int,
               device: torch.device, batch: int) -> torch.Tensor:
    """Unit vectors (n, d) on ``device`` of the texts at ``rows``, longest first."""
    model.eval()
    order = np.argsort(-table.lengths(rows), kind="stable")
    out = torch.empty(len(rows), model.config.d_model, device=device)
    for i in range(0, len(rows), batch):
        part = order[i:i + batch]
        with autocast(device):
            v, _ = model(table.batch(rows[part], max_len).to(device))
        out[torch.from_numpy(part).to(device)] = v.float()
    model.train()
    return out


def mine(model: TransformerEncoder, table: TokenTable, sources: list[Source], cfg: TrainConfig,
         device: torch.device, step: int) -> dict[int, np.ndarray]:
    """Per retrieval source, a fresh hard negative for a random ``mine_pairs`` of its pairs
    (the rest keep none): the current model's neighbours among those pairs' documents."""
    t0 = time.time()
    rng = np.random.default_rng([cfg.seed, step, 7])
    batch = 1024 if device.type == "cuda" else 128
    n = cfg.mine_pairs or (50_000 if device.type == "cuda" else 2_000)
    out: dict[int, np.ndarray] = {}
    for k, src in enumerate(sources):
        if not src.retrieval:
            continue
        idx = rng.choice(len(src), size=min(n, len(src)), replace=False)
        d_rows = np.unique(src.d[idx])
        xd = embed_rows(model, table, d_rows, cfg.max_doc_tokens, device, batch)
        xq = embed_rows(model, table, src.q[idx], cfg.max_query_tokens, device, batch)
        rows = np.full(len(src), -1, dtype=np.int32)
        rows[idx] = mine_rows(xq, xd, d_rows, src.d[idx], rng)
        out[k] = rows
    log.info("step %d: mined hard negatives for %d sources in %.0fs", step, len(out),
             time.time() - t0)
    return out


def _gpu_busy() -> float | None:
    try:
        return float(torch.cuda.utilization())
    except Exception:  # no pynvml, or no GPU: not measured
        return None


def train(cfg: TrainConfig, on_step: Callable[[int, int], None] | None = None) -> Path:
    """Run training; returns the checkpoint directory (``cfg.out_dir``). ``on_step(done,
    steps)`` is called after every step (``steps`` as cut to a time budget), and again if
    the cut ends the run at the step just done, for a job's progress."""
    rank, world = _rank()
    if cfg.grad_cache is not None and (world > 1 or cfg.grad_cache < 1):
        raise ValueError("grad_cache needs one process and a chunk of at least 1 text")
    if cfg.graded and cfg.graded_weight > 0 and (world > 1 or cfg.grad_cache):
        raise ValueError("graded pairs train in one process without grad_cache")
    device = pick_device(cfg.device)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
    torch.manual_seed(cfg.seed)
    out = Path(cfg.out_dir)
    t_setup = time.time()
    bundle = load_bundle(cfg)
    init = read_checkpoint(cfg.init_from, "an encoder") if cfg.init_from else None
    arch = EncoderConfig.from_dict(init[0]["architecture"]) if init else EncoderConfig(**cfg.arch)
    dims = tuple(sorted({m for m in cfg.matryoshka if 0 < m < arch.d_model}))
    arch = EncoderConfig(**{**arch.to_dict(), "matryoshka": dims})
    tok = bundle_tokenizer(out, bundle.texts, arch.vocab_size,
                           cfg.init_from or cfg.data_dir) if rank == 0 else None
    if world > 1:
        dist.barrier()
        tok = load_tokenizer(out / "tokenizer.json")
    assert tok is not None
    arch = EncoderConfig(**{**arch.to_dict(), "vocab_size": tok.get_vocab_size()})
    cfg.max_query_tokens = min(cfg.max_query_tokens, arch.max_tokens)
    cfg.max_doc_tokens = min(cfg.max_doc_tokens, arch.max_tokens)
    table = TokenTable.cached(tok, bundle.texts, max(cfg.max_query_tokens, cfg.max_doc_tokens),
                              None if cfg.corpus or not (Path(cfg.data_dir) / META).is_file()
                              else out.parent / TOKEN_CACHE)
    sources = bundle.sources
    model = TransformerEncoder(arch)
    if init:
        model.load_state_dict(init[1])
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = load_training_state(out, model, opt)
    pairs: torch.nn.Module = PairForward(model)
    if world > 1:  # one forward call per step, as DDP expects
        pairs = torch.nn.parallel.DistributedDataParallel(pairs)
    loss_fn = Matryoshka(InfoNCE(cfg.temperature), arch.matryoshka)
    graded = (load_graded(cfg.graded, tok, cfg.max_query_tokens)
              if cfg.graded and cfg.graded_weight > 0 else None)
    mine_from = int(cfg.mine_at * cfg.steps) if cfg.hard_negatives else cfg.steps + 1
    mined, last_mine = load_mined(out, start)
    end = cfg.steps if cfg.stop_after is None else min(cfg.steps, start + cfg.stop_after)
    setup_s = time.time() - t_setup
    loader = Loader(table, sources, cfg, rank, start, end, device.type == "cuda")
    bar = tqdm(range(start, end), initial=start, total=cfg.steps, disable=rank != 0,
               desc="train-encoder", mininterval=10)
    ema_loss = ema_acc = None
    t0, wait_s, mine_s, busy = time.time(), 0.0, 0.0, []
    asked = end  # the most this run may go to
    for step in bar:
        if step >= end:  # cut to a time budget
            break
        if cfg.budget_s is not None and world == 1 and step >= start + BUDGET_PROBE and (
                step - start) % BUDGET_PROBE == 0:
            # seconds a step so far, mining included; re-read every few steps, as the first
            # steps ran faster than the rest (a 357 s budget once took 411 s)
            rate = (time.time() - t0) / (step - start)
            fit = step + int(max(0.0, cfg.budget_s - (time.time() - t_setup)) / rate)
            fit = min(fit, asked)  # never past the steps asked for
            if fit != end:
                if step == start + BUDGET_PROBE:
                    log.info("time budget %.0f s: %d steps at %.2f s a step", cfg.budget_s,
                             fit, rate)
                cfg.steps = end = max(fit, step)
                mine_from = int(cfg.mine_at * cfg.steps) if cfg.hard_negatives else end + 1
                if step >= end:  # the progress said more: it ends here
                    if on_step is not None:
                        on_step(step, end)
                    break
        if step >= mine_from and (last_mine is None or step - last_mine >= cfg.mine_every):
            t_mine, last_mine = time.time(), step
            mined = mine(model, table, sources, cfg, device, step)
            mine_s += time.time() - t_mine
        t_wait = time.time()
        k, idx, q_ids, d_ids = loader.get()
        wait_s += time.time() - t_wait
        src = sources[k]
        neg = src.neg[idx] if cfg.hard_negatives else np.full(len(idx), -1, dtype=np.int32)
        if k in mined:
            neg = np.where(neg >= 0, neg, mined[k][idx])
        neg = neg[(neg >= 0) & (neg != src.d[idx]) & (neg != src.q[idx])]
        h_ids = table.batch(neg, cfg.max_doc_tokens).to(device, non_blocking=True) \
            if len(neg) else None
        cols = torch.from_numpy(np.concatenate([src.d[idx], neg])).to(device)
        same = duplicates(cols[:len(idx)], cols, torch.from_numpy(src.q[idx]).to(device))
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        model.train()
        opt.zero_grad(set_to_none=True)
        q_ids, d_ids = q_ids.to(device, non_blocking=True), d_ids.to(device, non_blocking=True)
        if cfg.grad_cache:  # the same gradient, one chunk's activations at a time
            loss, acc = cached_backward(model, (q_ids, d_ids, h_ids), loss_fn, cfg.grad_cache,
                                        device, same)
        else:
            with autocast(device):
                q, d, h = pairs(q_ids, d_ids, h_ids)
            loss, acc = loss_fn(q, d, h, same)
            if graded is not None:
                loss = loss + cfg.graded_weight * graded_loss(model, graded, step, cfg, device)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if on_step is not None:
            on_step(step + 1, end)
        if step % 20 == 0 or step + 1 == end:
            li, ai = loss.item(), acc.item()
            ema_loss = li if ema_loss is None else 0.8 * ema_loss + 0.2 * li
            ema_acc = ai if ema_acc is None else 0.8 * ema_acc + 0.2 * ai
            bar.set_postfix(loss=f"{ema_loss:.3f}", acc=f"{ema_acc:.3f}", src=src.name[:12])
            if device.type == "cuda" and step % 100 == 0 and (b := _gpu_busy()) is not None:
                busy.append(b)
        if rank == 0 and ((step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps):
            save_mined(out, step + 1, mined, last_mine)
            save_training_state(out, model, tok, opt, step + 1, asdict(cfg))
    bar.close()
    loader.stop()
    seconds = time.time() - t0
    if rank == 0 and end == cfg.steps:
        done = end - start
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        extra = {"training": {
            **asdict(cfg),
            "device_name": where,
            "train_minutes_this_session": round(seconds / 60, 1),
            "setup_seconds": round(setup_s, 1),
            "steps_per_second": round(done / max(seconds, 1e-9), 2),
            "loader_wait_share": round(wait_s / max(seconds, 1e-9), 3),
            "mining_share": round(mine_s / max(seconds, 1e-9), 3),
            "gpu_busy_percent_mean": round(float(np.mean(busy)), 1) if busy else None,
            "final_loss_ema": ema_loss,
            "final_acc_ema": ema_acc,
            "sources": {s.name: len(s) for s in sources},
        }}
        save_checkpoint(out, model, tok, extra)
    if world > 1:
        dist.destroy_process_group()
    return out
