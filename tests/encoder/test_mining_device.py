import torch

from encoder.device import autocast, pick_device


def test_pick_device_and_autocast(monkeypatch) -> None:
    monkeypatch.setenv("QKV_DEVICE", "cpu")
    assert pick_device() == torch.device("cpu")
    assert pick_device("cpu").type == "cpu"
    monkeypatch.setenv("QKV_NO_BF16", "1")
    with autocast(torch.device("cpu")):
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype == torch.float32  # autocast off when asked
