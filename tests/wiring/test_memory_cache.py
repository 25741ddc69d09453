"""The translation memory's vector cache is keyed by the encoder's fingerprint: another
encoder (e.g. the same model stored at another precision) never reads the old vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import encoder
from wiring.translation_memory import TranslationMemory

SOURCES = ["A dog runs on the beach.", "Two men play chess.", "A child eats an apple."]
TARGETS = ["Un chien court sur la plage.", "Deux hommes jouent aux échecs.",
           "Un enfant mange une pomme."]


def test_cache_is_per_encoder_fingerprint(tiny_encoder_dir: Path, other_tiny_encoder_dir: Path,
                                          tmp_path: Path) -> None:
    a = encoder.load(tiny_encoder_dir, device="cpu")
    b = encoder.load(other_tiny_encoder_dir, device="cpu")
    tm_a = TranslationMemory.build(a, SOURCES, TARGETS, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.npy"))) == 1
    tm_b = TranslationMemory.build(b, SOURCES, TARGETS, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.npy"))) == 2  # a second entry, not the first one reused
    np.testing.assert_allclose(tm_b.xb, b.encode(SOURCES), atol=1e-5)
    assert not np.allclose(tm_a.xb, tm_b.xb, atol=1e-5)
    again = TranslationMemory.build(a, SOURCES, TARGETS, cache_dir=tmp_path)
    np.testing.assert_array_equal(again.xb, tm_a.xb)  # read back from the cache
