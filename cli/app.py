"""The ``qkv`` command: the root Typer app. Each command group lives in its own module of
this package and registers here; ``python -m cli`` runs it too."""

from __future__ import annotations

import logging

import typer

from cli import (
    adapt,
    alias,
    backup,
    decoder,
    encoder,
    index,
    keys,
    reranker,
    serve,
    stack,
    token_memory,
    tune,
)

app = typer.Typer(help="qkv: retrieval-augmented embedding service.", no_args_is_help=True)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # faiss probes for builds it does not ship (AVX-512, AVX2) and logs each miss as a
    # ModuleNotFoundError at INFO on every start, which reads as an error (issue 75)
    logging.getLogger("faiss.loader").setLevel(logging.DEBUG if verbose else logging.WARNING)
    from pydantic import ValidationError

    from api.settings import Runtime

    try:  # QKV_DEVICE, QKV_NO_BF16 ...: every command runs as the service would
        Runtime().use()
    except ValidationError as e:
        typer.echo(f"qkv: {e}", err=True)
        raise typer.Exit(2) from None


encoder.register(app)
index.register(app)
serve.register(app)
decoder.register(app)
token_memory.register(app)
stack.register(app)
alias.register(app)
tune.register(app)
keys.register(app)
adapt.register(app)
backup.register(app)
reranker.register(app)
