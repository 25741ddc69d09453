"""encoder.backend_pick: the backend timed per CPU, kept to the quality bound, cached."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import encoder
from encoder import backend_pick
from encoder.backend_pick import cache_key, choose, int8_kernels


def test_the_faster_backend_is_picked_with_its_figures_and_cached(
        tiny_encoder_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enc = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    cache = tmp_path / "choice.json"
    first = choose(enc, cache, threads=1)
    assert first.backend in ("onnx", "torch") and not first.cached
    assert enc.backend == first.backend  # left on it
    assert set(first.per_s) == {"onnx", "torch"} and min(first.per_s.values()) > 0
    assert first.backend == max(first.per_s, key=lambda n: first.per_s[n])
    assert min(first.cosine.values()) >= backend_pick.MIN_COSINE
    assert "sentences/s" in first.why and first.kernels in first.why
    assert json.loads(cache.read_text())[cache_key(enc.fingerprint, 1)]["backend"] == \
        first.backend

    def no_timing(*a: object, **k: object) -> None:
        raise AssertionError("timed again although cached")

    monkeypatch.setattr(backend_pick, "measure", no_timing)
    again = choose(encoder.load(tiny_encoder_dir, device="cpu", backend="torch"), cache, 1)
    assert again.cached and again.backend == first.backend and again.per_s == first.per_s
    with pytest.raises(AssertionError, match="timed again"):
        choose(enc, cache, threads=2)  # another thread count is another measurement


def test_the_pick_times_the_api_small_batches_too(
        tiny_encoder_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A backend fast on batches of 64 but slow on small ones (torch on an AMX Xeon: about
    # 900 against onnx's 1,000 at 64, 400 against 950 at 16) must lose: the API's batches
    # are small. Here the slowness is made: a pause per small torch batch, per onnx batch of 64.
    import time

    enc = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    real = enc.encode_ids
    seen: dict[str, set[int]] = {"onnx": set(), "torch": set()}

    def encode_ids(ids: list[list[int]], batch_size: int = 64, **kw: object) -> np.ndarray:
        if not kw:  # a timed run (the fp32 reference passes fp32=True)
            seen[enc.backend].add(batch_size)
            for _ in range(0, len(ids), batch_size):
                time.sleep(0.01 if (enc.backend == "torch") == (batch_size < 64) else 0.0)
        return real(ids, batch_size=batch_size, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(enc, "encode_ids", encode_ids)
    choice = choose(enc, None, threads=1)
    assert seen == {"onnx": {8, 64}, "torch": {8, 64}}
    assert choice.backend == "onnx" and "batches of 64 and 8" in choice.why


def test_a_backend_that_misses_the_quality_bound_is_left_out(
        tiny_encoder_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enc = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    monkeypatch.setattr(backend_pick, "MIN_COSINE", 1.5)  # nothing can reach it
    choice = choose(enc, None, threads=1)
    assert choice.backend == "torch" and "no backend kept" in choice.why
    assert choice.per_s == {}


def test_fp32_reference_ignores_the_int8_graph(tiny_encoder_dir: Path) -> None:
    fast = encoder.load(tiny_encoder_dir, device="cpu", backend="onnx")
    plain = encoder.load(tiny_encoder_dir, device="cpu", backend="torch")
    ids = backend_pick.sample_ids(fast.config.vocab_size, 1, n=16, max_len=fast.max_tokens)
    assert all(len(x) <= fast.max_tokens for x in ids)
    ref = plain.encode_ids(ids, fp32=True)
    np.testing.assert_allclose(fast.encode_ids(ids, fp32=True), ref, atol=1e-6)
    assert not np.array_equal(fast.encode_ids(ids), ref)  # int8 is not fp32


@pytest.mark.parametrize(("flags", "family"), [
    ({"avx2", "avx512f", "avx512bw", "avx512_vnni"}, "AVX-512 VNNI"),
    ({"avx2", "avx_vnni"}, "AVX-VNNI (256-bit)"),
    ({"avx2", "avx512f", "avx512bw"}, "AVX-512 BW (int16 pair sums)"),
    ({"avx2", "fma"}, "AVX2 (int16 pair sums)"),
    ({"sse4_2"}, "SSE (no AVX2: slow int8)"),
])
def test_int8_kernel_family_by_cpu_flags(flags: set[str], family: str) -> None:
    assert int8_kernels(flags) == family


def test_the_cache_key_follows_cpu_threads_and_encoder() -> None:
    base = cache_key("abc", 2, {"avx2"}, "CPU X")
    assert base == cache_key("abc", 2, {"avx2", "sse2"}, "CPU X")  # flags that pick no kernel
    assert len({base, cache_key("abd", 2, {"avx2"}, "CPU X"),
                cache_key("abc", 1, {"avx2"}, "CPU X"),
                cache_key("abc", 2, {"avx2", "avx512_vnni"}, "CPU X"),
                cache_key("abc", 2, {"avx2"}, "CPU Y")}) == 5
