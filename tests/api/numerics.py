"""How close two encodings of the same text must be in the API tests.

Under float32 the service's answer and the encoder's own equal each other up to rounding.
On a CPU with AVX-512 BF16 (or AMX) the encoder runs under bf16 autocast, and the same text
padded to another length, in another batch, rounds differently: up to about 1e-3 here,
while different texts differ by far more than :data:`BF16_ATOL`.
"""

from __future__ import annotations

import os

from encoder.device import cpu_has_bf16

BF16_ATOL = 5e-3


def encoder_atol(fp32: float) -> float:
    """``fp32`` where the encoder runs in float32, else bf16's tolerance."""
    if cpu_has_bf16() and not os.environ.get("QKV_NO_BF16"):
        return max(fp32, BF16_ATOL)
    return fp32
