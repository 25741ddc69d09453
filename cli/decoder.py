"""``qkv train-decoder``, ``qkv translate`` and ``qkv eval-decoder``: the retrieval-augmented
decoder on the command line (the wiring to the encoder and the translation memory is
:mod:`wiring.translation`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from decoder.train import Retrieve

log = logging.getLogger(__name__)

DEFAULT_ENCODER = Path("models/encoder-default")

KNN_MEMORY = typer.Option(
    None, "--knn-memory", file_okay=False, exists=True,
    help="A token memory built with this decoder (qkv build-token-memory): kNN-MT.")
KNN_K = typer.Option(8, "--knn-k", min=1, max=1024, help="Memory tokens that vote per step.")
KNN_TEMPERATURE = typer.Option(10.0, "--knn-temperature", min=1e-6,
                               help="Softmax temperature over the voters' squared distances.")
KNN_LAMBDA = typer.Option(0.35, "--knn-lambda", min=0.0, max=1.0,
                          help="The most weight the memory gets.")
KNN_ADAPTIVE = typer.Option(True, "--knn-adaptive/--knn-fixed",
                            help="Scale λ by 1 − d₀/reach (nothing close: no effect).")
KNN_REACH = typer.Option(400.0, "--knn-reach", min=1e-6,
                         help="Nearest-key squared distance at which λ reaches 0.")
KNN_NPROBE = typer.Option(8, "--knn-nprobe", min=1, help="IVF lists searched.")


def train_decoder(
    data: Path = typer.Option(..., "--data", help="Folder with train/val.{en,fr}[.gz] "
                              "(../shared/data/multi30k/task1, or ../shared/data)."),
    out: Path = typer.Option(Path("runs/decoder"), "--out", help="Checkpoint directory."),
    k: int = typer.Option(4, "--k", min=0, help="Neighbours per pair; 0 = baseline."),
    encoder_dir: Path = typer.Option(DEFAULT_ENCODER, "--encoder",
                                     help="qkv encoder that retrieves the neighbours."),
    temperature: float | None = typer.Option(
        None, min=1e-4, help="Retrieval softmax temperature (default index.attend's)."),
    memory_cache: str = typer.Option("var/tm-cache", "--memory-cache",
                                     help="Folder caching memory vectors ('' for none)."),
    src_lang: str = typer.Option("en"),
    tgt_lang: str = typer.Option("fr"),
    steps: int = typer.Option(4000, min=1),
    batch_size: int = typer.Option(256, min=1),
    lr: float = typer.Option(1e-3, min=0.0),
    warmup_steps: int = typer.Option(1000, min=0),
    label_smoothing: float = typer.Option(0.1, min=0.0, max=1.0),
    weight_decay: float = typer.Option(0.01, min=0.0),
    eval_every: int = typer.Option(1000, min=1),
    checkpoint_every: int = typer.Option(500, min=1),
    seed: int = typer.Option(0),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1 ... (default: auto)."),
    stop_after: int | None = typer.Option(
        None, min=1, help="Stop this process after N steps (checkpointed; rerun resumes)."),
    train_fraction: float = typer.Option(
        1.0, min=0.0, max=1.0, help="Train on this seeded share of the train pairs (k = 0 "
        "only); the rest stay unseen, e.g. for bench/translate.py adaptation."),
    vocab_size: int = typer.Option(8000, min=300, help="Joint BPE vocabulary size."),
    d_model: int = typer.Option(256, min=8),
    encoder_layers: int = typer.Option(3, min=1),
    decoder_layers: int = typer.Option(3, min=1),
    n_heads: int = typer.Option(4, min=1),
    d_ff: int = typer.Option(1024, min=8),
    max_tokens: int = typer.Option(128, min=8),
    dropout: float = typer.Option(0.1, min=0.0, max=1.0),
    neighbour_layers: int = typer.Option(
        1, min=0, help="Encoder blocks the neighbours' tokens pass through (0 = embeddings)."),
    name: str = typer.Option("qkv-decoder", help="Decoder name recorded in the checkpoint."),
) -> None:
    """Train the retrieval-augmented decoder on (source, target) pairs. Resumable.

    Each training pair's k neighbours are other training pairs, retrieved with the qkv
    encoder through FAISS (the pair itself and exact copies of it left out), weighted
    softmax(score / T).
    """
    from wiring import runtime

    runtime.configure()
    from decoder.train import TrainConfig, train
    from wiring.translation import training_retriever

    if temperature is None:  # the index package (pymilvus, FAISS) only when needed
        from index.attend import DEFAULT_TEMPERATURE

        temperature = DEFAULT_TEMPERATURE
    t = temperature
    retrieval: dict[str, Any] = {}
    retrieve: Retrieve | None = None
    if k > 0:
        retrieve, retrieval = training_retriever(data, src_lang, tgt_lang, encoder_dir, k, t,
                                                 device, Path(memory_cache) if memory_cache
                                                 else None)
    arch = {"d_model": d_model, "n_encoder_layers": encoder_layers,
            "n_decoder_layers": decoder_layers, "n_heads": n_heads, "d_ff": d_ff,
            "max_tokens": max_tokens, "dropout": dropout, "neighbour_layers": neighbour_layers,
            "name": name}
    cfg = TrainConfig(
        data_dir=str(data), out_dir=str(out), src_lang=src_lang, tgt_lang=tgt_lang, k=k,
        steps=steps, batch_size=batch_size, lr=lr, weight_decay=weight_decay,
        warmup_steps=warmup_steps, label_smoothing=label_smoothing, vocab_size=vocab_size,
        eval_every=eval_every, checkpoint_every=checkpoint_every, seed=seed, device=device,
        stop_after=stop_after, train_fraction=train_fraction, retrieval=retrieval, arch=arch)
    path = train(cfg, retrieve)
    typer.echo(f"decoder checkpoint: {path}")


def translate(
    model: Path = typer.Option(..., "--model", help="Decoder checkpoint directory."),
    memory_src: Path | None = typer.Option(None, "--memory-src", dir_okay=False, exists=True,
                                           help="Memory source sentences (plain or .gz)."),
    memory_tgt: Path | None = typer.Option(None, "--memory-tgt", dir_okay=False, exists=True,
                                           help="Memory target sentences, aligned."),
    memory_jsonl: Path | None = typer.Option(
        None, "--memory", dir_okay=False, exists=True,
        help="Instead of the two files: JSONL(.gz) rows {text: source, value: target}, the "
             "format of the demo memory data/demo/multi30k-en-fr.jsonl.gz."),
    input: Path = typer.Option(..., "--input", dir_okay=False, exists=True,
                               help="One source sentence a line."),
    output: Path = typer.Option(..., "--output", dir_okay=False, help="One output a line."),
    k: int | None = typer.Option(None, "--k", min=0, help="Neighbours per sentence; 0 = none "
                                 "(default: the model's training k)."),
    beam: int = typer.Option(4, "--beam", min=1, help="Beam size; 1 = greedy."),
    plot: Path | None = typer.Option(
        None, "--plot", dir_okay=False, help="PNG of the cross-attention (one sentence only); "
        "with a token memory, PLOT-votes.png of its votes too."),
    encoder_dir: Path = typer.Option(DEFAULT_ENCODER, "--encoder",
                                     help="qkv encoder that keys the memory."),
    temperature: float | None = typer.Option(
        None, min=1e-4, help="Retrieval temperature (default: the model's training one)."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1,
                                          help="Output token limit (default 2 × source + 10)."),
    length_penalty: float = typer.Option(1.0, min=0.0),
    batch_size: int = typer.Option(32, min=1),
    memory_cache: str = typer.Option("var/tm-cache", "--memory-cache",
                                     help="Folder caching memory vectors ('' for none)."),
    device: str | None = typer.Option(None, help="cpu, cuda, ... (default: auto)."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    knn_memory: Path | None = KNN_MEMORY,
    knn: bool = typer.Option(True, "--knn/--no-knn", help="Use --knn-memory (when given)."),
    knn_k: int = KNN_K,
    knn_temperature: float = KNN_TEMPERATURE,
    knn_lambda: float = KNN_LAMBDA,
    knn_adaptive: bool = KNN_ADAPTIVE,
    knn_reach: float = KNN_REACH,
    knn_nprobe: int = KNN_NPROBE,
) -> None:
    """Translate a file line by line, reading the k nearest memory entries' targets (and,
    with --knn-memory, mixing in the votes of a token memory at each step).

    An empty input line gives an empty output line; over-long lines are cut to the
    model's token limit.
    """
    from wiring import runtime

    runtime.configure()
    import decoder
    from decoder.data import read_lines
    from decoder.plot import plot_attention
    from wiring.translation import neighbours_for

    if memory_jsonl is not None and (memory_src is not None or memory_tgt is not None):
        raise typer.BadParameter("give --memory or --memory-src/--memory-tgt, not both")
    lines = read_lines(input)
    if plot is not None and sum(1 for ln in lines if ln.strip()) != 1:
        raise typer.BadParameter("--plot draws one sentence: give an input with exactly one "
                                 "non-empty line", param_hint="--plot")
    try:
        dec = decoder.load(model, device=device)
    except FileNotFoundError as e:
        raise typer.BadParameter(str(e), param_hint="--model") from e
    given = memory_jsonl is not None or memory_src is not None
    if k is None:
        k = int((dec.meta.get("training") or {}).get("k", 0))
        if k == 0 and given:
            raise typer.BadParameter(
                "this decoder was trained without neighbours (k = 0): a sentence memory is "
                "of no use to it; give --knn-memory (a token memory) instead, or --k N to "
                "feed the neighbours anyway", param_hint="--memory")
    if k > 0 and memory_jsonl is None and (memory_src is None or memory_tgt is None):
        raise typer.BadParameter("--k > 0 needs --memory-src and --memory-tgt, or --memory "
                                 "(or --k 0)")
    mix = None
    if knn and knn_memory is not None:
        from decoder.knn import KnnMixer, KnnOptions, MemoryMismatchError, TokenMemory

        try:
            tokens = TokenMemory.load(knn_memory, dec.fingerprint)
        except MemoryMismatchError as e:
            raise typer.BadParameter(str(e), param_hint="--knn-memory") from e
        mix = KnnMixer(tokens, KnnOptions(knn_k, knn_temperature, knn_lambda, knn_adaptive,
                                          knn_nprobe, knn_reach))
    neighbours: list[list[tuple[str, float]]] = [[] for _ in lines]
    if k > 0:
        try:
            neighbours = neighbours_for(dec, lines, memory_src, memory_tgt, memory_jsonl, k,
                                        temperature, encoder_dir, memory_cache, device)
        except ValueError as e:  # a bad --memory row
            raise typer.BadParameter(str(e), param_hint="--memory") from e
    if plot is None:
        texts = dec.translate(lines, neighbours, beam=beam, max_tokens=max_tokens,
                              length_penalty=length_penalty, batch_size=batch_size,
                              progress=progress, mix=mix)
    else:
        gens = dec.generate_batch(lines, neighbours, beam=beam, max_tokens=max_tokens,
                                  return_attention=True, length_penalty=length_penalty,
                                  mix=mix)
        texts = [g.text for g in gens]
        i = next(i for i, ln in enumerate(lines) if ln.strip())
        plot_attention(gens[i], [w for _, w in neighbours[i]], plot)
        if mix is not None:  # and who voted for each output token, beside it
            from decoder.knn import votes
            from decoder.plot import plot_votes

            plot_votes(votes(dec, lines[i], neighbours[i], gens[i].ids, mix.memory, mix.o),
                       plot.with_name(f"{plot.stem}-votes{plot.suffix}"))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(t.replace("\n", " ") + "\n" for t in texts), encoding="utf-8")
    if mix is not None:
        log.info("token memory: %d tokens, mean λ %.3f over %d searched steps",
                 mix.memory.size, mix.lam_sum / max(1, mix.steps), mix.steps)
    log.info("translated %d lines into %s", len(lines), output)


def eval_decoder(
    model: Path = typer.Option(..., "--model", help="Decoder checkpoint directory."),
    data: Path = typer.Option(..., "--data", help="Folder with {train,SPLIT}.{en,fr}[.gz] "
                              "(../shared/data/multi30k/task1, or ../shared/data)."),
    split: list[str] = typer.Option(["val", "test_2016_flickr"], "--split",
                                    help="Splits to score (repeatable)."),
    k: int | None = typer.Option(None, "--k", min=0,
                                 help="Neighbours (default: the model's training k)."),
    beam: int = typer.Option(4, "--beam", min=1),
    batch_size: int = typer.Option(32, min=1),
    encoder_dir: Path = typer.Option(DEFAULT_ENCODER, "--encoder"),
    memory_cache: str = typer.Option("var/tm-cache", "--memory-cache"),
    hypotheses: Path | None = typer.Option(None, "--hypotheses", file_okay=False,
                                           help="Write each split's outputs here."),
    temperature: float | None = typer.Option(
        None, min=1e-4, help="Retrieval temperature (default: the model's training one)."),
    device: str | None = typer.Option(None),
    knn_memory: Path | None = KNN_MEMORY,
    knn_k: int = KNN_K,
    knn_temperature: float = KNN_TEMPERATURE,
    knn_lambda: float = KNN_LAMBDA,
    knn_adaptive: bool = KNN_ADAPTIVE,
    knn_reach: float = KNN_REACH,
    knn_nprobe: int = KNN_NPROBE,
) -> None:
    """sacreBLEU of a decoder on Multi30k-style splits, the memory being the train split."""
    from wiring import runtime

    runtime.configure()
    import json

    from decoder.knn import KnnOptions
    from wiring.translation import evaluate_translation

    knn = KnnOptions(knn_k, knn_temperature, knn_lambda, knn_adaptive, knn_nprobe,
                     knn_reach)
    for row in evaluate_translation(model, data, split, k, beam, batch_size, encoder_dir,
                                    memory_cache, device, hypotheses=hypotheses,
                                    temperature=temperature, knn_memory=knn_memory, knn=knn):
        typer.echo(json.dumps(row))


def register(app: typer.Typer) -> None:
    app.command("train-decoder")(train_decoder)
    app.command("translate")(translate)
    app.command("eval-decoder")(eval_decoder)
