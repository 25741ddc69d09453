"""Rewrite checkpoint directories with their weights at another storage precision
(``encoder.checkpoint.PRECISIONS``), in place: how the shipped models went from fp32 to
fp16 with 8-bit embedding tables (issue 13)::

    .venv/bin/python models/store_precision.py --precision fp16+q8 models/encoder-default \
        models/decoder-en-fr models/decoder-en-fr-baseline    # the decoders of that time

The weights change (rounded), so the encoder's fingerprint does: ``config.json`` records
the new one (``fingerprint``) and the old one (``fingerprint_fp32``); a decoder's retrieval
record keeps the fingerprint of the encoder it was trained with and gets
``encoder_fingerprint_served``, the rounded encoder that now keys its memory. Metrics in
``config.json`` were measured before the rounding (``bench/history/`` has the effect).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import decoder
import encoder
from encoder.checkpoint import CONFIG, PRECISIONS, LoadedModel


def load_any(path: Path) -> LoadedModel:
    """The encoder or decoder at ``path`` (a decoder's architecture has decoder layers)."""
    arch = json.loads((path / CONFIG).read_text())["architecture"]
    if "n_decoder_layers" in arch:
        return decoder.load(path, device="cpu")
    return encoder.load(path, device="cpu")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precision", choices=PRECISIONS, default="fp16+q8")
    ap.add_argument("checkpoints", type=Path, nargs="+")
    args = ap.parse_args()
    fingerprints: dict[str, str] = {}  # old encoder fingerprint -> new
    models = [load_any(p) for p in args.checkpoints]
    for path, model in zip(args.checkpoints, models, strict=True):
        if not isinstance(model, encoder.TextEncoder):
            continue
        old = model.fingerprint
        model.save(path, model.meta, args.precision)
        again = encoder.load(path, device="cpu")
        fingerprints[old] = again.fingerprint
        meta = dict(again.meta)
        meta.setdefault("fingerprint_fp32", old)
        meta["fingerprint"] = again.fingerprint
        (path / CONFIG).write_text(json.dumps(meta, indent=2) + "\n")
        print(f"{path}: encoder {old} -> {again.fingerprint} ({args.precision})")  # noqa: T201
    for path, model in zip(args.checkpoints, models, strict=True):
        if isinstance(model, encoder.TextEncoder):
            continue
        meta = dict(model.meta)
        retrieval = (meta.get("training") or {}).get("retrieval") or {}
        if retrieval.get("encoder_fingerprint") in fingerprints:
            retrieval["encoder_fingerprint_served"] = fingerprints[retrieval["encoder_fingerprint"]]
        meta.pop("architecture", None)
        model.save(path, meta, args.precision)
        print(f"{path}: decoder {model.fingerprint} -> "  # noqa: T201
              f"{decoder.load(path, device='cpu').fingerprint} ({args.precision})")


if __name__ == "__main__":
    main()
