from pathlib import Path

import numpy as np
import pytest
import torch

import encoder
from encoder.tokenizer import clean_text


@pytest.fixture(scope="module")
def enc(tiny_encoder_dir: Path) -> encoder.TextEncoder:
    return encoder.load(tiny_encoder_dir, device="cpu")


TEXTS = ["A dog runs in the park.", "cat", "A white horse sleeps near the river at night.",
         "Le café est très bon ☕ 東京", "fish swim"]


def test_encode_shape_dtype_norm(enc: encoder.TextEncoder) -> None:
    x = enc.encode(TEXTS)
    assert x.shape == (len(TEXTS), enc.dim) and x.dtype == np.float32
    assert x.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)


def test_length_bucketing_restores_input_order(enc: encoder.TextEncoder) -> None:
    together = enc.encode(TEXTS, batch_size=2)
    one_by_one = np.stack([enc.encode([t])[0] for t in TEXTS])
    # bf16 autocast may round differently with different padding; order must still match
    np.testing.assert_allclose(together, one_by_one, atol=2e-2)
    sims = together @ one_by_one.T
    assert (sims.argmax(axis=1) == np.arange(len(TEXTS))).all()


def test_one_text_tokenizes_as_it_does_among_others(enc: encoder.TextEncoder) -> None:
    # one text takes the tokenizer's single-text call, several its batch call
    many, cut = enc.tokenize(TEXTS + [" ".join(["horse"] * 300)])
    for i, text in enumerate(TEXTS + [" ".join(["horse"] * 300)]):
        assert enc.tokenize([text]) == ([many[i]], [cut[i]])
    assert cut[-1]  # the long one was cut, in both calls


def test_ids_without_offsets_are_the_ids_with_them(enc: encoder.TextEncoder) -> None:
    """A batch is tokenized without offsets (``encode_batch_fast``) unless the weights are
    asked for, and passages are counted that way: the same ids and counts as with them."""
    from index.passages import token_counter

    texts = [*TEXTS, "naïve café — ünïcödé 東京 😀", "a\x00b\u2028c\td", "", "  ",
             " ".join(["horse"] * 300), "Ω≈ç√∫ ﬁ ＡＢＣ"]
    ids, cut = enc.tokenize(texts)
    slow = [e.ids for e in enc.tokenizer.encode_batch([clean_text(t) for t in texts])]
    assert ids == [x[:enc.max_tokens] for x in slow]
    assert cut == [len(x) > enc.max_tokens for x in slow]
    assert token_counter(enc.tokenizer)(texts) == [
        len(e.ids) for e in enc.tokenizer.encode_batch(texts)]
    _, explained = enc.encode(texts, return_weights=True)  # offsets still there for these
    assert all(len(e.offsets) == len(e.tokens) for e in explained)
    assert explained[0].offsets[1][1] > 0


def test_empty_list_gives_zero_rows(enc: encoder.TextEncoder) -> None:
    assert enc.encode([]).shape == (0, enc.dim)


def test_empty_whitespace_and_control_characters_are_one_documented_case(
    enc: encoder.TextEncoder,
) -> None:
    x = enc.encode(["", "   \t\n ", "\x00\x07\u200b", "dog", "dog\x00\x1f", "  dog  "])
    assert np.isfinite(x).all()
    np.testing.assert_allclose(x[0], x[1], atol=1e-6)  # all empty → the <s> vector
    np.testing.assert_allclose(x[0], x[2], atol=1e-6)
    np.testing.assert_allclose(x[3], x[4], atol=1e-6)  # control characters → spaces
    np.testing.assert_allclose(x[3], x[5], atol=1e-6)
    assert clean_text("a\x00b\u2028c  d") == "a b c d"


def test_non_string_raises_type_error_naming_position(enc: encoder.TextEncoder) -> None:
    with pytest.raises(TypeError, match=r"texts\[2\] is int"):
        enc.encode(["a", "b", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="single string"):
        enc.encode("just one string")


def test_truncation_is_reported(enc: encoder.TextEncoder) -> None:
    long = " ".join(["horse"] * 200)
    assert enc.truncated(["dog", long]) == [False, True]
    ids, cut = enc.tokenize([long])
    assert len(ids[0]) == enc.max_tokens and cut == [True]
    _, explained = enc.encode([long, "dog"], return_weights=True)
    assert explained[0].truncated and not explained[1].truncated


def test_return_weights_gives_tokens_and_pooling_weights(enc: encoder.TextEncoder) -> None:
    x, explained = enc.encode(["a dog runs", "cat"], return_weights=True)
    assert x.shape == (2, enc.dim)
    for e in explained:
        assert e.tokens[0] == "<s>" and len(e.tokens) == len(e.weights)
        assert abs(sum(e.weights) - 1.0) < 1e-4
    assert len(explained[0].tokens) > len(explained[1].tokens)


def test_segments_cut_the_text_at_tokens_and_join_back(enc: encoder.TextEncoder) -> None:
    texts = [*TEXTS, "Tabs\tand  spaces,\x00control ﬁne", " ".join(["horse"] * 200)]
    _, explained = enc.encode(texts, return_weights=True)
    for text, e in zip(texts, explained, strict=True):
        assert e.text == clean_text(text) and len(e.offsets) == len(e.tokens)
        segs = e.segments()
        assert "".join(t for t, _ in segs) == e.text
        weighed = [(t, w) for t, w in segs if w is not None]
        # a word's piece without the space before it; a token of spaces only keeps them
        assert all(t and (t.strip() == t or not t.strip()) for t, _ in weighed)
        # every token's weight lands on one piece, except <s>, which spans nothing
        assert sum(w for _, w in weighed) == pytest.approx(sum(e.weights) - e.weights[0],
                                                           abs=1e-5)
        for (a, b), tok in zip(e.offsets[1:], e.tokens[1:], strict=True):
            assert 0 <= a < b <= len(e.text), tok
    horses = explained[-1]
    assert horses.truncated and segs[-1][1] is None, "text past the limit weighs nothing"
    assert horses.segments()[-1][0].strip().startswith("horse")


def test_fingerprint_is_stable_and_tracks_weights(
    enc: encoder.TextEncoder, tiny_encoder_dir: Path, tmp_path: Path
) -> None:
    again = encoder.load(tiny_encoder_dir, device="cpu")
    assert enc.fingerprint == again.fingerprint and len(enc.fingerprint) == 16
    with torch.no_grad():
        again.model.embed.weight[5, 0] += 1.0
    again._fingerprint = None
    assert again.fingerprint != enc.fingerprint


def test_save_load_round_trip(enc: encoder.TextEncoder, tmp_path: Path) -> None:
    enc.save(tmp_path / "copy", {"note": "round trip"})
    copy = encoder.load(tmp_path / "copy", device="cpu")
    assert copy.fingerprint == enc.fingerprint and copy.dim == enc.dim
    assert copy.max_tokens == enc.max_tokens
    np.testing.assert_allclose(copy.encode(TEXTS), enc.encode(TEXTS), atol=1e-6)
    assert not any(p.suffix in {".pt", ".pkl", ".bin"} for p in (tmp_path / "copy").iterdir())


def test_load_missing_checkpoint_is_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="model.safetensors missing"):
        encoder.load(tmp_path)


def test_bad_batch_size(enc: encoder.TextEncoder) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        enc.encode(["a"], batch_size=0)


def test_onnx_batches_split_where_padded_attention_would_cost_more_than_a_run() -> None:
    from encoder.text_encoder import _length_groups, onnx_pad_budget

    lengths = [79, 46, 44, 42, 40, 38, 36, 34, 30, 28, 25, 20, 16, 14]  # an API batch
    order = list(range(len(lengths)))
    torch_groups = _length_groups(order, lengths, 64, 256)
    assert torch_groups[0][:3] == [0, 1, 2]  # by FLOPs alone the 79 pads the next ones
    groups = _length_groups(order, lengths, 64, 256, onnx=True)
    assert groups[0] == [0]  # the 79-token text alone: with it the rest would pad to 79
    assert [i for g in groups for i in g] == order and len(groups) < len(lengths)

    def cost(cut: list[list[int]]) -> float:
        return sum(onnx_pad_budget() + sum(lengths[g[0]] ** 2 - lengths[i] ** 2 for i in g)
                   for g in cut)

    assert cost(groups) <= min(cost([order]), cost([[i] for i in order]),
                               cost([order[:3], order[3:]]))  # the greedy cut's
    assert all(len(g) <= 4 for g in _length_groups(order, lengths, 4, 256, onnx=True))


def test_the_cheapest_cut_is_the_cheapest_of_all_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`_cheapest_cut` against every cut of small batches (exhaustive) and, past
    the rows it computes at once (``CUT_ROWS``, or fewer within ``CUT_CELLS``), against
    the plain recursion in Python."""
    import itertools
    import random

    from encoder.text_encoder import CUT_ROWS, _cheapest_cut

    rng = random.Random(3)

    def cost(cut: list[list[int]], lengths: list[int], run: float) -> float:
        return sum(run + sum(lengths[g[0]] ** 2 - lengths[i] ** 2 for i in g) for g in cut)

    for _ in range(200):
        n, size = rng.randint(0, 9), rng.randint(1, 5)
        lengths = [rng.randint(1, 60) for _ in range(n)]
        order = sorted(range(n), key=lambda i: -lengths[i])
        run = float(rng.choice([0, 50, 500, 5000]))
        got = _cheapest_cut(order, lengths, size, run)
        assert [i for g in got for i in g] == order and all(0 < len(g) <= size for g in got)
        cuts = [[order[a:b] for a, b in zip((0, *ends), (*ends, n), strict=True)]
                for k in range(n) for ends in itertools.combinations(range(1, n), k)]
        least = min((cost(c, lengths, run) for c in cuts if all(len(g) <= size for g in c)),
                    default=0.0)
        assert cost(got, lengths, run) == least

    n, size, run = CUT_ROWS * 2 + 77, 8, 20000.0  # batches of every size from 1 to 8
    lengths = [rng.randint(1, 3000) for _ in range(n)]
    order = sorted(range(n), key=lambda i: -lengths[i])
    best = [0.0] + [float("inf")] * n
    for j in range(1, n + 1):
        for i in range(max(0, j - size), j):
            t = lengths[order[i]] ** 2
            best[j] = min(best[j], best[i] + run + sum(t - lengths[order[x]] ** 2
                                                       for x in range(i, j)))
    got = _cheapest_cut(order, lengths, size, run)
    assert {len(g) for g in got} == set(range(1, size + 1))
    assert [i for g in got for i in g] == order and cost(got, lengths, run) == best[n]
    from encoder import text_encoder

    monkeypatch.setattr(text_encoder, "CUT_CELLS", 5 * size + 3)  # 5 rows at once
    assert _cheapest_cut(order, lengths, size, run) == got


def test_the_pad_budget_follows_the_cpus_vector_width(monkeypatch: pytest.MonkeyPatch) -> None:
    from encoder import text_encoder as T

    try:
        for flags, want in ((frozenset({"avx2", "avx512f", "avx512_vnni"}), T.ONNX_PAD_BUDGET),
                            (frozenset({"avx2", "fma"}), T.ONNX_PAD_BUDGET_AVX2)):
            monkeypatch.setattr(T, "cpu_flags", lambda f=flags: f)
            T.onnx_pad_budget.cache_clear()
            assert T.onnx_pad_budget() == want
    finally:
        T.onnx_pad_budget.cache_clear()  # this machine's, read again at the next call
    assert T.ONNX_PAD_BUDGET_AVX2 < T.ONNX_PAD_BUDGET
