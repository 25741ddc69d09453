"""The ``qkv`` command line. Each command group lives in its own module and registers here."""

from __future__ import annotations

import logging

import typer

from api import decoder_commands, encoder_commands, index_commands, serve_commands, stack_commands

app = typer.Typer(help="qkv: retrieval-augmented embedding service.", no_args_is_help=True)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


encoder_commands.register(app)
index_commands.register(app)
serve_commands.register(app)
decoder_commands.register(app)
stack_commands.register(app)


if __name__ == "__main__":  # torchrun --nproc_per_node N -m api.cli train-encoder ...
    app()
