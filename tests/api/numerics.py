"""How close two encodings of the same text must be in the API tests.

On a CPU the service encodes on whichever backend its self-timing found faster
(encoder/backend_pick.py; ``backend`` in GET /v1/models says which: :func:`served_backend`).
The int8 ONNX Runtime graph (encoder/onnx_graph.py)
quantises each token on its own: the service's answer and the encoder's own equal each
other up to float rounding, whatever the batch. Torch in float32 does too. Torch on a CPU
with AVX-512 BF16 (or AMX) runs under bf16 autocast, and there the same text padded to
another length, in another batch, rounds differently: up to about 1e-3 here, while
different texts differ by far more than :data:`BF16_ATOL`.
"""

from __future__ import annotations

from typing import Any

from encoder.device import Defaults, cpu_has_bf16
from encoder.onnx_graph import pick_backend

BF16_ATOL = 5e-3


def served_backend(client: Any, headers: dict[str, str] | None = None) -> str:
    """The backend a running service encodes on (``client``: an httpx client or a
    TestClient with its base URL set)."""
    return str(client.get("/v1/models", headers=headers or {}).json()["data"][0]["backend"])


def encoder_atol(fp32: float, backend: str | None = None) -> float:
    """``fp32`` where the served encoder (or ``backend``: token vectors always come from
    torch) rounds each text alone, else bf16's tolerance."""
    if (backend or pick_backend(None, "cpu")) == "torch" and cpu_has_bf16() \
            and Defaults.bf16:
        return max(fp32, BF16_ATOL)
    return fp32
