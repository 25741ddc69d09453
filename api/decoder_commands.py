"""``qkv train-decoder`` and ``qkv translate``: the retrieval-augmented decoder on the
command line, wired to the qkv encoder and an in-process FAISS translation memory."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from api.translation_memory import TranslationMemory

log = logging.getLogger(__name__)

DEFAULT_ENCODER = Path("models/encoder-default")


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
    from api import runtime

    runtime.configure()
    from decoder.train import Retrieve, TrainConfig, train

    if temperature is None:  # the index package (pymilvus, FAISS) only when needed
        from index.attend import DEFAULT_TEMPERATURE

        temperature = DEFAULT_TEMPERATURE
    t = temperature
    retrieval: dict[str, Any] = {}
    retrieve: Retrieve | None = None
    if k > 0:
        retrieve, retrieval = _training_retriever(data, src_lang, tgt_lang, encoder_dir, k, t,
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
        stop_after=stop_after, retrieval=retrieval, arch=arch)
    path = train(cfg, retrieve)
    typer.echo(f"decoder checkpoint: {path}")


def _training_retriever(data: Path, src_lang: str, tgt_lang: str, encoder_dir: Path, k: int,
                        temperature: float, device: str | None,
                        cache_dir: Path | None) -> tuple[Any, dict[str, Any]]:
    """A retrieve function over the training pairs, built lazily: when neighbours.json
    already holds this retrieval, the encoder never encodes anything."""
    import encoder
    from decoder.data import read_pairs

    text_encoder = encoder.load(encoder_dir, device=device)
    record = {"encoder": str(encoder_dir), "encoder_name": text_encoder.name,
              "encoder_fingerprint": text_encoder.fingerprint, "temperature": temperature,
              "k": k, "memory": "train pairs, each pair's own entry left out"}

    memory: list[TranslationMemory] = []  # built on the first call, kept for the next

    def retrieve(queries: Any, exclude: Any) -> list[list[tuple[int, float]]]:
        if not memory:
            from api.translation_memory import TranslationMemory  # FAISS: only when retrieving

            pairs = read_pairs(data, "train", src_lang, tgt_lang)
            memory.append(TranslationMemory.build(text_encoder, [s for s, _ in pairs],
                                                  [t for _, t in pairs], cache_dir=cache_dir))
        tm = memory[0]
        xq = tm.xb if list(queries) == tm.sources else None  # the train pairs themselves
        return tm.search(queries, k, exclude, temperature, xq=xq)

    return retrieve, record


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
    k: int = typer.Option(4, "--k", min=0, help="Neighbours per sentence; 0 = none."),
    beam: int = typer.Option(4, "--beam", min=1, help="Beam size; 1 = greedy."),
    plot: Path | None = typer.Option(None, "--plot", dir_okay=False,
                                     help="PNG of the cross-attention (one sentence only)."),
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
) -> None:
    """Translate a file line by line, reading the k nearest memory entries' targets.

    An empty input line gives an empty output line; over-long lines are cut to the
    model's token limit.
    """
    from api import runtime

    runtime.configure()
    import decoder
    from decoder.data import read_lines

    if memory_jsonl is not None and (memory_src is not None or memory_tgt is not None):
        raise typer.BadParameter("give --memory or --memory-src/--memory-tgt, not both")
    if k > 0 and memory_jsonl is None and (memory_src is None or memory_tgt is None):
        raise typer.BadParameter("--k > 0 needs --memory-src and --memory-tgt, or --memory "
                                 "(or --k 0)")
    lines = read_lines(input)
    if plot is not None and sum(1 for ln in lines if ln.strip()) != 1:
        raise typer.BadParameter("--plot draws one sentence: give an input with exactly one "
                                 "non-empty line", param_hint="--plot")
    try:
        dec = decoder.load(model, device=device)
    except FileNotFoundError as e:
        raise typer.BadParameter(str(e), param_hint="--model") from e
    neighbours: list[list[tuple[str, float]]] = [[] for _ in lines]
    if k > 0:
        neighbours = _neighbours(dec, lines, memory_src, memory_tgt, memory_jsonl, k, temperature,
                                 encoder_dir, memory_cache, device)
    if plot is None:
        texts = dec.translate(lines, neighbours, beam=beam, max_tokens=max_tokens,
                              length_penalty=length_penalty, batch_size=batch_size,
                              progress=progress)
    else:
        gens = dec.generate_batch(lines, neighbours, beam=beam, max_tokens=max_tokens,
                                  return_attention=True, length_penalty=length_penalty)
        texts = [g.text for g in gens]
        i = next(i for i, ln in enumerate(lines) if ln.strip())
        _plot_attention(gens[i], [w for _, w in neighbours[i]], plot)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(t.replace("\n", " ") + "\n" for t in texts), encoding="utf-8")
    log.info("translated %d lines into %s", len(lines), output)


def evaluate_translation(
    model: Path, data: Path, splits: list[str], k: int | None = None, beam: int = 4,
    batch_size: int = 32, encoder_dir: Path = DEFAULT_ENCODER, memory_cache: str = "var/tm-cache",
    device: str | None = None, src_lang: str = "en", tgt_lang: str = "fr",
    hypotheses: Path | None = None, temperature: float | None = None,
) -> list[dict[str, Any]]:
    """sacreBLEU of ``model`` on each split of ``data``, the memory being the train split.

    ``k`` defaults to the model's training k (0 for a baseline). Per split: BLEU, its
    signature, the retrieval temperature (None without neighbours), and the seconds taken
    by retrieval (encoding the sources, searching the memory; the memory itself is built
    once, before, its vectors from ``memory_cache``) and by decoding.
    """
    import time

    import sacrebleu

    import decoder
    from decoder.data import read_pairs

    dec = decoder.load(model, device=device)
    trained_k = int((dec.meta.get("training") or {}).get("k", 0))
    k = trained_k if k is None else k
    tm: TranslationMemory | None = None
    t: float | None = None
    if k > 0:  # one memory, keyed once, for every split
        memory = read_pairs(data, "train", src_lang, tgt_lang)
        tm, t = _memory(dec, [p[0] for p in memory], [p[1] for p in memory], temperature,
                        encoder_dir, memory_cache, device)
    rows: list[dict[str, Any]] = []
    for split in splits:
        pairs = read_pairs(data, split, src_lang, tgt_lang)
        sources, refs = [p[0] for p in pairs], [p[1] for p in pairs]
        t0 = time.perf_counter()
        neighbours = tm.neighbours(sources, k, t) if tm is not None and t is not None else None
        t1 = time.perf_counter()
        hyps = dec.translate(sources, neighbours, beam=beam, batch_size=batch_size)
        t2 = time.perf_counter()
        bleu = sacrebleu.metrics.BLEU()
        score = bleu.corpus_score(hyps, [refs])
        if hypotheses is not None:
            hypotheses.mkdir(parents=True, exist_ok=True)
            (hypotheses / f"{split}.{tgt_lang}").write_text("".join(h + "\n" for h in hyps),
                                                          encoding="utf-8")
        rows.append({"model": str(model), "name": dec.name, "split": split, "k": k,
                     "temperature": t, "beam": beam, "sentences": len(pairs),
                     "bleu": round(score.score, 2), "signature": str(bleu.get_signature()),
                     "retrieve_s": round(t1 - t0, 2), "decode_s": round(t2 - t1, 2)})
    return rows


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
) -> None:
    """sacreBLEU of a decoder on Multi30k-style splits, the memory being the train split."""
    from api import runtime

    runtime.configure()
    import json

    for row in evaluate_translation(model, data, split, k, beam, batch_size, encoder_dir,
                                    memory_cache, device, hypotheses=hypotheses,
                                    temperature=temperature):
        typer.echo(json.dumps(row))


def _neighbours(dec: Any, lines: list[str], memory_src: Path | None, memory_tgt: Path | None,
                memory_jsonl: Path | None, k: int, temperature: float | None, encoder_dir: Path,
                cache: str, device: str | None) -> list[list[tuple[str, float]]]:
    from decoder.data import read_lines

    if memory_jsonl is not None:
        sources, targets = _read_memory_jsonl(memory_jsonl)
    else:
        assert memory_src is not None and memory_tgt is not None
        sources, targets = read_lines(memory_src), read_lines(memory_tgt)
    tm, t = _memory(dec, sources, targets, temperature, encoder_dir, cache, device)
    return tm.neighbours(lines, k, t)


def _read_memory_jsonl(path: Path) -> tuple[list[str], list[str]]:
    """(sources, targets) of JSONL rows ``{"text": source, "value": target}``."""
    import json

    from decoder.data import read_lines

    sources, targets = [], []
    for n, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            source, target = row["text"], row["value"]
        except (ValueError, KeyError, TypeError) as e:
            raise typer.BadParameter(f"{path}:{n}: not a JSON object with 'text' and 'value' "
                                     f"({e})", param_hint="--memory") from e
        if not isinstance(source, str) or not isinstance(target, str):
            raise typer.BadParameter(f"{path}:{n}: 'text' and 'value' must be strings",
                                     param_hint="--memory")
        sources.append(source)
        targets.append(target)
    return sources, targets


def _memory(dec: Any, sources: list[str], targets: list[str], temperature: float | None,
            encoder_dir: Path, cache: str, device: str | None) -> tuple[TranslationMemory, float]:
    """The memory keyed by the encoder at ``encoder_dir``, and the retrieval temperature:
    the one given, else the one the decoder was trained with."""
    import encoder
    from api.translation_memory import TranslationMemory
    from index.attend import DEFAULT_TEMPERATURE

    trained = (dec.meta.get("training") or {}).get("retrieval") or {}
    t = temperature or trained.get("temperature") or DEFAULT_TEMPERATURE
    text_encoder = encoder.load(encoder_dir, device=device)
    if trained.get("encoder_fingerprint") not in (None, text_encoder.fingerprint):
        log.warning("the decoder was trained with neighbours from encoder %s, not %s (%s)",
                    trained.get("encoder_fingerprint"), text_encoder.fingerprint, encoder_dir)
    tm = TranslationMemory.build(text_encoder, sources, targets,
                                 cache_dir=Path(cache) if cache else None)
    return tm, t


def _plot_attention(gen: Any, weights: list[float], path: Path) -> None:
    """Output tokens (rows) × memory tokens (columns), neighbours split by lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    att = np.array(gen.attention or [[]], dtype=np.float32).reshape(len(gen.tokens), -1)
    cols, rows = len(gen.memory_tokens or []), len(gen.tokens)
    fig, ax = plt.subplots(figsize=(min(40, 2 + 0.25 * cols), min(30, 1.5 + 0.3 * rows)))
    ax.imshow(att, aspect="auto", cmap="viridis", vmin=0.0)
    ax.set_xticks(range(cols), gen.memory_tokens or [], rotation=90, fontsize=7)
    ax.set_yticks(range(rows), gen.tokens, fontsize=7)
    segs = gen.memory_segments or []
    for c in range(1, cols):
        if segs[c] != segs[c - 1]:
            ax.axvline(c - 0.5, color="white", linewidth=1.5)
    for seg in sorted(set(segs)):
        first = segs.index(seg)
        label = "source" if seg < 0 else f"neighbour {seg + 1} (w={weights[seg]:.2f})"
        ax.text(first, -0.8, label, fontsize=7, va="bottom")
    ax.set_xlabel("memory: source and neighbour tokens")
    ax.set_ylabel("output tokens")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log.info("attention map in %s", path)


def register(app: typer.Typer) -> None:
    app.command("train-decoder")(train_decoder)
    app.command("translate")(translate)
    app.command("eval-decoder")(eval_decoder)
