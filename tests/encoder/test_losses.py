import pytest
import torch
import torch.nn.functional as F

from encoder.losses import InfoNCE


def test_aligned_pairs_have_low_loss_and_full_accuracy() -> None:
    torch.manual_seed(0)
    q = F.normalize(torch.randn(16, 32), dim=-1)
    loss, acc = InfoNCE(0.05)(q, q)
    shuffled, acc_bad = InfoNCE(0.05)(q, q.roll(1, dims=0))
    assert acc == 1.0 and loss < 0.1
    assert shuffled > 5 * loss and acc_bad < 0.5


def test_matches_cross_entropy_definition() -> None:
    torch.manual_seed(1)
    q, d = F.normalize(torch.randn(8, 16), dim=-1), F.normalize(torch.randn(8, 16), dim=-1)
    loss, _ = InfoNCE(0.1, symmetric=False)(q, d)
    expected = F.cross_entropy(q @ d.T / 0.1, torch.arange(8))
    torch.testing.assert_close(loss, expected)
    sym, _ = InfoNCE(0.1)(q, d)
    expected_sym = (expected + F.cross_entropy(d @ q.T / 0.1, torch.arange(8))) / 2
    torch.testing.assert_close(sym, expected_sym)


def test_hard_negatives_add_to_the_denominator() -> None:
    torch.manual_seed(2)
    q = F.normalize(torch.randn(8, 16), dim=-1)
    d = F.normalize(q + 0.3 * torch.randn(8, 16), dim=-1)
    plain, _ = InfoNCE()(q, d)
    with_hard, _ = InfoNCE()(q, d, hard=q.clone())  # negatives as close as it gets
    assert with_hard > plain


def test_temperature_must_be_positive() -> None:
    with pytest.raises(ValueError, match="temperature"):
        InfoNCE(0.0)
