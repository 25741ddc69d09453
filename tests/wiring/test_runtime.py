"""The process's settings handed down once (wiring.runtime.use) and handed on to a worker
process (wiring.runtime.current): what one sets, the other reads back."""

from __future__ import annotations

import pytest

from encoder.device import Defaults as DeviceDefaults
from encoder.onnx_graph import Defaults as BackendDefaults
from wiring import runtime


def test_what_use_sets_current_hands_on() -> None:
    before = runtime.current()
    try:
        runtime.use(device="cpu", encoder_backend="torch", no_bf16=True,
                    onnx_activations="token", lite_fast_search=False,
                    graph_cache="/tmp/qkv-graphs")
        assert runtime.current() == {"device": "cpu", "encoder_backend": "torch",
                                     "no_bf16": True, "onnx_activations": "token",
                                     "lite_fast_search": False,
                                     "graph_cache": "/tmp/qkv-graphs"}
        assert DeviceDefaults.bf16 is False and BackendDefaults.activations == "token"
        with pytest.raises(ValueError, match="QKV_ONNX_ACTIVATIONS must be static or token"):
            runtime.use(onnx_activations="dynamic")
        assert runtime.current()["no_bf16"] is True  # the refused call changed nothing
    finally:
        runtime.use(**before)
    assert runtime.current() == before
