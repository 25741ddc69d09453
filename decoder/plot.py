"""The decoder's cross-attention map as a picture: output tokens (rows) × memory tokens
(columns: the source's, then each neighbour's), neighbours split by lines; and the token
memory's votes for each output token (:func:`plot_votes`)."""

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


def vote_cells(tokens: list[dict[str, Any]]) -> list[list[str]]:
    """Per output token, its voters as cell labels: ``token`` (pair id) weight."""
    return [[f"{v['token']}\n{v['id']}  {v['weight']:.2f}" for v in t["votes"]] for t in tokens]


def plot_votes(tokens: list[dict[str, Any]], path: Path) -> list[list[str]]:
    """The token memory's votes (:func:`decoder.knn.votes`) as a picture: output tokens
    (rows) × their heaviest voters (columns, by weight), each cell the voted token, the pair
    it comes from and its weight; beside each row λ and the memory's probability of the
    token written. Returns the cells' labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cells = vote_cells(tokens)
    cols = max((len(r) for r in cells), default=0)
    w = np.full((len(tokens), max(1, cols)), np.nan, np.float32)
    for r, t in enumerate(tokens):
        for c, v in enumerate(t["votes"]):
            w[r, c] = v["weight"]
    fig, ax = plt.subplots(figsize=(3 + 1.8 * cols, 1.2 + 0.45 * len(tokens)))
    ax.imshow(w, aspect="auto", cmap="Blues", vmin=0.0, vmax=1.0)
    for r, row in enumerate(cells):
        for c, label in enumerate(row):
            same = tokens[r]["votes"][c]["token"] == tokens[r]["token"]
            ax.text(c, r, label, ha="center", va="center", fontsize=6,
                    color="black" if same else "firebrick")
    ax.set_yticks(range(len(tokens)), [f"{t['token']}  λ={t['lambda']:.2f} "
                                       f"p={t['p_memory']:.2f}" for t in tokens], fontsize=7)
    ax.set_xticks(range(max(1, cols)), [f"voter {c + 1}" for c in range(max(1, cols))],
                  fontsize=7)
    ax.set_title("token memory votes (red: a voter for another token)", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log.info("token memory votes in %s", path)
    return cells
