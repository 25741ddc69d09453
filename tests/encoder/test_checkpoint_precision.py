"""Checkpoints store their tensors in fp16 (embedding tables in 8-bit blocks) and load them
into float32; the shipped encoder's vectors stay those of its fp32 weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

import encoder
from encoder.checkpoint import (
    PRECISIONS,
    Q8_BLOCK,
    dequantize_q8,
    loaded_state,
    quantize_q8,
    stored_state,
)
from encoder.device import Defaults

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ["encoder-default", "decoder-en-fr"]
TEXTS = ["A man is playing a flute.", "How do I read a JSON file?", "", "ünïcödé 🙂"]


def test_q8_round_trip_error_is_at_most_half_a_step() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 4 * Q8_BLOCK, generator=g) * torch.logspace(-3, 1, 50)[:, None]
    x[7] = 0.0  # a padding row stays exactly zero
    codes, scale = quantize_q8(x)
    assert codes.dtype == torch.int8 and scale.dtype == torch.float16
    assert scale.shape == (50, 4)
    y = dequantize_q8(codes, scale)
    step = scale.float().repeat_interleave(Q8_BLOCK, dim=1)
    assert torch.all((y - x).abs() <= step / 2 + 1e-7)
    assert torch.equal(y[7], torch.zeros(4 * Q8_BLOCK))
    again = quantize_q8(y)  # storing what was loaded changes nothing
    assert torch.equal(again[0], codes) and torch.equal(again[1], scale)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_stored_dtypes_and_float32_on_load(tiny_encoder_dir: Path, precision: str) -> None:
    enc = encoder.load(tiny_encoder_dir, device="cpu")
    state = stored_state(enc.model, precision)
    floats = {k: v.dtype for k, v in state.items() if v.is_floating_point()}
    if precision == "fp32":
        assert set(floats.values()) == {torch.float32}
    else:
        assert set(floats.values()) == {torch.float16}
    assert ("embed.weight.q8" in state) == (precision == "fp16+q8")
    assert ("embed.weight" in state) == (precision != "fp16+q8")
    loaded = loaded_state(state)
    assert loaded.keys() == enc.model.state_dict().keys()
    assert all(v.dtype == torch.float32 for v in loaded.values() if v.is_floating_point())


def test_unknown_precision_names_the_valid_ones(tiny_encoder_dir: Path) -> None:
    enc = encoder.load(tiny_encoder_dir, device="cpu")
    with pytest.raises(ValueError, match="fp32, fp16, fp16\\+q8"):
        stored_state(enc.model, "int4")


def test_saved_checkpoints_are_compact_and_encode_as_the_fp32_model(
        tiny_encoder_dir: Path, tmp_path: Path) -> None:
    enc = encoder.load(tiny_encoder_dir, device="cpu")
    enc.save(tmp_path / "fp32", {}, precision="fp32")
    enc.save(tmp_path / "default", {})
    with safe_open(str(tmp_path / "default/model.safetensors"), "pt") as f:
        assert f.metadata()["qkv_precision"] == "fp16+q8"
    sizes = {p: (tmp_path / p / "model.safetensors").stat().st_size for p in ("fp32", "default")}
    assert sizes["default"] < 0.5 * sizes["fp32"]
    a = encoder.load(tmp_path / "fp32", device="cpu").encode(TEXTS)
    b = encoder.load(tmp_path / "default", device="cpu").encode(TEXTS)
    assert float((a * b).sum(axis=1).min()) >= 0.999


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_checkpoints_are_stored_compact(name: str) -> None:
    path = ROOT / "models" / name / "model.safetensors"
    with safe_open(str(path), "pt") as f:
        assert f.metadata()["qkv_precision"] == "fp16+q8"
    dtypes = {v.dtype for v in load_file(str(path)).values()}
    assert dtypes <= {torch.float16, torch.int8, torch.int64}


def test_shipped_encoder_matches_its_fp32_vectors(
        monkeypatch: pytest.MonkeyPatch, fp32_reference: tuple[list[str], np.ndarray, str]
) -> None:
    """Reference vectors of the fp32 weights (tests/fixtures/make_fp32_reference.py); the
    comparison is of storage, so both run in float32 (no bf16 autocast)."""
    monkeypatch.setattr(Defaults, "bf16", False)  # QKV_NO_BF16
    texts, want, fingerprint_fp32 = fp32_reference
    enc = encoder.load(ROOT / "models/encoder-default", device="cpu", backend="torch")
    meta = json.loads((ROOT / "models/encoder-default/config.json").read_text())
    assert meta["fingerprint_fp32"] == fingerprint_fp32 != enc.fingerprint
    cos = (enc.encode(texts) * want).sum(axis=1)
    assert len(cos) >= 300 and float(cos.min()) >= 0.999, float(cos.min())
