"""Gradient caching (encoder.grad_cache): the same gradient as one forward of the whole
batch, and a training run that uses it."""

import json
from pathlib import Path

import pytest
import torch

from encoder.config import EncoderConfig
from encoder.device import Defaults
from encoder.grad_cache import cached_backward
from encoder.losses import InfoNCE, Matryoshka, duplicates
from encoder.model import TransformerEncoder
from encoder.train import TrainConfig, train

ARCH = {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_tokens": 24,
        "vocab_size": 300, "matryoshka": (16,)}


def _ids(n: int, gen: torch.Generator) -> torch.Tensor:
    """n id rows of ragged lengths (padding 0 after each), as the loader pads a batch."""
    ids = torch.randint(5, 300, (n, 20), generator=gen)
    for i, length in enumerate(torch.randint(3, 21, (n,), generator=gen).tolist()):
        ids[i, length:] = 0
    return ids


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_cached_gradient_equals_one_big_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Defaults, "bf16", False)  # fp32 on every CPU: exact comparison
    torch.manual_seed(0)
    model = TransformerEncoder(EncoderConfig(**ARCH)).train()
    gen = torch.Generator().manual_seed(1)
    q, d, h = _ids(10, gen), _ids(10, gen), _ids(4, gen)
    rows = torch.arange(14)
    rows[3] = rows[7]  # a duplicate positive: masked, not a negative
    same = duplicates(rows[:10], rows, torch.arange(100, 110))
    loss_fn = Matryoshka(InfoNCE(0.05), (16,))

    full = [model(x)[0] for x in (q, d, h)]
    want, want_acc = loss_fn(*full, same)
    want.backward()
    reference = _grads(model)
    model.zero_grad(set_to_none=True)

    got, got_acc = cached_backward(model, (q, d, h), loss_fn, 3, torch.device("cpu"), same)
    cached = _grads(model)
    assert torch.allclose(got, want, atol=1e-5) and got_acc == want_acc
    assert reference.keys() == cached.keys() and len(cached) > 10
    for name, g in reference.items():
        assert torch.allclose(cached[name], g, atol=1e-5, rtol=1e-4), name
    assert max(g.abs().max().item() for g in cached.values()) > 1e-3  # not all zeros


def test_dropout_masks_replay_within_a_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """One chunk holding the whole batch: the cached step is the plain step, dropout and
    all, only if the second forward drew the first one's masks."""
    monkeypatch.setattr(Defaults, "bf16", False)
    torch.manual_seed(0)
    model = TransformerEncoder(EncoderConfig(**ARCH, dropout=0.3)).train()
    gen = torch.Generator().manual_seed(2)
    q, d = _ids(8, gen), _ids(8, gen)
    loss_fn = InfoNCE(0.05)
    torch.manual_seed(9)
    want, _ = loss_fn(model(q)[0], model(d)[0])
    want.backward()
    reference = _grads(model)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(9)
    got, _ = cached_backward(model, (q, d), loss_fn, 8, torch.device("cpu"))
    assert torch.allclose(got, want, atol=1e-5)
    for name, g in reference.items():
        assert torch.allclose(model.get_parameter(name).grad, g, atol=1e-5, rtol=1e-4), name


def test_a_run_with_gradient_caching_trains_and_says_so(data_dir: Path, tmp_path: Path
                                                        ) -> None:
    cfg = TrainConfig(data_dir=str(data_dir), out_dir=str(tmp_path / "run"), steps=6,
                      batch_size=16, lr=3e-3, warmup_steps=2, checkpoint_every=6, device="cpu",
                      arch={k: v for k, v in ARCH.items() if k != "matryoshka"},
                      matryoshka=[16], grad_cache=5, hard_negatives=False)
    out = train(cfg)
    meta = json.loads((out / "config.json").read_text())["training"]
    assert meta["grad_cache"] == 5 and meta["steps"] == 6
    assert meta["final_loss_ema"] is not None and meta["final_loss_ema"] > 0


def test_gradient_caching_is_refused_where_it_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="chunk"):
        cached_backward(torch.nn.Linear(2, 2), [], InfoNCE(), 0, torch.device("cpu"))
    with pytest.raises(ValueError, match="grad_cache"):
        train(TrainConfig(data_dir="", out_dir=str(tmp_path), grad_cache=0))
