"""Graded-similarity tuning of a trained encoder (issue 40, item 3: a recipe check that fits
2 cores): ``qkv tune-graded``.

The contrastive recipe (:mod:`encoder.train`) only learns which of a batch's texts is a
pair's positive; STS-B and SICK score how *close* two sentences are, on a scale, and the
network never saw that order except as SICK's entailment and STS-B's ≥ 4 pairs. Here a
trained checkpoint goes on with CoSENT (Su 2022, "CoSENT: a more efficient sentence vector
scheme than Sentence-BERT"; the loss of sentence-transformers' ``CoSENTLoss``) on the
*train* splits of STS-B (0–5) and SICK (relatedness 1–5): for every two pairs of a batch
whose gold scores differ, the cosine of the higher one should be the higher,
``log(1 + Σ_{y_i > y_j} exp(λ(cos_j − cos_i)))``.

The vectors trained are the ones served: the network's unit vector plus the checkpoint's
token bag (:mod:`encoder.token_bag`, its table frozen), renormalised. Against forgetting,
each step also distils the base encoder's in-batch ranking of retrieval pairs
(``keep_pairs``: the KL divergence from the base's softmax over a batch's documents to the
tuned one's), so the retrieval the recipe was chosen on moves as little as possible; how
much it moved is what ``bench/encoder_dev.py`` decides on (dev sets only). Measured on v3
and not shipped: SICK trial 0.670 → 0.705, but FOLDOC and Cranfield −2 % (models/README.md).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from encoder.device import autocast, pick_device
from encoder.pairs import Graded
from encoder.text_encoder import _pad
from encoder.token_bag import term_weights

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class GradedOptions:
    """Options of :func:`train_graded`."""

    steps: int = 400
    batch_size: int = 64  # graded pairs a step
    lr: float = 2e-5
    scale: float = 20.0  # CoSENT's λ (sentence-transformers' default)
    keep: float = 10.0  # weight of the retention term (0: none); 1 measured the same on dev
    keep_batch: int = 64  # retrieval pairs a step for it
    keep_temperature: float = 0.05
    max_tokens: int = 96  # retrieval documents are cut here (they are only the anchor)
    warmup_steps: int = 40
    # each batch from one set (two sets' scales need not agree), or from all of them: mixed
    # measured a little better on dev (SICK trial 0.706 against 0.698, STS-B dev 0.812
    # against 0.814, dev retrieval 1.253 against 1.250 ×BM25; bench/history/, "Graded")
    per_set: bool = False
    # parameters left as they are: names or their prefixes ("embed", "blocks.0"), matched
    # on the network's parameter names
    freeze: tuple[str, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "keep_batch", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0 or not self.scale > 0 or self.keep < 0:
            raise ValueError("lr and scale must be > 0 and keep >= 0")


def cosent(cos: torch.Tensor, gold: torch.Tensor, scale: float) -> torch.Tensor:
    """CoSENT over a batch: ``cos`` (B,) the pairs' cosines, ``gold`` (B,) their scores."""
    diff = scale * (cos[None, :] - cos[:, None])  # [i, j] = λ(cos_j − cos_i)
    higher = gold[:, None] > gold[None, :]  # where pair i should be the closer one
    terms = torch.cat([diff.new_zeros(1), diff[higher]])
    return torch.logsumexp(terms, 0)


def frozen(name: str, freeze: Sequence[str]) -> bool:
    """Whether the parameter ``name`` is one ``freeze`` names, or under one it names."""
    return any(name == f or name.startswith(f + ".") for f in freeze)


def check_freeze(model: torch.nn.Module, freeze: Sequence[str]) -> None:
    """ValueError unless each name of ``freeze`` matches a parameter of ``model``."""
    names = [n for n, _ in model.named_parameters()]
    unknown = [f for f in freeze if not any(frozen(n, [f]) for n in names)]
    if unknown:
        raise ValueError(f"no parameter of the network is named {', '.join(unknown)} "
                         "(names or prefixes such as embed, blocks.0, pool)")


class Served(torch.nn.Module):
    """The vectors an encoder serves, differentiable in its network:
    ``normalise(n(v) + w·bag)`` with the token bag's idf and table frozen."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        cfg = model.config
        self.weight = float(cfg.lexical_weight or 0.0)
        if self.weight:  # the bag's own table is frozen; the input embeddings are not
            self.emb = model.lexical if cfg.lexical_table else model.embed
            self.emb.weight.requires_grad_(not cfg.lexical_table)
            self.idf = model.get_buffer("lexical_idf").float().cpu().numpy()

    def forward(self, ids: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
        with autocast(device):
            v, _ = self.model(_pad(ids, self.model.config.pad_id).to(device))
        v = v.float()
        if not self.weight:
            return v
        r, c, w = term_weights(ids, self.idf)
        offsets = torch.from_numpy(np.searchsorted(r, np.arange(len(ids))))
        table = self.emb.weight.float()
        bag = F.embedding_bag(torch.from_numpy(c).to(table.device), table, offsets.to(
            table.device), mode="sum", per_sample_weights=torch.from_numpy(w).to(table.device))
        return F.normalize(v + self.weight * F.normalize(bag, dim=-1), dim=-1)


def train_graded(encoder: Any, sets: Sequence[Sequence[Graded]],
         keep_pairs: Sequence[tuple[str, str]] = (), options: GradedOptions = GradedOptions(),
         device: str | None = None) -> tuple[Any, dict[str, Any]]:
    """A copy of ``encoder``'s network (a :class:`encoder.TextEncoder`) tuned with CoSENT
    on the graded ``sets`` (with ``per_set``, each batch from one set, drawn by size),
    ``keep_pairs`` distilled from the original; and a report of the run."""
    o = options
    if not o.per_set:
        sets = [[p for s in sets for p in s]]
    sets = [s for s in sets if len(s) >= 2]
    if not sets:
        raise ValueError("graded tuning needs a set of at least two scored pairs")
    graded = [p for s in sets for p in s]
    starts = np.cumsum([0] + [len(s) for s in sets])
    p_set = np.diff(starts) / starts[-1]
    dev = pick_device(device)
    torch.manual_seed(o.seed)
    rng = np.random.default_rng(o.seed)
    tok = encoder.tokenize
    t0 = time.time()
    a_ids, _ = tok([a for a, _, _ in graded])
    b_ids, _ = tok([b for _, b, _ in graded])
    gold = torch.tensor([s for _, _, s in graded], dtype=torch.float32)
    keep = bool(o.keep and keep_pairs)
    if keep:
        kq, _ = tok([q for q, _ in keep_pairs])
        kd = [x[: o.max_tokens] for x in tok([d for _, d in keep_pairs])[0]]
    student = Served(copy.deepcopy(encoder.model).float().to(dev).train())
    teacher = Served(copy.deepcopy(encoder.model).float().to(dev).eval()) if keep else None
    check_freeze(student.model, o.freeze)
    for name, p in student.model.named_parameters():
        if frozen(name, o.freeze):
            p.requires_grad_(False)
    params = [p for p in student.model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"freeze {', '.join(o.freeze)} leaves nothing to train")
    opt = torch.optim.AdamW(params, lr=o.lr, weight_decay=0.01)
    losses: list[tuple[float, float]] = []
    t1 = time.time()
    for step in range(o.steps):
        for g in opt.param_groups:  # warm-up, then linear decay to 0
            g["lr"] = o.lr * min((step + 1) / o.warmup_steps,
                                 (o.steps - step) / max(1, o.steps - o.warmup_steps))
        k = int(rng.choice(len(sets), p=p_set)) if len(sets) > 1 else 0
        rows = starts[k] + rng.choice(len(sets[k]), min(o.batch_size, len(sets[k])),
                                      replace=False)
        va = student([a_ids[i] for i in rows], dev)
        vb = student([b_ids[i] for i in rows], dev)
        loss = cosent((va * vb).sum(-1), gold[rows].to(dev), o.scale)
        kept = torch.zeros((), device=dev)
        if keep and teacher is not None:
            rows = rng.choice(len(kq), min(o.keep_batch, len(kq)), replace=False)
            qs, ds = [kq[i] for i in rows], [kd[i] for i in rows]
            with torch.no_grad():
                target = F.softmax(teacher(qs, dev) @ teacher(ds, dev).T
                                   / o.keep_temperature, -1)
            logits = student(qs, dev) @ student(ds, dev).T / o.keep_temperature
            kept = F.kl_div(F.log_softmax(logits, -1), target, reduction="batchmean")
        total = loss + o.keep * kept
        opt.zero_grad()
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append((float(loss.detach()), float(kept.detach())))
        if (step + 1) % 50 == 0:
            recent = np.mean(losses[-50:], 0)
            log.info("graded step %d/%d: cosent %.3f keep %.4f", step + 1, o.steps, *recent)
    model = student.model.cpu().eval()
    k = max(1, min(50, len(losses) // 4))
    first, last = np.mean(losses[:k], 0), np.mean(losses[-k:], 0)
    report = {**dataclasses.asdict(o), "pairs": len(graded), "keep_pairs": len(keep_pairs),
              "setup_seconds": round(t1 - t0, 1), "train_seconds": round(time.time() - t1, 1),
              "cosent_first": round(float(first[0]), 4), "cosent_last": round(float(last[0]), 4),
              "keep_first": round(float(first[1]), 5), "keep_last": round(float(last[1]), 5)}
    return model, report
