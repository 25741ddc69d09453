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


def test_inference_attention_leaves_out_cudnn_on_cuda_only(monkeypatch) -> None:
    import encoder.device as device

    assert torch.backends.cuda.cudnn_sdp_enabled()
    with device.inference_attention(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled()  # the CPU: nothing changed
    with device.inference_attention(torch.device("cuda")):  # flags only: no GPU needed
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()  # restored on the way out
    monkeypatch.setattr(device, "CUDA_INFERENCE_SDPA", None)  # torch's own choice
    with device.inference_attention(torch.device("cuda")):
        assert torch.backends.cuda.cudnn_sdp_enabled()
