"""``qkv tune``: calibrate a collection's hybrid search (:mod:`wiring.calibrating`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.index import DEFAULT_MODEL
from index.store import explain


def tune(
    collection: str = typer.Argument(..., help="Collection (or alias) to calibrate."),
    store: str = typer.Option("var/qkv.db", "--store",
                              help="Milvus Lite file, http://host:port, or faiss://DIR."),
    token: str = typer.Option("", "--token", envvar="QKV_MILVUS_TOKEN"),
    model: Path = typer.Option(DEFAULT_MODEL, "--model",
                               help="The encoder that made the collection."),
    labels: Path | None = typer.Option(
        None, "--labels", exists=True, help="Judged queries: JSONL {query, relevant} a line, "
        "or a BEIR folder (queries.jsonl, qrels/SPLIT.tsv). Without: from the documents."),
    split: str = typer.Option("test", "--split", help="The qrels split of a BEIR folder."),
    weight: float | None = typer.Option(None, "--weight", min=0.0, max=1.0,
                                        help="Set the dense weight by hand."),
    seed: int = typer.Option(0, "--seed"),
    timeout: float = typer.Option(30.0, "--timeout", min=0.1),
) -> None:
    """Choose how far hybrid search trusts the dense side against BM25 for COLLECTION, and
    store it with the collection (read by every server on the store)."""
    from wiring import runtime

    runtime.configure()
    from index import StoreError, collection_name
    from wiring.calibrating import calibrate_collection, read_labels

    try:
        name = collection_name(collection)
        judged = read_labels(labels, split) if labels is not None else None
        cal = calibrate_collection(store, name, model, token, timeout, judged, weight, seed)
    except (StoreError, ValueError, OSError) as e:
        typer.echo(f"error: {explain(e)}", err=True)
        raise typer.Exit(1) from e
    typer.echo(f"{name}: dense weight {cal.dense_weight} ({cal.source}; {cal.note}) "
               f"in {cal.seconds:.1f} s")
    typer.echo(json.dumps(cal.signals, sort_keys=True))


def register(app: typer.Typer) -> None:
    app.command("tune")(tune)
