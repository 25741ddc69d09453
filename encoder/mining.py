"""Hard negatives mined from the current model (ANCE-style), repeatedly during training on
the device (:func:`mine_rows`), and kept beside the training state so that a resumed run goes
on with them (:func:`save_mined`)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import torch


class Embedder(Protocol):
    """Anything that turns texts into (n, d) unit rows: a TextEncoder, or a test double."""

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray: ...


def mine_rows(
    q: torch.Tensor, d: torch.Tensor, d_rows: np.ndarray, pos: np.ndarray, rng: np.random.Generator,
    k: int = 20, margin: float = 0.95, chunk: int = 4096,
) -> np.ndarray:
    """In-training mining on the device (repeated through the run, not once): for each
    query ``q[i]`` (unit rows, (n, dim)), one of its ``k`` nearest documents of ``d``
    ((m, dim), whose text rows are ``d_rows``) that is neither its positive (text row
    ``pos[i]``) nor scores ≥ ``margin`` × the positive's score: the positive-aware
    false-negative filter of NV-Retriever (Moreira et al. 2024). Returns (n,) text rows,
    -1 where no candidate passed."""
    out = np.full(len(q), -1, dtype=np.int32)
    where = {int(r): j for j, r in enumerate(d_rows)}
    pos_j = torch.tensor([where.get(int(p), -1) for p in pos], device=q.device)
    k = min(k, len(d_rows))
    for start in range(0, len(q), chunk):
        qc = q[start:start + chunk]
        scores = (qc @ d.T).float()  # (c, m)
        pj = pos_j[start:start + chunk]
        pos_score = scores.gather(1, pj.clamp(min=0).unsqueeze(1)).squeeze(1)  # (c,)
        top_s, top_j = scores.topk(k, dim=1)  # (c, k)
        ok = (top_j != pj.unsqueeze(1)) & (top_s < margin * pos_score.unsqueeze(1))
        ok &= (pj >= 0).unsqueeze(1)
        ok_np, top_np = ok.cpu().numpy(), top_j.cpu().numpy()
        for i in range(len(qc)):
            cands = top_np[i][ok_np[i]]
            if len(cands):
                out[start + i] = d_rows[int(rng.choice(cands))]
    return out


def save_mined(out: Path, step: int, mined: dict[int, np.ndarray], last: int | None) -> None:
    """The mined negatives beside the training state of ``step`` (``last/mined-STEP.npz``),
    so that a resumed run goes on with them, exactly as an uninterrupted one."""
    folder = out / "last"
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {str(k): v for k, v in mined.items()}
    arrays["last"] = np.array(-1 if last is None else last)
    np.savez(folder / f"mined-{step}.npz", **arrays)  # type: ignore[arg-type]
    for old in folder.glob("mined-*.npz"):
        if old.name != f"mined-{step}.npz":
            old.unlink()


def load_mined(out: Path, step: int) -> tuple[dict[int, np.ndarray], int | None]:
    """The negatives :func:`save_mined` kept for ``step`` ({} and None: none), and the step
    they were mined at."""
    path = out / "last" / f"mined-{step}.npz"
    if step == 0 or not path.is_file():
        return {}, None
    with np.load(path) as z:
        last = int(z["last"])
        return {int(k): z[k] for k in z.files if k != "last"}, (None if last < 0 else last)
