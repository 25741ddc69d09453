import pytest
import torch

from encoder.pooling import AttentionPooling


@pytest.mark.parametrize("scoring", ["dot", "additive"])
def test_weights_sum_to_one_and_skip_padding(scoring: str) -> None:
    torch.manual_seed(0)
    pool = AttentionPooling(16, scoring)
    h = torch.randn(3, 6, 16)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]]).bool()
    pooled, w = pool(h, mask)
    assert pooled.shape == (3, 16) and w.shape == (3, 6)
    torch.testing.assert_close(w.sum(-1), torch.ones(3))
    assert torch.all(w[~mask] == 0)
    torch.testing.assert_close(pooled[2], h[2, 0])  # a single token pools to itself
    torch.testing.assert_close(pooled, (w.unsqueeze(-1) * h).sum(1))


def test_pooling_prefers_tokens_aligned_with_query() -> None:
    pool = AttentionPooling(4, "dot")
    with torch.no_grad():
        pool.key.weight.copy_(torch.eye(4))
        pool.key.bias.zero_()
        pool.query.copy_(torch.tensor([10.0, 0, 0, 0]))
    h = torch.tensor([[[1.0, 0, 0, 0], [0, 1.0, 0, 0]]])
    _, w = pool(h, torch.ones(1, 2, dtype=torch.bool))
    assert w[0, 0] > 0.9


def test_unknown_scoring_lists_valid_options() -> None:
    with pytest.raises(ValueError, match="dot, additive"):
        AttentionPooling(8, "cosine")
