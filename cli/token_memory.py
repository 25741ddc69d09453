"""``qkv build-token-memory``: the decoder's token memory (kNN-MT, :mod:`decoder.knn`) of
translation pairs: a collection of the store (a resumable job), a JSONL file, or a split of
a parallel corpus."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.decoder import DEFAULT_ENCODER
from index.store import explain


def build_token_memory(
    model: Path = typer.Option(..., "--model", help="Decoder checkpoint directory."),
    out: Path = typer.Option(..., "--out", file_okay=False, help="Memory directory."),
    collection: str | None = typer.Option(
        None, "--collection", help="A translation-memory collection of --store (documents' "
        "text → value): streamed in id order; run the same command again to resume."),
    store: str = typer.Option("var/qkv.db", "--store",
                              help="Milvus Lite file, http://host:port, or faiss://DIR."),
    token: str = typer.Option("", "--token", envvar="QKV_MILVUS_TOKEN", help="Milvus token."),
    restart: bool = typer.Option(False, "--restart", help="Start a --collection build over."),
    page_size: int = typer.Option(1024, min=1, help="Documents read per page (--collection)."),
    stop_after_pages: int | None = typer.Option(
        None, min=1, help="End after N pages (--collection; a rerun resumes)."),
    data: Path | None = typer.Option(None, "--data", help="Folder with SPLIT.{en,fr}[.gz]."),
    pairs: Path | None = typer.Option(
        None, "--pairs", dir_okay=False, exists=True,
        help="JSONL(.gz) rows {id, text: source, value: target}, e.g. the demo memory "
             "data/demo/multi30k-en-fr.jsonl.gz (votes name these ids)."),
    split: str = typer.Option("train", "--split", help="The pairs of --data to remember."),
    encoder_dir: Path = typer.Option(DEFAULT_ENCODER, "--encoder"),
    memory_cache: str = typer.Option("var/tm-cache", "--memory-cache"),
    batch_size: int = typer.Option(64, min=1),
    device: str | None = typer.Option(None),
) -> None:
    """Token memory (kNN-MT) of translation pairs: the decoder's state before each target
    token, stored with that token; for serve --token-memory, translate and eval-decoder
    --knn-memory. Give one of --collection, --pairs, --data."""
    from wiring import runtime

    runtime.configure()
    if sum(x is not None for x in (collection, data, pairs)) != 1:
        raise typer.BadParameter("give one of --collection, --pairs, --data (with --split)")
    if collection is not None:
        from index import StoreError
        from wiring.token_memory_job import index_token_memory

        try:
            info = index_token_memory(model, store, collection, out, token=token,
                                      device=device, page_size=page_size,
                                      batch_size=batch_size, restart=restart,
                                      stop_after_pages=stop_after_pages)
        except (StoreError, ValueError) as e:
            typer.echo(f"error: {explain(e)}", err=True)
            raise typer.Exit(1) from e
        typer.echo(json.dumps(info))
        return
    from wiring.token_memory import build_token_memory as build

    try:
        info = build(model, data, out, split, encoder_dir=encoder_dir,
                     memory_cache=memory_cache, device=device, batch_size=batch_size,
                     pairs_jsonl=pairs)
    except ValueError as e:  # a bad --pairs row
        raise typer.BadParameter(str(e), param_hint="--pairs") from e
    typer.echo(json.dumps(info))


def register(app: typer.Typer) -> None:
    app.command("build-token-memory")(build_token_memory)
