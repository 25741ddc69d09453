"""The self-describing checkpoint directory that every qkv model (encoder, decoder) uses:
``model.safetensors`` + ``config.json`` (architecture, training config, metrics) +
``tokenizer.json``. Never pickle."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch import nn

WEIGHTS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.json"


def fingerprint(model: nn.Module, tokenizer: Tokenizer) -> str:
    """sha256 (first 16 hex) of the weights, in name order, and the tokenizer."""
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().float().cpu().contiguous().numpy().tobytes())
    h.update(tokenizer.to_str().encode())
    return h.hexdigest()[:16]


def save_checkpoint(
    path: str | Path, model: nn.Module, tokenizer: Tokenizer, extra: dict[str, Any]
) -> None:
    """Write the directory; ``config.json`` is ``extra`` plus the model's architecture
    (``model.config.to_dict()``). The weights are written to a temporary file first."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tmp = path / (WEIGHTS + ".tmp")
    save_file(state, str(tmp))
    tmp.replace(path / WEIGHTS)
    tokenizer.save(str(path / TOKENIZER))
    config = {**extra, "architecture": model.config.to_dict()}  # type: ignore[union-attr,operator]
    (path / CONFIG).write_text(json.dumps(config, indent=2, default=str) + "\n")


def read_checkpoint(
    path: str | Path, kind: str
) -> tuple[dict[str, Any], dict[str, torch.Tensor], Tokenizer]:
    """(config.json, weights, tokenizer) of a directory written by :func:`save_checkpoint`;
    ``kind`` ("an encoder", "a decoder") names it in the error when a file is missing."""
    path = Path(path)
    for name in (WEIGHTS, CONFIG, TOKENIZER):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path} is not {kind} checkpoint: {name} missing")
    meta = json.loads((path / CONFIG).read_text())
    return meta, load_file(str(path / WEIGHTS)), Tokenizer.from_file(str(path / TOKENIZER))
