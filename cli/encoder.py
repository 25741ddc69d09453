"""``qkv train-encoder``, ``eval-encoder``, ``build-pairs``, ``token-bag`` and ``tune-graded``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import typer

log = logging.getLogger(__name__)


def train_encoder(
    data: Path | None = typer.Option(None, "--data", help="The shared data directory "
                                     "(../shared/data), or a folder written by qkv build-pairs."),
    init: Path | None = typer.Option(None, "--init", help="Go on from this encoder checkpoint "
                                     "(its architecture, tokenizer), e.g. models/encoder-default."),
    corpus: Path | None = typer.Option(None, "--corpus", help="Adapt to these documents (JSONL "
                                       "with 'text' and optional 'title', or one per line), no "
                                       "labels: BM25-imitation and span pairs. Needs --init."),
    out: Path = typer.Option(Path("runs/encoder"), "--out", help="Checkpoint directory."),
    steps: int = typer.Option(3000, min=1),
    batch_size: int = typer.Option(128, min=2),
    lr: float = typer.Option(7e-4, min=0.0),
    warmup_steps: int = typer.Option(300, min=0),
    temperature: float = typer.Option(0.05, min=1e-4, help="InfoNCE temperature τ (fixed)."),
    max_query_tokens: int = typer.Option(64, min=4),
    max_doc_tokens: int = typer.Option(192, min=4),
    hard_negatives: bool = typer.Option(True, help="Fixed and mined hard negatives."),
    mine_at: float = typer.Option(0.3, min=0.0, max=1.0, help="Mine from this share of the run."),
    mine_every: int = typer.Option(1000, min=1, help="Mine again every N steps."),
    mine_pairs: int | None = typer.Option(
        None, min=100, help="Pairs per source mined at a time (default 50,000 on a GPU, "
        "2,000 on the CPU)."),
    lexical_share: float | None = typer.Option(
        None, min=0.0, max=1.0, help="Share of batches from the BM25-imitation sources."),
    drop_sources: str = typer.Option(
        "", "--drop-sources", help="Train without these sources of the bundle "
        "(comma-separated names, as config.json's training.sources lists them): ablations."),
    matryoshka: str = typer.Option("32,64,128", help="Prefix sizes trained besides the full "
                                   "vector (comma-separated; empty for none)."),
    checkpoint_every: int = typer.Option(200, min=1),
    seed: int = typer.Option(0),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1 ... (default: auto)."),
    stop_after: int | None = typer.Option(
        None, min=1, help="Stop this process after N steps (checkpointed; rerun resumes)."),
    budget_s: float | None = typer.Option(
        None, "--budget-s", min=1.0, help="Wall-clock budget: after a few timed steps the run "
        "is cut to the steps that fit (the schedule ends with them)."),
    grad_cache: int | None = typer.Option(
        None, "--grad-cache", min=1, help="Encode at most N texts a forward and cache the "
        "vectors' gradients (gradient caching): a batch larger than memory holds, the same "
        "gradient, a second forward's time. One process only."),
    graded: Path | None = typer.Option(
        None, "--graded", exists=True, dir_okay=False, help="Graded pairs (JSON lines "
        "{a, b, score in [0, 1]}: qkv graded-pairs) trained from the start beside the "
        "pairs, CoSENT weighted by --graded-weight. One process, no --grad-cache."),
    graded_weight: float = typer.Option(0.0, "--graded-weight", min=0.0),
    vocab_size: int = typer.Option(16384, min=300),
    d_model: int = typer.Option(256, min=8),
    n_layers: int = typer.Option(4, min=1),
    n_heads: int = typer.Option(4, min=1),
    d_ff: int = typer.Option(1024, min=8),
    max_tokens: int = typer.Option(256, min=8),
    pooling: str = typer.Option("dot", help="Attention pooling score: dot or additive."),
    name: str = typer.Option("qkv-encoder", help="Encoder name recorded in the checkpoint."),
    eval_beir: list[Path] = typer.Option([], help="BEIR folders to evaluate on at the end."),
    eval_sts: Path | None = typer.Option(None, help="STS-B-format file to evaluate on."),
) -> None:
    """Train the encoder contrastively (InfoNCE, in-batch + hard negatives). Resumable."""
    from encoder.dataset import check_drop, source_names
    from encoder.train import TrainConfig, train

    if (data is None) == (corpus is None):
        raise typer.BadParameter("give --data (training from the data) or --corpus (adapting)")
    if corpus is not None and init is None:
        raise typer.BadParameter("--corpus adapts a trained encoder: give --init too")
    drop = [n.strip() for n in drop_sources.split(",") if n.strip()]
    if drop and data is not None and (names := source_names(data)) is not None:
        try:  # a bundle's names are known before anything loads (else train() checks)
            check_drop(drop, names)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--drop-sources") from None
    arch = {"vocab_size": vocab_size, "d_model": d_model, "n_layers": n_layers, "n_heads": n_heads,
                "d_ff": d_ff, "max_tokens": max_tokens, "pooling": pooling, "name": name}
    cfg = TrainConfig(
        data_dir=str(data or ""), out_dir=str(out), init_from=str(init) if init else None,
        corpus=str(corpus) if corpus else None, steps=steps, batch_size=batch_size, lr=lr,
        warmup_steps=warmup_steps, temperature=temperature, max_query_tokens=max_query_tokens,
        max_doc_tokens=max_doc_tokens, hard_negatives=hard_negatives, mine_at=mine_at,
        mine_every=mine_every, mine_pairs=mine_pairs, lexical_share=lexical_share,
        drop_sources=drop,
        matryoshka=[int(m) for m in matryoshka.split(",") if m.strip()],
        checkpoint_every=checkpoint_every, seed=seed, device=device, stop_after=stop_after,
        arch=arch, budget_s=budget_s, grad_cache=grad_cache,
        graded=str(graded) if graded else None, graded_weight=graded_weight,
    )
    path = train(cfg)
    if eval_beir or eval_sts:
        _evaluate(path, eval_beir, "test", eval_sts, path / "eval.json", bm25=True)


def build_pairs(
    data: Path = typer.Option(..., "--data", help="The shared data directory (../shared/data)."),
    out: Path = typer.Option(Path("runs/pairs"), "--out", help="Folder to write."),
    seed: int = typer.Option(0),
    vocab_size: int = typer.Option(16384, min=300, help="BPE vocabulary trained beside."),
    dev_sets: Path | None = typer.Option(
        None, help="Also write the dev sets (BEIR layout, split 'dev') under this folder."),
    technical: bool = typer.Option(
        False, help="Add the technical and paraphrase sources of encoder v3 "
                    "(encoder/technical.py)."),
    hold_out: list[Path] = typer.Option(
        [], help="A dev collection (BEIR layout, split 'dev', e.g. from "
                 "bench/devcollections.py) whose queries and judged documents no pair may "
                 "touch; repeat for several."),
) -> None:
    """Build the training pairs once (every source, the BM25-imitation mining included),
    with a tokenizer trained on them: ``train-encoder --data OUT`` reads the folder, which
    is small enough to carry to a GPU machine."""
    from encoder.dataset import Bundle
    from encoder.sources import build_sources
    from encoder.tokenizer import bundle_tokenizer

    bundle = Bundle.from_sources(build_sources(data, seed, technical=technical,
                                                hold_out=hold_out))
    bundle.save(out)
    bundle_tokenizer(out, bundle.texts, vocab_size)
    typer.echo(f"{out}: {len(bundle.texts)} texts, "
               + ", ".join(f"{s.name} {len(s)}" for s in bundle.sources))
    if dev_sets is not None:
        from encoder.devsets import write_dev_sets

        for folder in write_dev_sets(data, dev_sets):
            typer.echo(f"dev set {folder}")


def _evaluate(model: Path, beir: list[Path], split: str, sts: Path | None, report: Path | None,
              bm25: bool, record: bool = False, modes: tuple[str, ...] = (),
              fusion: str = "rrf", dense_weight: float = 0.5) -> None:
    from wiring.evaluation import evaluate_encoder, record_metrics

    results = evaluate_encoder(model, beir, split, sts, bm25, modes, fusion, dense_weight)
    text = json.dumps(results, indent=2)
    typer.echo(text)
    if report is not None:
        report.write_text(text + "\n")
    if record:
        record_metrics(model, results)


def eval_encoder(
    model: Path = typer.Option(Path("models/encoder-default"), "--model"),
    beir: list[Path] = typer.Option([], "--beir", help="BEIR-layout folder (repeatable)."),
    split: str = typer.Option("test", help="qrels split to score."),
    sts: Path | None = typer.Option(None, "--sts", help="STS-B-format file."),
    bm25: bool = typer.Option(True, help="Also score BM25 (bm25s) on the same queries."),
    report: Path | None = typer.Option(None, help="Write the JSON report here too."),
    record: bool = typer.Option(False, help="Record metrics + fingerprint in config.json."),
    mode: list[str] = typer.Option(
        [], "--mode", help="dense, bm25 or hybrid (repeatable): also index each --beir folder "
        "into a hybrid Milvus Lite collection and search it in these modes (Milvus' own BM25)."),
    fusion: str = typer.Option("rrf", help="Hybrid fusion: rrf (k = 60) or weighted."),
    dense_weight: float = typer.Option(0.5, min=0.0, max=1.0,
                                       help="w of the weighted fusion (dense side)."),
) -> None:
    """nDCG@10 and Recall@100 on BEIR folders (with BM25), Spearman on an STS file."""
    if not beir and sts is None:
        raise typer.BadParameter("give at least one --beir folder or an --sts file")
    from index import FUSIONS, SEARCH_MODES

    for m in mode:
        if m not in SEARCH_MODES:
            raise typer.BadParameter(f"--mode must be one of {', '.join(SEARCH_MODES)}, got {m!r}")
    if fusion not in FUSIONS:
        raise typer.BadParameter(f"--fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
    _evaluate(model, beir, split, sts, report, bm25, record, tuple(dict.fromkeys(mode)), fusion,
              dense_weight)


def token_bag(
    model: Path = typer.Option(Path("models/encoder-default"), "--model"),
    texts: Path | None = typer.Option(
        None, "--texts", help="JSONL(.xz/.gz) of training texts for a new idf (a JSON string "
        "or {\"text\": ...} a line): a build-pairs bundle's texts.jsonl.xz. Never the "
        "collection to be searched. Without it the model's bag (and idf) is kept."),
    weight: float | None = typer.Option(
        None, "--weight", min=0.0, help="With --texts (default 0.5); 0 removes the bag."),
    limit: int = typer.Option(300_000, "--limit", min=1, help="Texts read for the idf."),
    pairs: Path | None = typer.Option(None, "--pairs", help="Train the bag's table on a "
                                      "qkv build-pairs folder (encoder/bag_train.py)."),
    corpus: Path | None = typer.Option(
        None, "--corpus", help="Adapt the bag's table to these documents, no labels (JSONL "
        "with 'text' and optional 'title', or one per line): BM25-imitation and span pairs."),
    steps: int = typer.Option(600, min=1, help="Training steps (with --pairs or --corpus)."),
    batch_size: int = typer.Option(256, min=2),
    lr: float = typer.Option(1e-3, min=0.0),
    per_source: int = typer.Option(20_000, min=1, help="Pairs drawn from each source at most."),
    seed: int = typer.Option(0),
    out: Path | None = typer.Option(None, "--out", help="Write here (default: over --model)."),
) -> None:
    """Add an idf-weighted token bag to an encoder's vectors (encoder/token_bag.py), and/or
    train its table with the network frozen (--pairs, or --corpus to adapt to your
    documents); run eval-encoder --record after, the vectors (and the fingerprint) change."""
    from safetensors import safe_open

    from encoder.checkpoint import WEIGHTS, read_checkpoint, save_checkpoint
    from encoder.config import EncoderConfig
    from encoder.model import TransformerEncoder
    from encoder.token_bag import add_lexical, read_texts

    if texts is None and pairs is None and corpus is None:
        raise typer.BadParameter("give --texts (a new bag), --pairs or --corpus (train it)")
    if pairs is not None and corpus is not None:
        raise typer.BadParameter("give --pairs or --corpus, not both")
    if weight is not None and texts is None:
        raise typer.BadParameter("--weight makes a new bag: give --texts too",
                                 param_hint="--weight")
    for path, hint, is_dir in ((texts, "--texts", False), (pairs, "--pairs", True),
                               (corpus, "--corpus", False)):
        if path is not None and not (path.is_dir() if is_dir else path.is_file()):
            raise typer.BadParameter(f"{path} is not a {'folder' if is_dir else 'file'}",
                                     param_hint=hint)
    meta, state, tokenizer = read_checkpoint(model, "an encoder")
    network = TransformerEncoder(EncoderConfig.from_dict(meta["architecture"]))
    network.load_state_dict(state)
    kept = {k: v for k, v in meta.items() if k not in ("architecture", "fingerprint", "metrics")}
    if texts is not None:
        weight = 0.5 if weight is None else weight
        rows = read_texts(texts, limit) if weight > 0 else []
        network = add_lexical(network, tokenizer, rows, weight)
        kept["token_bag"] = {"weight": weight, "idf_texts": texts.name, "n_texts": len(rows)}
    if pairs is not None or corpus is not None:
        network, kept["token_bag"] = _train_bag(network, tokenizer, pairs, corpus, kept.get(
            "token_bag", {}), steps, batch_size, lr, per_source, seed)
    with safe_open(str(model / WEIGHTS), "pt") as f:  # kept at the precision it had
        precision = (f.metadata() or {}).get("qkv_precision", "fp32")
    save_checkpoint(out or model, network, tokenizer, kept, precision)
    bag = kept.get("token_bag", {})
    typer.echo(f"{out or model}: token bag weight {network.config.lexical_weight}"
               + (f", idf over {bag['n_texts']:,} texts" if texts is not None else "")
               + (f", table trained on {bag['trained']['pairs']:,} pairs in "
                  f"{bag['trained']['train_seconds']:.0f}s" if "trained" in bag else ""))


def _train_bag(network: Any, tokenizer: Any, pairs: Path | None, corpus: Path | None,
               record: dict[str, Any], steps: int, batch_size: int, lr: float, per_source: int,
               seed: int) -> tuple[Any, dict[str, Any]]:
    """``network`` with its bag's table trained on the bundle ``pairs`` or the pairs cut
    from ``corpus`` (encoder.bag_train), and the token bag's record for config.json."""
    from encoder.adapt import corpus_sources
    from encoder.bag_train import BagTraining, train_table
    from encoder.dataset import Bundle
    from encoder.text_encoder import TextEncoder

    if not network.config.lexical_weight:
        raise typer.BadParameter("the model has no token bag to train: give --texts too")
    try:
        options = BagTraining(steps=steps, batch_size=batch_size, lr=lr, per_source=per_source,
                              seed=seed)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    try:
        bundle = (Bundle.load(pairs) if pairs is not None
                  else Bundle.from_sources(corpus_sources(corpus or Path())))
    except (OSError, ValueError, KeyError) as e:
        raise typer.BadParameter(str(e), param_hint="--pairs" if pairs else "--corpus") from e
    enc = TextEncoder(network, tokenizer, device="cpu")
    enc.use_backend(None)  # the vectors as served (int8 ONNX Runtime on a CPU)
    new, report = train_table(enc, bundle, options)
    report["on"] = (pairs or corpus or Path()).name
    report["adapted"] = corpus is not None
    return new, {**record, "weight": network.config.lexical_weight, "trained": report}


GRADED = {"sts-b": "stsb_graded", "sick": "sick_graded"}


def tune_graded(
    model: Path = typer.Option(Path("models/encoder-default"), "--model"),
    data: Path = typer.Option(..., "--data", help="The shared data directory (its STS-B and "
                              "SICK train files; the retrieval pairs kept)."),
    out: Path = typer.Option(..., "--out", help="The tuned checkpoint's directory."),
    sources: str = typer.Option("sts-b,sick", help="Graded train sets (comma-separated)."),
    steps: int = typer.Option(400, min=1),
    batch_size: int = typer.Option(64, min=2),
    lr: float = typer.Option(2e-5, min=0.0),
    keep: float = typer.Option(10.0, min=0.0, help="Weight of distilling the base's retrieval "
                               "ranking (0: none)."),
    keep_pairs: int = typer.Option(30_000, min=0, help="Retrieval pairs drawn for it."),
    per_set: bool = typer.Option(False, help="Each batch from one graded set (default: "
                                 "from all; mixed measured a little better on dev)."),
    freeze: str = typer.Option("", help="Parameters kept as they are, comma-separated "
                               "names or prefixes of the network's (embed, blocks.0, pool)."),
    precision: str = typer.Option("fp16+q8", help="Stored precision: fp32, fp16 or fp16+q8 "
                                  "(as shipped)."),
    hold_out: list[Path] = typer.Option([], "--hold-out", help="Dev collections whose "
                                        "queries and judged documents stay out (repeatable)."),
    seed: int = typer.Option(0),
) -> None:
    """Go on training an encoder on graded similarity (STS-B and SICK train, CoSENT), its
    retrieval ranking distilled from the base so it moves little (encoder/graded.py).
    Score the result on the dev sets (bench/encoder_dev.py) before shipping it."""
    import random

    import encoder
    from encoder import graded
    from encoder import pairs as pairs_module
    from encoder.checkpoint import PRECISIONS, save_checkpoint
    from encoder.sources import build_sources

    if precision not in PRECISIONS:
        raise typer.BadParameter(f"choose among {', '.join(PRECISIONS)}",
                                 param_hint="--precision")
    names = [s.strip() for s in sources.split(",") if s.strip()]
    if not names or set(names) - set(GRADED):
        raise typer.BadParameter(f"choose among {', '.join(GRADED)}", param_hint="--sources")
    try:
        options = graded.GradedOptions(
            steps=steps, batch_size=batch_size, lr=lr, keep=keep, per_set=per_set, seed=seed,
            freeze=tuple(f.strip() for f in freeze.split(",") if f.strip()))
        sets = [getattr(pairs_module, GRADED[n])(data) for n in names]
    except (OSError, ValueError) as e:
        raise typer.BadParameter(str(e)) from e
    try:
        enc = encoder.load(model, device="cpu", backend="torch")
    except (OSError, ValueError) as e:
        raise typer.BadParameter(str(e), param_hint="--model") from e
    try:
        graded.check_freeze(enc.model, options.freeze)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--freeze") from e
    kept: list[tuple[str, str]] = []
    if keep and keep_pairs:  # drawn across the retrieval sources by their batch shares
        try:
            found = build_sources(data, seed, lexical=False, technical=True,
                                  hold_out=hold_out)
        except OSError as e:
            raise typer.BadParameter(str(e), param_hint="--data") from e
        rng = random.Random(seed)
        total = sum(s.weight for s in found)
        for s in found:
            kept += rng.sample(s.pairs, min(len(s.pairs), int(keep_pairs * s.weight / total)))
        rng.shuffle(kept)
    network, report = graded.train_graded(enc, sets, kept, options)
    report["sources"] = names
    meta = {k: v for k, v in enc.meta.items()  # the base's figures are not the result's
            if k not in ("architecture", "fingerprint", "fingerprint_fp32", "metrics")}
    meta["graded"] = {**report, "from": str(model)}
    save_checkpoint(out, network, enc.tokenizer, meta, precision)
    typer.echo(f"{out}: tuned on {report['pairs']:,} graded pairs, {len(kept):,} retrieval pairs "
               f"kept, in {report['train_seconds']:.0f}s (CoSENT {report['cosent_first']:.3f}"
               f" → {report['cosent_last']:.3f})")


def graded_pairs(
    data: Path = typer.Option(..., "--data", exists=True, file_okay=False,
                              help="The shared data directory (../shared/data)."),
    out: Path = typer.Option(..., "--out", help="The JSON-lines file to write."),
) -> None:
    """Write STS-B's and SICK's train pairs with their scores in [0, 1] (never their dev,
    trial or test files), for train-encoder --graded."""
    from encoder.pairs import sick_graded, stsb_graded

    rows = [*stsb_graded(data), *sick_graded(data)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({"a": a, "b": b, "score": round(s, 4)}) + "\n"
                           for a, b, s in rows))
    typer.echo(f"{out}: {len(rows):,} graded pairs")


def register(app: typer.Typer) -> None:
    app.command("train-encoder")(train_encoder)
    app.command("build-pairs")(build_pairs)
    app.command("eval-encoder")(eval_encoder)
    app.command("token-bag")(token_bag)
    app.command("tune-graded")(tune_graded)
    app.command("graded-pairs")(graded_pairs)
