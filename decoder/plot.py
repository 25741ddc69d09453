"""The decoder's cross-attention map as a picture: output tokens (rows) × memory tokens
(columns: the source's, then each neighbour's), neighbours split by lines."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def plot_attention(gen: Any, weights: list[float], path: Path) -> None:
    """Output tokens (rows) × memory tokens (columns), neighbours split by lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    att = np.array(gen.attention or [[]], dtype=np.float32).reshape(len(gen.tokens), -1)
    cols, rows = len(gen.memory_tokens or []), len(gen.tokens)
    fig, ax = plt.subplots(figsize=(min(40, 2 + 0.25 * cols), min(30, 1.5 + 0.3 * rows)))
    ax.imshow(att, aspect="auto", cmap="viridis", vmin=0.0)
    ax.set_xticks(range(cols), gen.memory_tokens or [], rotation=90, fontsize=7)
    ax.set_yticks(range(rows), gen.tokens, fontsize=7)
    segs = gen.memory_segments or []
    for c in range(1, cols):
        if segs[c] != segs[c - 1]:
            ax.axvline(c - 0.5, color="white", linewidth=1.5)
    for seg in sorted(set(segs)):
        first = segs.index(seg)
        label = "source" if seg < 0 else f"neighbour {seg + 1} (w={weights[seg]:.2f})"
        ax.text(first, -0.8, label, fontsize=7, va="bottom")
    ax.set_xlabel("memory: source and neighbour tokens")
    ax.set_ylabel("output tokens")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log.info("attention map in %s", path)
