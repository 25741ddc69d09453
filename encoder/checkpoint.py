"""The self-describing checkpoint directory that every qkv model (encoder, decoder) uses:
``model.safetensors`` + ``config.json`` (architecture, training config, metrics) +
``tokenizer.json``. Never pickle.

How the weights are stored (``precision``; the file's metadata says which, and loading
always gives float32 tensors, the compute dtype, whatever was stored):

- ``fp32``: as trained. Training state (``out/last``) uses it, so a resumed run is exact.
- ``fp16``: every floating tensor in float16: half the bytes.
- ``fp16+q8`` (the default for finished checkpoints): float16, except the embedding tables
  (every ``nn.Embedding``: the largest tensors here, 55-57 % of each shipped model), which
  are stored in 8-bit blocks as ggml's Q8_0: per block of 32 values along a row, one
  float16 scale ``s = max|x| / 127`` and int8 codes ``round(x / s)``, as ``NAME.q8`` (int8,
  (V, D)) and ``NAME.q8_scale`` (float16, (V, D / 32)). Rounding error per value is at most
  s / 2 (0.4 % of the block's largest value). Fp16 alone left the tracked tree at 49 MB;
  with the tables in 8 bits it is 41 MB (issue 13: ≤ 45 MB, so that a GPU run can carry
  the checkout and its training data).
"""

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
PRECISIONS = ("fp32", "fp16", "fp16+q8")
Q8_BLOCK = 32


def quantize_q8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes int8 (V, D), scales float16 (V, D / 32)) of a float (V, D) table, D a multiple
    of 32: per block, ``s = max|x| / 127`` rounded to float16, ``codes = round(x / s)``."""
    v, d = x.shape
    blocks = x.detach().float().reshape(v, d // Q8_BLOCK, Q8_BLOCK)  # (V, D/32, 32)
    scale = (blocks.abs().amax(dim=-1) / 127.0).half()  # (V, D/32)
    s = scale.float().unsqueeze(-1)
    codes = torch.where(s > 0, blocks / torch.where(s > 0, s, 1.0), 0.0)
    return codes.round().clamp(-127, 127).to(torch.int8).reshape(v, d), scale


def dequantize_q8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 (V, D) table of :func:`quantize_q8`'s codes and scales."""
    v, d = codes.shape
    blocks = codes.float().reshape(v, d // Q8_BLOCK, Q8_BLOCK)  # (V, D/32, 32)
    return (blocks * scale.float().unsqueeze(-1)).reshape(v, d)


def stored_state(model: nn.Module, precision: str = "fp16+q8") -> dict[str, torch.Tensor]:
    """The tensors written to ``model.safetensors`` at ``precision`` (see the module doc)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    tables = {f"{name}.weight" for name, m in model.named_modules()
              if isinstance(m, nn.Embedding)} if precision == "fp16+q8" else set()
    state: dict[str, torch.Tensor] = {}
    for k, v in model.state_dict().items():
        v = v.detach().cpu()
        if k in tables and v.dim() == 2 and v.shape[1] % Q8_BLOCK == 0:
            state[k + ".q8"], state[k + ".q8_scale"] = quantize_q8(v)
        elif precision != "fp32" and v.is_floating_point():
            state[k] = v.half().contiguous()
        else:
            state[k] = v.contiguous()
    return state


def loaded_state(stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict in the compute dtype (float32) from the tensors of any precision."""
    state: dict[str, torch.Tensor] = {}
    for k, v in stored.items():
        if k.endswith(".q8_scale"):
            continue
        if k.endswith(".q8"):
            state[k[: -len(".q8")]] = dequantize_q8(v, stored[k + "_scale"])
        else:
            state[k] = v.float() if v.is_floating_point() else v
    return state


def hash_weights(h: Any, model: nn.Module) -> None:
    """Feed ``model``'s weights, in name order, as float32, to the hash ``h`` (hashlib's)."""
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().float().cpu().contiguous().numpy().tobytes())


def fingerprint(model: nn.Module, tokenizer: Tokenizer) -> str:
    """sha256 (first 16 hex) of the weights, in name order, and the tokenizer (and the
    token bag's weight, where there is one: it changes the vectors too)."""
    h = hashlib.sha256()
    hash_weights(h, model)
    h.update(tokenizer.to_str().encode())
    lexical = getattr(getattr(model, "config", None), "lexical_weight", 0.0)
    if lexical:
        h.update(f"lexical_weight={float(lexical)!r}".encode())
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

    def save(self, path: str | Path, extra: dict[str, Any] | None = None,
             precision: str = "fp16+q8") -> None:
        """Write the self-describing checkpoint directory (safetensors, config, tokenizer)."""
        save_checkpoint(path, self.model, self.tokenizer, extra or self.meta, precision)


def save_checkpoint(
    path: str | Path, model: nn.Module, tokenizer: Tokenizer, extra: dict[str, Any],
    precision: str = "fp16+q8",
) -> None:
    """Write the directory; ``config.json`` is ``extra`` plus the model's architecture
    (``model.config.to_dict()``), the tokenizer without indentation. The weights are stored
    at ``precision`` (see the module doc), written to a temporary file first."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = stored_state(model, precision)
    tmp = path / (WEIGHTS + ".tmp")
    save_file(state, str(tmp), metadata={"format": "pt", "qkv_precision": precision})
    tmp.replace(path / WEIGHTS)
    tokenizer.save(str(path / TOKENIZER), pretty=False)
    config = {**extra, "architecture": model.config.to_dict()}  # type: ignore[union-attr,operator]
    (path / CONFIG).write_text(json.dumps(config, indent=2, default=str) + "\n")


def read_checkpoint(
    path: str | Path, kind: str
) -> tuple[dict[str, Any], dict[str, torch.Tensor], Tokenizer]:
    """(config.json, weights in float32, tokenizer) of a directory written by
    :func:`save_checkpoint`; ``kind`` ("an encoder", "a decoder") names it in the error when
    a file is missing."""
    path = Path(path)
    for name in (WEIGHTS, CONFIG, TOKENIZER):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path} is not {kind} checkpoint: {name} missing")
    meta = json.loads((path / CONFIG).read_text())
    state = loaded_state(load_file(str(path / WEIGHTS)))
    return meta, state, Tokenizer.from_file(str(path / TOKENIZER))


def save_training_state(
    out: Path, model: nn.Module, tokenizer: Tokenizer, opt: torch.optim.Optimizer, step: int,
    training: dict[str, Any],
) -> None:
    """``out/last``: the checkpoint, the optimiser's state (safetensors, keyed
    ``param::name``) and the step, so a stopped run resumes exactly (weights in fp32)."""
    last = out / "last"
    save_checkpoint(last, model, tokenizer, {"training": training, "step": step}, "fp32")
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
    model.load_state_dict(loaded_state(load_file(str(last / WEIGHTS))))
    state = load_file(str(last / "optimizer.safetensors"))
    for name, p in model.named_parameters():
        st = {k.split("::", 1)[1]: v for k, v in state.items() if k.startswith(name + "::")}
        if st:
            opt.state[p] = {k: (v if k == "step" else v.to(p.device)) for k, v in st.items()}
    step = int(json.loads((last / "trainer_state.json").read_text())["step"])
    log.info("resuming from %s at step %d", last, step)
    return step
