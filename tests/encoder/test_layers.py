import pytest
import torch

from encoder.layers import (
    EncoderBlock,
    FeedForward,
    MultiHeadAttention,
    SinusoidalPositionalEncoding,
    attention,
)


def _key_mask(b: int, t: int, lengths: list[int]) -> torch.Tensor:
    return (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).unsqueeze(1)  # (B,1,T)


@pytest.mark.parametrize("with_mask", [False, True])
def test_fused_sdpa_path_equals_reference(with_mask: bool) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(3, 7, 32)
    mask = _key_mask(3, 7, [7, 4, 1]) if with_mask else None
    mha.fused = True
    fused, w_none = mha(x, mask=mask)
    mha.fused = False
    ref, w = mha(x, mask=mask)
    assert w_none is None and w is not None
    torch.testing.assert_close(fused, ref, atol=1e-5, rtol=1e-5)


def test_need_weights_uses_reference_and_weights_respect_mask() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    _, w = mha(x, mask=_key_mask(2, 5, [5, 3]), need_weights=True)
    assert w is not None and w.shape == (2, 2, 5, 5)  # (B, nh, T, S)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 5))
    assert torch.all(w[1, :, :, 3:] == 0)


def test_attention_reference_matches_formula_and_fully_masked_row_is_zero() -> None:
    torch.manual_seed(1)
    q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 3)
    out, w = attention(q, k, v)
    expected = torch.softmax(q @ k.T / 8**0.5, dim=-1) @ v
    torch.testing.assert_close(out, expected)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2] = False
    out, w = attention(q, k, v, mask)
    assert torch.all(w[2] == 0) and torch.all(out[2] == 0)
    assert not torch.isnan(out).any()


def test_cross_attention_shapes() -> None:
    mha = MultiHeadAttention(16, 4)
    y, _ = mha(torch.randn(2, 3, 16), memory=torch.randn(2, 9, 16))
    assert y.shape == (2, 3, 16)


def test_mha_rejects_indivisible_heads() -> None:
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(30, 4)


def test_sinusoidal_table_values_and_not_persistent() -> None:
    pe = SinusoidalPositionalEncoding(8, 50)
    assert "table" not in pe.state_dict()
    x = torch.zeros(1, 10, 8)
    y = pe(x)
    assert torch.allclose(y[0, 0, 0::2], torch.zeros(4))  # sin(0)
    assert torch.allclose(y[0, 0, 1::2], torch.ones(4))  # cos(0)
    assert torch.allclose(y[0, 3, 0], torch.sin(torch.tensor(3.0)))
    with pytest.raises(ValueError, match="max_len"):
        pe(torch.zeros(1, 51, 8))


def test_feed_forward_is_position_wise() -> None:
    torch.manual_seed(0)
    ffn = FeedForward(8, 16).eval()
    x = torch.randn(2, 5, 8)
    y = ffn(x)
    assert y.shape == x.shape
    torch.testing.assert_close(ffn(x[:, 2:3]), y[:, 2:3])


def test_encoder_block_ignores_padding() -> None:
    torch.manual_seed(0)
    block = EncoderBlock(16, 2, 32).eval()
    x = torch.randn(1, 4, 16)
    padded = torch.cat([x, torch.randn(1, 3, 16)], dim=1)
    y = block(x, _key_mask(1, 4, [4]))
    y_pad = block(padded, _key_mask(1, 7, [4]))
    torch.testing.assert_close(y_pad[:, :4], y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("with_mask", [False, True])
def test_additive_bias_fused_equals_reference_and_shifts_weights(with_mask: bool) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    mask = _key_mask(2, 5, [5, 4]) if with_mask else None
    bias = torch.zeros(2, 2, 1, 5)
    bias[:, :, :, 1] = -30.0  # key 1 all but switched off
    fused, _ = mha(x, memory=memory, mask=mask, bias=bias)
    ref, w = mha(x, memory=memory, mask=mask, bias=bias, need_weights=True)
    torch.testing.assert_close(fused, ref, atol=1e-5, rtol=1e-5)
    assert w is not None and float(w[..., 1].max().detach()) < 1e-10
    _, w0 = mha(x, memory=memory, mask=mask, need_weights=True)
    assert w0 is not None and float(w0[..., 1].min().detach()) > 1e-4


def test_precomputed_keys_values_equal_memory_and_positions_take_an_offset() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    k, v = mha.project_kv(memory)
    assert k.shape == (2, 4, 5, 4)
    torch.testing.assert_close(mha(x, kv=(k, v))[0], mha(x, memory=memory)[0])
    pe = SinusoidalPositionalEncoding(8, 10)
    z = torch.zeros(1, 6, 8)
    torch.testing.assert_close(pe(z[:, :2], offset=4), pe(z)[:, 4:6])
    with pytest.raises(ValueError, match="max_len"):
        pe(z[:, :2], offset=9)


@pytest.mark.parametrize("multiple", [1, 8])
def test_packed_forward_equals_padded_forward(multiple: int) -> None:
    """Inference on packed tokens (no work on padding) gives the padded model's vectors
    and pooling weights, for a batch of very different lengths."""
    from encoder.config import EncoderConfig
    from encoder.model import TransformerEncoder

    torch.manual_seed(0)
    model = TransformerEncoder(EncoderConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4,
                                             d_ff=64, max_tokens=40)).eval()
    lengths = [37, 1, 12, 5, 29]
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1, 50, (n,))
    with torch.inference_mode():
        want, want_w = model(ids, normalize=False)
        got, got_w = model.forward_packed(ids, ids != 0, normalize=False, multiple=multiple)
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(got_w, want_w, atol=1e-6)
    assert torch.all(got_w[1, 1:] == 0) and torch.isclose(got_w[1, 0], torch.tensor(1.0))
