"""The encoder evaluated as ``qkv eval-encoder`` and ``qkv train-encoder --eval-*`` report it:
dense retrieval with a BM25 baseline on BEIR folders (``encoder.evaluate``), optionally the
store's own search modes on the same folders (``index.evaluate``), STS Spearman."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def evaluate_encoder(model: Path, beir: Sequence[Path], split: str, sts: Path | None,
                     bm25: bool = True, modes: Sequence[str] = (), fusion: str = "rrf",
                     dense_weight: float = 0.5) -> dict[str, Any]:
    """The report: ``model``, ``fingerprint``, then ``beir:NAME:SPLIT`` (with ``milvus`` per
    mode when ``modes`` are given) and ``sts:FILE`` entries."""
    from encoder.evaluate import evaluate_beir, evaluate_sts
    from wiring.components import encoder_info, load_encoder

    enc = load_encoder(model)
    results: dict[str, Any] = {"model": str(model), "fingerprint": enc.fingerprint}
    for folder in beir:
        key = f"beir:{folder.name}:{split}"
        results[key] = evaluate_beir(enc, folder, split, bm25=bm25)
        if modes:
            from index.evaluate import evaluate_modes

            results[key]["milvus"] = evaluate_modes(
                lambda texts: enc.encode(texts, batch_size=64), encoder_info(enc), folder, split,
                modes, fusion, dense_weight)
    if sts is not None:
        results[f"sts:{sts.name}"] = evaluate_sts(enc, sts)
    return results


def record_metrics(model: Path, results: dict[str, Any]) -> None:
    """Write the report's metrics and fingerprint into the checkpoint's ``config.json``
    (weights untouched)."""
    meta = json.loads((model / "config.json").read_text())
    meta["fingerprint"] = results["fingerprint"]
    meta.setdefault("metrics", {}).update(
        {k: v for k, v in results.items() if k not in ("model", "fingerprint")})
    (model / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
