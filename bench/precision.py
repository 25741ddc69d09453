"""What storing the shipped weights in fp16 (with 8-bit embedding tables) changed, side by
side in one run: the fp32 checkpoints come out of git history (``--fp32-commit``), the
stored ones are ``models/``.

- Encoder: cosine between the fp32 and the stored model's vectors of texts (the demo
  corpora: 2,000 translation-memory captions and 1,000 documentation chunks), and the two
  fingerprints.
- Decoder: sacreBLEU on Multi30k val and test_2016_flickr, beam 4, of the k = 0 decoder
  (``decoder-en-fr-baseline`` at the fp32 commit, ``models/decoder-en-fr`` since issue 16;
  the k = 4 decoder measured with it until then is no longer shipped). Target (issue 13):
  |ΔBLEU| ≤ 0.1.

Usage: python bench/precision.py --data ../shared/data [--fp32-commit 4ac372a]
Prints a markdown section and records it with the figures (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from machine import add_results_arg, record
from workload import ROOT

from wiring import runtime  # noqa: E402

runtime.configure()

import encoder  # noqa: E402
from wiring.translation import evaluate_translation  # noqa: E402

SPLITS = ["val", "test_2016_flickr"]
MODELS = ["encoder-default", "decoder-en-fr-baseline"]  # as named at the fp32 commit
NOW = {"encoder-default": "encoder-default", "decoder-en-fr-baseline": "decoder-en-fr"}
FILES = ["model.safetensors", "config.json", "tokenizer.json"]


def extract(commit: str, out: Path) -> None:
    """The shipped checkpoints as they were at ``commit`` into ``out/NAME``."""
    for name in MODELS:
        (out / name).mkdir(parents=True)
        for f in FILES:
            blob = subprocess.run(["git", "show", f"{commit}:models/{name}/{f}"], cwd=ROOT,
                                  check=True, capture_output=True).stdout
            (out / name / f).write_bytes(blob)


def demo_texts() -> list[str]:
    texts = []
    for name, n in (("multi30k-en-fr.jsonl.gz", 2000), ("python-docs.jsonl.gz", 1000)):
        with gzip.open(ROOT / "data/demo" / name, "rt", encoding="utf-8") as f:
            rows = [json.loads(line)["text"] for line in f if line.strip()]
        texts += rows[:: max(1, len(rows) // n)][:n]
    return texts


def encoder_parity(fp32: Path, stored: Path) -> dict[str, Any]:
    a, b = encoder.load(fp32, device="cpu"), encoder.load(stored, device="cpu")
    texts = demo_texts()
    cos = (a.encode(texts) * b.encode(texts)).sum(axis=1)
    return {"texts": len(texts), "min": float(cos.min()), "p1": float(np.percentile(cos, 1)),
            "mean": float(cos.mean()), "fp32_fingerprint": a.fingerprint,
            "stored_fingerprint": b.fingerprint,
            "bytes_fp32": (fp32 / "model.safetensors").stat().st_size,
            "bytes_stored": (stored / "model.safetensors").stat().st_size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--fp32-commit", default="4ac372a")
    add_results_arg(ap)
    args = ap.parse_args()
    argv = "python bench/precision.py " + shlex.join(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="qkv-fp32-") as tmp:
        fp32 = Path(tmp)
        extract(args.fp32_commit, fp32)
        parity = encoder_parity(fp32 / "encoder-default", ROOT / "models/encoder-default")
        print(json.dumps(parity), flush=True)
        rows: list[dict[str, Any]] = []
        for name in ("decoder-en-fr-baseline",):  # the k = 0 decoder shipped since issue 16
            for label, path in (("fp32", fp32 / name), ("fp16+q8", ROOT / "models" / NOW[name])):
                base = path.parent
                for r in evaluate_translation(path, args.data, SPLITS,
                                              encoder_dir=base / "encoder-default",
                                              memory_cache=str(ROOT / "var/tm-cache")):
                    rows.append({**r, "stored": label, "decoder": name})
                print(json.dumps(rows[-2:]), flush=True)
    section = report(argv, parity, rows)
    print(section)
    fig: dict[str, Any] = {}
    for r in (r for r in rows if r["stored"] == "fp32"):
        key = f"{r['decoder']} k{r['k']} {r['split']}"
        b = next(x["bleu"] for x in rows if x["stored"] != "fp32" and x["decoder"] == r["decoder"]
                 and x["split"] == r["split"])
        fig |= {f"{key} bleu_fp32": round(r["bleu"], 2), f"{key} bleu_stored": round(b, 2),
                f"{key} delta": round(b - r["bleu"], 2)}
    fig |= {"cosine_min": round(parity["min"], 6), "cosine_p1": round(parity["p1"], 6),
            "cosine_mean": round(parity["mean"], 6), "texts": parity["texts"],
            "safetensors_mb_fp32": round(parity["bytes_fp32"] / 1e6, 1),
            "safetensors_mb_stored": round(parity["bytes_stored"] / 1e6, 1),
            "fingerprint_fp32": parity["fp32_fingerprint"],
            "fingerprint_stored": parity["stored_fingerprint"]}
    record("precision", argv, fig, section=section, results=args.results)


def report(argv: str, parity: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    def bleu(name: str, stored: str, split: str) -> float:
        return next(r["bleu"] for r in rows
                    if r["decoder"] == name and r["stored"] == stored and r["split"] == split)

    lines = [f"## Weights stored in fp16, embedding tables in 8 bits ({time.strftime('%Y-%m-%d')}"
             f", {os.cpu_count()} CPU threads)", "", f"Command: `{argv}`", "",
             f"Encoder, {parity['texts']} demo texts (captions and documentation chunks): "
             f"cosine(fp32, stored) min {parity['min']:.6f}, 1st percentile "
             f"{parity['p1']:.6f}, mean {parity['mean']:.6f}; model.safetensors "
             f"{parity['bytes_fp32'] / 1e6:.1f} → {parity['bytes_stored'] / 1e6:.1f} MB; "
             f"fingerprint {parity['fp32_fingerprint']} → {parity['stored_fingerprint']}.", "",
             "Decoders: sacreBLEU, beam 4, training k, memory keyed by the encoder of the same "
             f"storage. Signature: `{rows[0]['signature']}`.", "",
             "| decoder | k | split | fp32 BLEU | stored BLEU | Δ | target abs(Δ) ≤ 0.1 |",
             "|---|---|---|---|---|---|---|"]
    for name in ("decoder-en-fr-baseline",):
        k = next(r["k"] for r in rows if r["decoder"] == name)
        for split in SPLITS:
            a, b = bleu(name, "fp32", split), bleu(name, "fp16+q8", split)
            met = "met" if abs(b - a) <= 0.1 + 1e-9 else "**missed**"
            lines.append(f"| `{name}` | {k} | {split} | {a:.2f} | {b:.2f} | {b - a:+.2f} | "
                         f"{met} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
