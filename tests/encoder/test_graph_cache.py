"""The onnx backend's graph cache (encoder/graph_cache.py): a second load of the same weights
reads the graph instead of building it, and encodes the same; changed weights, a damaged
file or another mode never read a graph made for something else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import encoder
from encoder import graph_cache, onnx_session
from encoder.onnx_graph import calibration_texts
from encoder.onnx_session import OnnxForward

TEXTS = ["a cat sat on the mat", "the stock market fell sharply", "x"]


@pytest.fixture
def tiny(tiny_encoder_dir: Path) -> encoder.TextEncoder:
    return encoder.load(tiny_encoder_dir, device="cpu", backend="torch")


def _calibration(enc: encoder.TextEncoder) -> list[list[int]]:
    return enc.tokenize(calibration_texts()[:64])[0]


def _run(forward: OnnxForward, enc: encoder.TextEncoder) -> np.ndarray:
    return np.asarray(forward(enc.tokenize(TEXTS)[0])[0])


def test_a_second_forward_reads_the_graph_and_encodes_the_same(
        tiny: encoder.TextEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cal = _calibration(tiny)
    first = OnnxForward(tiny.model, calibration=cal, cache=tmp_path)
    assert not first.cached and first.activations == "static"
    assert len(list(tmp_path.glob("*.onnx"))) == 1 and len(list(tmp_path.glob("*.json"))) == 1

    def no_build(*_: object, **__: object) -> None:
        raise AssertionError("built again")

    monkeypatch.setattr(onnx_session, "calibrate", no_build)
    monkeypatch.setattr(onnx_session, "build_graph", no_build)
    second = OnnxForward(tiny.model, calibration=cal, cache=tmp_path)
    assert second.cached and second._ranges == first._ranges
    assert np.array_equal(_run(first, tiny), _run(second, tiny))
    # a session for another thread count reads the graph again rather than building it
    assert second.session(1) is not second.session(2)


def test_changed_weights_another_mode_or_a_damaged_file_are_built_anew(
        tiny: encoder.TextEncoder, tmp_path: Path) -> None:
    cal = _calibration(tiny)
    before = OnnxForward(tiny.model, calibration=cal, cache=tmp_path)
    assert not OnnxForward(tiny.model, calibration=None, cache=tmp_path).cached  # per token
    with torch.no_grad():  # as training does: in place, the recorded fingerprint unchanged
        next(tiny.model.parameters()).mul_(1.5)
    changed = OnnxForward(tiny.model, calibration=cal, cache=tmp_path)
    assert not changed.cached and changed._key != before._key
    assert not np.allclose(_run(before, tiny), _run(changed, tiny))
    graph = tmp_path / f"{changed._key}.onnx"
    graph.write_bytes(graph.read_bytes()[:-10])  # a torn write
    again = OnnxForward(tiny.model, calibration=cal, cache=tmp_path)
    assert not again.cached
    assert np.array_equal(_run(again, tiny), _run(changed, tiny))
    assert OnnxForward(tiny.model, calibration=cal, cache=tmp_path).cached  # rewritten whole


def test_the_least_recently_used_graphs_go_first(
        tiny: encoder.TextEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_cache, "KEEP", 2)
    keys = []
    for _ in range(3):
        with torch.no_grad():
            next(tiny.model.parameters()).add_(0.01)
        keys.append(OnnxForward(tiny.model, cache=tmp_path)._key)
    assert sorted(p.stem for p in tmp_path.glob("*.onnx")) == sorted(keys[1:])
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == sorted(keys[1:])


def test_a_loaded_encoder_uses_the_process_cache(
        tiny_encoder_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_cache.Defaults, "directory", tmp_path / "graphs")
    first = encoder.load(tiny_encoder_dir, device="cpu", backend="onnx")
    second = encoder.load(tiny_encoder_dir, device="cpu", backend="onnx")
    assert first._onnx is not None and second._onnx is not None
    assert not first._onnx.cached and second._onnx.cached
    assert np.array_equal(first.encode(TEXTS), second.encode(TEXTS))
    monkeypatch.setattr(graph_cache.Defaults, "directory", None)  # QKV_GRAPH_CACHE empty
    off = encoder.load(tiny_encoder_dir, device="cpu", backend="onnx")
    assert off._onnx is not None and not off._onnx.cached


def test_a_cache_that_cannot_be_written_only_costs_the_build(
        tiny: encoder.TextEncoder, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    forward = OnnxForward(tiny.model, calibration=_calibration(tiny), cache=blocked / "graphs")
    again = OnnxForward(tiny.model, calibration=_calibration(tiny), cache=blocked / "graphs")
    assert not forward.cached and not again.cached
    assert np.array_equal(_run(forward, tiny), _run(again, tiny))
    assert "could not cache the encoder graph" in caplog.text
