"""``qkv train-encoder`` and ``qkv eval-encoder``."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Placeholder until the encoder commands land (filled below in this issue)."""
