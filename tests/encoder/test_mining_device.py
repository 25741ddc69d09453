import numpy as np
import torch

from encoder.device import autocast, pick_device
from encoder.mining import mine_hard_negatives, top_k


class BagOfWords:
    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        x = np.array([[t.split().count(w) for w in self.vocab] for t in texts], np.float32)
        x += 1e-3
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_hard_negatives_are_close_but_never_the_positive() -> None:
    vocab = [f"w{i}" for i in range(40)]
    docs = [f"w{i} w{i + 1} w{i + 2}" for i in range(30)]
    pairs = [(f"w{i} w{i + 1}", docs[i]) for i in range(30)]
    hard = mine_hard_negatives(BagOfWords(vocab), pairs, k=4, skip_top=1, seed=0)
    assert len(hard) == 30
    for i, neg in hard.items():
        assert neg != pairs[i][1]
        assert neg in docs
    # for queries 2..28 ranks 1-3 are the three other documents sharing a word with the
    # query, so the negative does; at the edges (0, 1, 29) a rank is one of the many equal
    # scores of documents sharing nothing, whose order is the search's tie-break
    shares = {i: bool(set(neg.split()) & set(pairs[i][0].split())) for i, neg in hard.items()}
    assert all(shares[i] for i in range(2, 29))


def test_top_k_is_exact_search_best_first() -> None:
    rng = np.random.default_rng(0)
    xb, xq = rng.normal(size=(300, 16)), rng.normal(size=(70, 16))
    I = top_k(xq, xb, 10, chunk=32)
    expected = np.argsort(-(xq @ xb.T), axis=1)[:, :10]
    np.testing.assert_array_equal(I, expected)


def test_pick_device_and_autocast(monkeypatch) -> None:
    monkeypatch.setenv("QKV_DEVICE", "cpu")
    assert pick_device() == torch.device("cpu")
    assert pick_device("cpu").type == "cpu"
    monkeypatch.setenv("QKV_NO_BF16", "1")
    with autocast(torch.device("cpu")):
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype == torch.float32  # autocast off when asked
