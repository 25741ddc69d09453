"""The token memory (decoder.knn, kNN-MT): built from a decoder's own teacher-forced
states, it makes an untrained decoder write the memory's targets; far from every key it
changes nothing; it is refused by another decoder; IVF-PQ finds what exact search finds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import decoder
from decoder.knn import (
    FLAT_BELOW,
    KnnMixer,
    KnnOptions,
    MemoryMismatchError,
    TokenMemory,
    collect_keys,
)
from decoder.testing import tiny_decoder, toy_pairs

PAIRS = toy_pairs(40, seed=3)


@pytest.fixture(scope="module")
def dec(tmp_path_factory: pytest.TempPathFactory) -> decoder.Decoder:
    return decoder.load(tiny_decoder(tmp_path_factory.mktemp("knn") / "dec"), device="cpu")


@pytest.fixture(scope="module")
def memory(dec: decoder.Decoder) -> TokenMemory:
    keys, values, rows = collect_keys(dec, [s for s, _ in PAIRS], [t for _, t in PAIRS],
                                      batch_size=16)
    n_tokens = sum(len(dec.tokenizer.encode(t).ids) + 1 for _, t in PAIRS)  # + </s>
    assert keys.shape == (n_tokens, dec.config.d_model) and keys.dtype == np.float16
    assert values.shape == rows.shape == (n_tokens,)
    assert set(rows.tolist()) == set(range(len(PAIRS)))
    assert (values == dec.config.eos_id).sum() == len(PAIRS)  # one </s> per pair
    return TokenMemory.build(keys, values, rows, dec.name, dec.fingerprint)


@pytest.mark.parametrize("beam", [1, 3])
def test_an_exact_memory_makes_an_untrained_decoder_write_its_targets(
        dec: decoder.Decoder, memory: TokenMemory, beam: int) -> None:
    sources = [s for s, _ in PAIRS[:6]]
    plain = dec.translate(sources, beam=beam)
    assert plain != [t for _, t in PAIRS[:6]]  # random weights: not the targets
    # each step's state equals a key of its own pair (distance 0): with λ = 1 the memory
    # alone picks the next token
    mix = KnnMixer(memory, KnnOptions(k=1, temperature=1.0, lam=1.0, adaptive=False))
    got = dec.translate(sources, beam=beam, mix=mix)
    assert got == [t for _, t in PAIRS[:6]]
    assert mix.steps > 0 and mix.lam_sum == pytest.approx(mix.steps)


def test_far_from_every_key_the_adaptive_memory_changes_nothing(
        dec: decoder.Decoder, memory: TokenMemory) -> None:
    sources = ["A white fox swims near the river.", "A big duck sleeps on the beach."]
    # a reach far below the smallest distance of a state the memory does not hold
    far = KnnMixer(memory, KnnOptions(k=4, temperature=1.0, lam=1.0, reach=1e-9))
    assert dec.translate(sources, beam=2, mix=far) == dec.translate(sources, beam=2)
    assert far.steps > 0 and far.lam_sum == 0.0


def test_a_memory_is_saved_read_and_refused_by_another_decoder(
        memory: TokenMemory, dec: decoder.Decoder, tmp_path: Path) -> None:
    path = memory.save(tmp_path / "tm-tokens")
    again = TokenMemory.load(path, dec.fingerprint)
    assert again.size == memory.size and again.meta["layout"] == "Flat"
    assert np.array_equal(again.values, memory.values)
    q = np.random.default_rng(0).normal(size=(3, dec.config.d_model)).astype(np.float32)
    assert np.array_equal(again.search(q, 5)[1], memory.search(q, 5)[1])
    with pytest.raises(MemoryMismatchError, match="build it again"):
        TokenMemory.load(path, "0123456789abcdef")
    memory.save(path)  # replacing a memory leaves no temporary directory behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tm-tokens"]


def test_options_out_of_range_are_refused(memory: TokenMemory) -> None:
    for bad, match in ((KnnOptions(lam=1.5), "lambda"), (KnnOptions(temperature=0), "temp"),
                       (KnnOptions(k=0), "k must"), (KnnOptions(reach=-1), "reach")):
        with pytest.raises(ValueError, match=match):
            KnnMixer(memory, bad)


def test_added_keys_vote_without_rebuilding(dec: decoder.Decoder) -> None:
    """Pairs added later (the translation memory grows) are found like the first ones."""
    first, later = PAIRS[:20], PAIRS[20:]
    k1, v1, r1 = collect_keys(dec, [s for s, _ in first], [t for _, t in first])
    memory = TokenMemory.build(k1, v1, r1, dec.name, dec.fingerprint)
    k2, v2, r2 = collect_keys(dec, [s for s, _ in later], [t for _, t in later])
    memory.add_pairs(k2, v2, r2, [f"later-{i}" for i in range(len(later))])
    assert memory.ids[-1] == f"later-{len(later) - 1}" and len(memory.ids) == len(PAIRS)
    mix = KnnMixer(memory, KnnOptions(k=1, temperature=1.0, lam=1.0, adaptive=False))
    assert dec.translate([s for s, _ in later[:4]], beam=1, mix=mix) == [
        t for _, t in later[:4]]
    assert memory.remove_pairs(["later-0", "nope"]) == 1  # its tokens stop voting
    _, found = memory.search(k2[r2 == 0].astype(np.float32), 3)
    assert not np.isin(memory.rows[found[found >= 0]], [len(first)]).any()


def test_ivf_pq_finds_what_exact_search_finds() -> None:
    """From FLAT_BELOW keys on the memory is IVF-PQ: on clustered keys its nearest key is
    the exact one for most queries."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(200, 32)).astype(np.float32) * 4
    keys = centres[rng.integers(0, 200, FLAT_BELOW + 5000)] + rng.normal(
        size=(FLAT_BELOW + 5000, 32)).astype(np.float32)
    values = np.arange(len(keys), dtype=np.int32)
    # 8 sub-quantisers, not 16: training each took about 1.6 s here (2 cores, AVX2)
    memory = TokenMemory.build(keys, values, values, "x", "f", pq_m=8)
    assert memory.meta["layout"].startswith("IVF") and memory.meta["layout"].endswith("PQ8")
    q = keys[:200] + 0.05 * rng.normal(size=(200, 32)).astype(np.float32)
    _, found = memory.search(q, 10, nprobe=16)
    assert np.mean([i in row for i, row in enumerate(found)]) >= 0.8
