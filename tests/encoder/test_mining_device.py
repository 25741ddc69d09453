import torch

from encoder.device import Defaults, autocast, pick_device


def test_pick_device_and_autocast(monkeypatch) -> None:
    monkeypatch.setattr(Defaults, "device", "cpu")  # QKV_DEVICE, as the edge hands it down
    assert pick_device() == torch.device("cpu")
    assert pick_device("cpu").type == "cpu"
    monkeypatch.setattr(Defaults, "bf16", False)  # QKV_NO_BF16
    with autocast(torch.device("cpu")):
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype == torch.float32  # autocast off when asked


def test_inference_attention_leaves_out_cudnn_on_cuda_only(monkeypatch) -> None:
    import encoder.device as device

    cuda = torch.device("cuda")  # flags only: no GPU needed
    assert torch.backends.cuda.cudnn_sdp_enabled()
    with device.inference_attention(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled()  # the CPU: nothing changed
    with device.inference_attention(cuda):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()  # restored on the way out
    monkeypatch.setattr(device, "CUDA_INFERENCE_CUDNN_SDPA", True)  # torch's own choice
    with device.inference_attention(cuda):
        assert torch.backends.cuda.cudnn_sdp_enabled()


def test_inference_attention_overlapping_across_threads_restores_once() -> None:
    """Two batches on two threads, the first leaving while the second still runs: the
    second keeps cuDNN off, and the flag is back on only after both have left."""
    import threading

    from encoder.device import inference_attention

    cuda = torch.device("cuda")
    entered, first_left, seen = threading.Event(), threading.Event(), []

    def second() -> None:
        with inference_attention(cuda):
            entered.set()
            first_left.wait(5)
            seen.append(torch.backends.cuda.cudnn_sdp_enabled())

    first = inference_attention(cuda)
    first.__enter__()
    t = threading.Thread(target=second)
    t.start()
    assert entered.wait(5)
    first.__exit__(None, None, None)
    first_left.set()
    t.join(5)
    assert seen == [False]  # still off inside the second batch after the first left
    assert torch.backends.cuda.cudnn_sdp_enabled()
