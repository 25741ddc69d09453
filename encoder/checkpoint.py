"""The self-describing checkpoint directory that every qkv model (encoder, decoder) uses:
``model.safetensors`` + ``config.json`` (architecture, training config, metrics) +
``tokenizer.json``. Never pickle."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch import nn

from encoder.device import pick_device

log = logging.getLogger(__name__)
WEIGHTS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.json"


def fingerprint(model: nn.Module, tokenizer: Tokenizer) -> str:
    """sha256 (first 16 hex) of the weights, in name order, and the tokenizer."""
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().float().cpu().contiguous().numpy().tobytes())
    h.update(tokenizer.to_str().encode())
    return h.hexdigest()[:16]


class LoadedModel:
    """A network in eval mode on its device, its tokenizer and its checkpoint's config.json
    (``meta``): what :class:`encoder.TextEncoder` and :class:`decoder.Decoder` have in
    common. ``model.config`` holds the architecture (``name``, ``max_tokens``, ...)."""

    config: Any

    def __init__(self, model: nn.Module, tokenizer: Tokenizer,
                 device: torch.device | str | None = None,
                 meta: dict[str, Any] | None = None) -> None:
        self.device = pick_device(str(device) if device is not None else None)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.meta = meta or {}
        self._fingerprint: str | None = None

    @property
    def name(self) -> str:
        return str(self.config.name)

    @property
    def max_tokens(self) -> int:
        return int(self.config.max_tokens)

    @property
    def fingerprint(self) -> str:
        """sha256 (first 16 hex) of the weights, in name order, and the tokenizer."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.model, self.tokenizer)
        return self._fingerprint

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> None:
        """Write the self-describing checkpoint directory (safetensors, config, tokenizer)."""
        save_checkpoint(path, self.model, self.tokenizer, extra or self.meta)


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


def save_training_state(
    out: Path, model: nn.Module, tokenizer: Tokenizer, opt: torch.optim.Optimizer, step: int,
    training: dict[str, Any],
) -> None:
    """``out/last``: the checkpoint, the optimiser's state (safetensors, keyed
    ``param::name``) and the step, so a stopped run resumes exactly."""
    last = out / "last"
    save_checkpoint(last, model, tokenizer, {"training": training, "step": step})
    state: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        for k, v in opt.state.get(p, {}).items():
            state[f"{name}::{k}"] = torch.as_tensor(v).detach().cpu().contiguous()
    save_file(state, str(last / "optimizer.safetensors.tmp"))
    (last / "optimizer.safetensors.tmp").replace(last / "optimizer.safetensors")
    (last / "trainer_state.json").write_text(json.dumps({"step": step}))


def load_training_state(out: Path, model: nn.Module, opt: torch.optim.Optimizer) -> int:
    """Restore ``out/last`` into ``model`` and ``opt``; the step to go on from (0: none)."""
    last = out / "last"
    if not (last / "trainer_state.json").is_file():
        return 0
    model.load_state_dict(load_file(str(last / WEIGHTS)))
    state = load_file(str(last / "optimizer.safetensors"))
    for name, p in model.named_parameters():
        st = {k.split("::", 1)[1]: v for k, v in state.items() if k.startswith(name + "::")}
        if st:
            opt.state[p] = {k: (v if k == "step" else v.to(p.device)) for k, v in st.items()}
    step = int(json.loads((last / "trainer_state.json").read_text())["step"])
    log.info("resuming from %s at step %d", last, step)
    return step
