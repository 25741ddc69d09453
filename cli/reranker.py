"""``qkv reranker-pairs`` and ``qkv train-reranker``: the cross-encoder reranker's training
examples and its training (:mod:`encoder.rerank_data`, :mod:`encoder.rerank_train`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.index import DEFAULT_MODEL


def reranker_pairs(
    data: Path = typer.Option(..., "--data", exists=True, file_okay=False,
                              help="The shared data directory (../shared/data)."),
    out: Path = typer.Option(..., "--out", help="The JSON-lines file to write."),
    hold_out: list[Path] = typer.Option([], "--hold-out", help="A BEIR folder (a dev "
                                        "collection) whose texts no example may touch; "
                                        "repeat."),
    per_source: int = typer.Option(3000, "--per-source", min=1,
                                   help="At most this many queries a source."),
    model: Path = typer.Option(DEFAULT_MODEL, "--model", help="The encoder that mines the "
                               "dense negatives ('' or --no-dense: BM25's only)."),
    dense: bool = typer.Option(True, "--dense/--no-dense"),
    only: str = typer.Option("", "--only", help="Comma-separated sources (default: all)."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Write the reranker's training examples: (query, positive, mined negatives)."""
    from encoder.rerank_data import build

    encode = None
    if dense:
        import encoder

        enc = encoder.load(model)
        encode = lambda texts: enc.encode(texts, batch_size=64)  # noqa: E731
    counts = build(data, out, list(hold_out), per_source, encode, seed,
                   [s for s in only.split(",") if s] or None)
    typer.echo(json.dumps({"out": str(out), "examples": sum(counts.values()),
                           "sources": counts}))


def train_reranker(
    examples: Path = typer.Option(..., "--examples", exists=True, dir_okay=False,
                                  help="JSON lines from qkv reranker-pairs."),
    out: Path = typer.Option(..., "--out", help="The reranker's checkpoint directory."),
    init: Path = typer.Option(DEFAULT_MODEL, "--init", exists=True, file_okay=False,
                              help="The encoder checkpoint the network starts from."),
    steps: int = typer.Option(2000, "--steps", min=1),
    queries: int = typer.Option(16, "--queries", min=1, help="Examples a step."),
    negatives: int = typer.Option(7, "--negatives", min=1,
                                  help="Passages against each positive."),
    lr: float = typer.Option(1e-4, "--lr", min=0.0),
    max_tokens: int = typer.Option(192, "--max-tokens", min=8,
                                   help="A pair is cut here."),
    budget_s: float | None = typer.Option(None, "--budget-s", min=1.0,
                                          help="End where this many seconds run out."),
    checkpoint_every_s: float = typer.Option(180.0, "--checkpoint-every-s", min=1.0),
    device: str | None = typer.Option(None, "--device"),
    seed: int = typer.Option(1, "--seed"),
    marked: bool = typer.Option(True, "--marked/--unmarked", help="Mark each token the "
                                "other side of the pair has too (DrQA's exact match, as ids)."),
) -> None:
    """Train a cross-encoder reranker from an encoder checkpoint; rerunning resumes."""
    from encoder.rerank_train import RerankTrainConfig, train

    cfg = RerankTrainConfig(str(examples), str(out), str(init), steps=steps, queries=queries,
                            negatives=negatives, lr=lr, max_tokens=max_tokens,
                            budget_s=budget_s, checkpoint_every_s=checkpoint_every_s,
                            device=device, seed=seed, marked=marked)
    path = train(cfg)
    typer.echo(json.dumps({"reranker": str(path)}))


def register(app: typer.Typer) -> None:
    app.command("reranker-pairs")(reranker_pairs)
    app.command("train-reranker")(train_reranker)
