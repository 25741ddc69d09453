"""Adapting an encoder to one collection's documents, without labels (issue 38): continued
contrastive training of the network on pairs cut from the documents (BM25 imitation with
BM25's hard negatives, spans of one document, title → text: :func:`encoder.adapt.
corpus_sources`), then the token bag's table on the same pairs, within a time budget.

Whether it helped is checked without labels on documents held back from the training:
each gives a probe query (a span of 8-20 words cut out of it) whose answer is the rest of
that document, among the other documents. Dense retrieval of the probes (MRR@10) by the
adapted encoder must beat the base encoder's, and so must hybrid retrieval (convex fusion
with BM25 at its best weight): an encoder that learnt to imitate BM25 gains alone and
fuses worse. The same probes scored by BM25 say how far the base encoder is from BM25 on
this text, and so whether adapting is worth it at all (:data:`SKIP_RATIO`)."""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from encoder.adapt import corpus_sources, encoder_fn
from index.store import Hit

log = logging.getLogger(__name__)
HELD_BACK = 200  # documents kept out of training, to probe with
DISTRACTORS = 2000  # other documents the probes are searched among
MIN_DOCS = 300  # fewer documents than this: nothing to learn from, nothing to check on
DEPTH = 100  # each side's list, as hybrid search reads them
MIN_PROBES = 50  # held-back documents long enough to probe with
# base dense MRR / BM25 MRR on the probes at or above which adapting is skipped (unless
# forced): the encoder already reads this text about as well as BM25 does. Chosen on dev
# collections (bench/adapt.py): 0.33-0.64 where dense is 0.56-0.71 x BM25 on real queries
# (jargon, tldr-pages, cranfield), 0.89 on scifact (train queries), where dense is 1.37 x
# and adapting lost 0.01-0.02
SKIP_RATIO = 0.8
BAG_PAIRS = 4000  # pairs per source the token bag's table trains on (each is encoded first)
# The job's budget (``adapt``'s ``budget_s``) covers all of it; training gets what the rest
# is expected to leave, from the seconds a document took to encode for the probe: the
# re-index (encoding and writing, searches running beside it: REINDEX_COST documents' worth
# each), the token bag's texts (about 2 per document, at most BAG_TEXTS), the check, and
# FIXED_S for loading, saving, calibrating and the swap. Measured on 10,000 documents, 2
# cores: re-index 100 s, bag 70 s, check 17 s (bench/adapt.py).
REINDEX_COST = 2.0
BAG_TEXTS = 18_000
FIXED_S = 20.0
MIN_TRAIN_S = 20.0  # however short the budget, training gets this long
DEFAULT_BUDGET_S = 540.0  # a 10,000-document job in under 10 minutes on 2 cores
# The training's settings below are read when a job runs: bench/adapt.py's server sets them
# to compare others (bench/adapt_serve.py); nothing else changes them.
# the BM25-imitation pairs' share of the training batches (the rest: spans of one document,
# title -> text)
LEXICAL_SHARE = 0.5
LR = 2e-4  # the network's peak learning rate
# pairs a step (above GRAD_CHUNK texts a forward, gradient caching keeps the memory of
# GRAD_CHUNK: encoder.grad_cache)
BATCH = 32
GRAD_CHUNK = 64
# what the lexical pairs imitate: "bm25" (BM25's ranking of pseudo-queries cut from the
# documents) or "hybrid" (BM25 fused with the base encoder, as the collection's hybrid
# search ranks them)
IMITATE = "bm25"
NETWORK = True  # False: the token bag's table alone is adapted, the network kept as it is
MIN_GAIN = 0.005  # the adapted encoder's probe MRR must beat the base's by this much
HYBRID_TOLERANCE = 0.0  # how much worse the adapted encoder's hybrid may check


@dataclass
class Probe:
    """Held-back probe queries and the documents they are searched among."""

    queries: list[str]
    answers: list[int]  # index into docs of each query's document
    docs: list[str]
    held_back: set[int] = field(default_factory=set)  # indices into the collection's texts


def make_probe(texts: Sequence[str], seed: int = 0) -> Probe:
    """Up to :data:`HELD_BACK` documents of at least 30 words, each with a span of 8-20
    words cut out as its query; the rest of the document is its answer."""
    rng = random.Random(seed)
    long = [i for i, t in enumerate(texts) if len(t.split()) >= 30]
    held = rng.sample(long, min(HELD_BACK, len(long)))
    queries, docs = [], []
    for i in held:
        words = texts[i].split()
        n = rng.randint(8, 20)
        s = rng.randint(0, len(words) - n)
        queries.append(" ".join(words[s:s + n]))
        docs.append(" ".join(words[:s] + words[s + n:]))
    held_set = set(held)
    others = [i for i in range(len(texts)) if i not in held_set]
    docs += [texts[i] for i in rng.sample(others, min(DISTRACTORS, len(others)))]
    return Probe(queries, list(range(len(queries))), docs, held_set)


def dense_lists(encode: Callable[[list[str]], np.ndarray], probe: Probe) -> list[list[Hit]]:
    """Each probe query's :data:`DEPTH` nearest documents by cosine."""
    scores = encode(probe.queries) @ encode(probe.docs).T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :DEPTH]
    return [[Hit(str(j), float(scores[r, j]), "", None, {}) for j in row]
            for r, row in enumerate(top)]


def bm25_lists(probe: Probe) -> list[list[Hit]]:
    """Each probe query's :data:`DEPTH` best documents by BM25 (stemmed, stop words out)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(probe.docs, stopwords="en", stemmer=stemmer,
                                   show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(probe.queries, stopwords="en", stemmer=stemmer,
                            show_progress=False)
    top, scores = retriever.retrieve(tokens, k=min(DEPTH, len(probe.docs)),
                                     show_progress=False)
    return [[Hit(str(j), float(s), "", None, {}) for j, s in zip(row, sc, strict=True) if s > 0]
            for row, sc in zip(np.asarray(top), np.asarray(scores), strict=True)]


def rr(lists: Sequence[Sequence[Hit]], answers: Sequence[int], k: int = 10) -> float:
    """MRR@k of ranked lists."""
    total = 0.0
    for hits, a in zip(lists, answers, strict=True):
        ids = [h.id for h in hits[:k]]
        total += 1.0 / (ids.index(str(a)) + 1) if str(a) in ids else 0.0
    return total / max(1, len(answers))


def hybrid_rr(dense: list[list[Hit]], bm25: list[list[Hit]], answers: Sequence[int]) -> float:
    """MRR@10 of hybrid search (convex fusion, as the service fuses) at its best weight."""
    from index.hybrid.calibration import GRID
    from index.hybrid.fusion import fuse

    return max(rr([fuse(d, b, 10, "convex", w, depth=DEPTH) for d, b in
                   zip(dense, bm25, strict=True)], answers) for w in GRID)


@dataclass
class Adapted:
    """What :func:`adapt` did and measured; ``accepted`` says whether to use it."""

    base: str
    out: str | None
    docs: int
    probe_queries: int
    probe_base: float
    probe_bm25: float
    probe_adapted: float | None = None
    probe_hybrid_base: float | None = None
    probe_hybrid_adapted: float | None = None
    accepted: bool = False
    skipped: bool = False
    reason: str = ""
    train_seconds: float = 0.0
    train_budget_s: float = 0.0  # what the network's training was given
    per_doc_ms: float = 0.0  # the base encoder's time a document, measured on the probe
    steps: int = 0
    seconds: float = 0.0
    held_back: list[int] = field(default_factory=list)  # indices of the probe documents

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "held_back"}


def should_skip(base: float, bm25: float) -> str | None:
    """Why adapting would not help (None when it may)."""
    if bm25 > 0 and base >= SKIP_RATIO * bm25:
        return (f"the encoder already finds held-back passages about as well as BM25 "
                f"(MRR@10 {base:.3f} against {bm25:.3f}); adapting is unlikely to help")
    return None


def adapt(base: Path, texts: Sequence[str], titles: Sequence[str], out: Path, name: str,
          budget_s: float = DEFAULT_BUDGET_S, force: bool = False, seed: int = 0,
          progress: Callable[[str, float], None] = lambda phase, share: None,
          started: float | None = None) -> Adapted:
    """Adapt the encoder at ``base`` to ``texts`` (with ``titles``, "" where none) into the
    checkpoint directory ``out`` (named ``name``), the whole job (from ``started``, default
    now, to the caller's re-index of the documents) taking about ``budget_s`` seconds:
    training gets what the rest is expected to leave (see :data:`REINDEX_COST`). Checks
    the result on held-back documents; ``accepted`` is false (and ``reason`` says why)
    when it is no better, or when adapting was skipped."""
    from encoder.checkpoint import read_checkpoint, save_checkpoint
    from encoder.config import EncoderConfig
    from encoder.model import TransformerEncoder
    from encoder.train import TrainConfig, train

    t0 = started if started is not None else time.time()
    if len(texts) < MIN_DOCS:
        raise ValueError(f"{len(texts)} documents; adapting needs at least {MIN_DOCS}")
    progress("checking", 0.0)
    probe = make_probe(texts, seed)
    if len(probe.queries) < MIN_PROBES:  # short texts (captions, titles, tweets)
        words = int(np.median([len(t.split()) for t in texts]))
        short = (f"its documents are short (median {words} words; {len(probe.queries)} of 30 "
               f"words or more, at least {MIN_PROBES} needed to check an adaptation on): "
               "the encoder was trained on short text like this, and there are no passages "
               "to adapt to")
        if force:
            raise ValueError(short)
        return Adapted(str(base), None, len(texts), 0, 0.0, 0.0, skipped=True, reason=short,
                       seconds=round(time.time() - t0, 1))
    encode_base = encoder_fn(base)
    t_enc = time.time()
    base_lists = dense_lists(encode_base, probe)
    per_doc = (time.time() - t_enc) / max(1, len(probe.docs) + len(probe.queries))
    lexical = bm25_lists(probe)
    report = Adapted(str(base), None, len(texts), len(probe.queries),
                     round(rr(base_lists, probe.answers), 4), round(rr(lexical, probe.answers), 4),
                     held_back=sorted(probe.held_back),
                     probe_hybrid_base=round(hybrid_rr(base_lists, lexical, probe.answers), 4))
    why = should_skip(report.probe_base, report.probe_bm25)
    if why is not None and not force:
        report.skipped, report.reason = True, why
        report.seconds = round(time.time() - t0, 1)
        return report
    work = out.with_name(out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    with corpus.open("w") as f:  # the held-back documents stay out of training
        for i, (t, title) in enumerate(zip(texts, titles, strict=True)):
            if i not in probe.held_back:
                f.write(json.dumps({"title": title, "text": t}) + "\n")
    progress("training", 0.1)
    t_train = time.time()
    reserve = per_doc * (REINDEX_COST * len(texts) + min(BAG_TEXTS, 2 * len(texts))
                         + len(probe.docs)) + FIXED_S
    report.train_budget_s = round(max(MIN_TRAIN_S, budget_s - (t_train - t0) - reserve), 1)
    report.per_doc_ms = round(per_doc * 1e3, 2)
    batch = BATCH
    cfg = TrainConfig(data_dir="", out_dir=str(work / "run"), init_from=str(base),
                      corpus=str(corpus), steps=2000, batch_size=batch,
                      grad_cache=GRAD_CHUNK if batch > GRAD_CHUNK else None,
                      lr=LR,
                      warmup_steps=20, max_doc_tokens=128, hard_negatives=True, mine_at=1.0,
                      lexical_share=LEXICAL_SHARE,
                      corpus_teacher=str(base) if IMITATE == "hybrid" else None,
                      checkpoint_every=100, seed=seed,
                      budget_s=report.train_budget_s)
    last = [0.0]

    def step_done(done: int, steps: int) -> None:  # training is 0.1-0.8 of the job's share
        if time.time() - last[0] >= 2.0 or done == steps:
            last[0] = time.time()
            progress("training", 0.1 + 0.7 * done / max(1, steps))

    if NETWORK:
        run = train(cfg, on_step=step_done)
        report.steps = cfg.steps
    else:  # the token bag alone (bench/adapt.py --bag-only)
        run = base
    meta, state, tokenizer = read_checkpoint(run, "an encoder")
    network = TransformerEncoder(EncoderConfig.from_dict(
        {**meta["architecture"], "name": name}))
    network.load_state_dict(state)
    if network.config.lexical_weight:
        progress("training the token bag", 0.8)
        network = _train_bag(network, tokenizer, corpus, seed)
    save_checkpoint(out, network, tokenizer, {"adapted": {"from": str(base)}}, "fp32")
    report.train_seconds = round(time.time() - t_train, 1)
    progress("checking", 0.9)
    report.out = str(out)
    adapted = dense_lists(encoder_fn(out), probe)
    report.probe_adapted = round(rr(adapted, probe.answers), 4)
    report.probe_hybrid_adapted = round(hybrid_rr(adapted, lexical, probe.answers), 4)
    # hybrid is what users search with: an encoder that gains alone but fuses worse with
    # BM25 (it learnt to imitate BM25, and now errs where BM25 errs) is not swapped in
    report.accepted = (report.probe_adapted >= report.probe_base + MIN_GAIN
                       and report.probe_hybrid_adapted
                       >= (report.probe_hybrid_base or 0.0) - HYBRID_TOLERANCE)
    report.reason = (f"held-back passages: MRR@10 dense {report.probe_base:.3f} → "
                     f"{report.probe_adapted:.3f}, hybrid {report.probe_hybrid_base:.3f} → "
                     f"{report.probe_hybrid_adapted:.3f} (BM25 {report.probe_bm25:.3f})")
    if not report.accepted:
        report.reason = "no better on " + report.reason
    shutil.rmtree(work, ignore_errors=True)
    report.seconds = round(time.time() - t0, 1)
    return report


def _train_bag(network: Any, tokenizer: Any, corpus: Path, seed: int) -> Any:
    from encoder.bag_train import BagTraining, train_table
    from encoder.dataset import Bundle
    from encoder.text_encoder import TextEncoder

    enc = TextEncoder(network, tokenizer, device="cpu")
    enc.use_backend(None)
    new, _ = train_table(enc, Bundle.from_sources(corpus_sources(corpus, seed)),
                         BagTraining(steps=300, per_source=BAG_PAIRS, seed=seed))
    return new
