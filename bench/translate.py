"""Translation quality and speed of the shipped decoders: sacreBLEU on Multi30k val and
test_2016_flickr (English→French), and the wall time of ``qkv translate`` on the 1,000
test sentences with beam 4, all on this machine's CPU.

Usage: python bench/translate.py --data ../shared/data [--model models/decoder-en-fr]
       [--baseline models/decoder-en-fr-baseline]

For each model: ``wiring.translation.evaluate_translation`` (what ``qkv eval-decoder``
prints) on val and test, the memory being the 29,000 training pairs, beam 4 — the
retrieval-augmented model with its training k (4), the baseline with k=0, and the
retrieval-augmented model once more with k=0 (what its neighbours add). Then the whole
``qkv translate`` command (process start, model and encoder load, memory vectors from the
cache, retrieval, beam search) is timed on the test file. Targets (issue 5): test BLEU ≥ 50
with retrieval; retrieval ≥ baseline + 1.0 BLEU on val and on test; 1,000 sentences with
beam 4 in ≤ 60 s. Prints a markdown section and appends it to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from workload import ROOT, append_results

from wiring import runtime  # noqa: E402

runtime.configure()

from decoder.data import find_split  # noqa: E402
from wiring.translation import evaluate_translation  # noqa: E402

SPLITS = ["val", "test_2016_flickr"]


def translate_wall(model: Path, data: Path, k: int, knn_memory: Path | None = None) -> float:
    """Seconds of one ``qkv translate`` run over the test sources (with the token memory
    ``knn_memory`` when given)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(ROOT / ".venv/bin/qkv"), "translate", "--model", str(model),
               "--input", str(find_split(data, "test_2016_flickr", "en")),
               "--output", f"{tmp}/out.fr", "--k", str(k), "--beam", "4", "--no-progress"]
        if k > 0:
            cmd += ["--memory-src", str(find_split(data, "train", "en")),
                    "--memory-tgt", str(find_split(data, "train", "fr"))]
        if knn_memory is not None:
            cmd += ["--knn-memory", str(knn_memory)]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
        wall = time.perf_counter() - t0
        lines = Path(f"{tmp}/out.fr").read_text(encoding="utf-8").count("\n")
        assert lines == 1000, f"qkv translate wrote {lines} lines"
        return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=ROOT / "models/decoder-en-fr")
    ap.add_argument("--baseline", type=Path, default=ROOT / "models/decoder-en-fr-baseline")
    ap.add_argument("--results", type=Path, default=ROOT / "bench/RESULTS.md")
    args = ap.parse_args()
    argv = "python bench/translate.py " + shlex.join(sys.argv[1:])
    rows: list[dict[str, Any]] = []
    for model, k in ((args.model, None), (args.baseline, None), (args.model, 0)):
        rows += evaluate_translation(model, args.data, SPLITS, k=k)
        print(json.dumps(rows[-2:]), flush=True)
    walls = {"retrieval-augmented, k=4": translate_wall(args.model, args.data, 4),
             "baseline, k=0": translate_wall(args.baseline, args.data, 0)}
    print(json.dumps(walls), flush=True)
    meta = {str(m): json.loads((m / "config.json").read_text())
            for m in (args.model, args.baseline)}
    append_results(report(argv, rows, walls, meta), args.results)


def report(argv: str, rows: list[dict[str, Any]], walls: dict[str, float],
           meta: dict[str, dict[str, Any]]) -> str:
    def bleu(model: str, split: str, k: int) -> float:
        return next(r["bleu"] for r in rows
                    if Path(r["model"]).name == model and r["split"] == split and r["k"] == k)

    ra, base = Path(rows[0]["model"]).name, Path(rows[2]["model"]).name
    lines = [f"## Decoder: English→French on Multi30k ({time.strftime('%Y-%m-%d')}, "
             f"{os.cpu_count()} CPU threads)", "", f"Command: `{argv}`", "",
             "sacreBLEU, one reference, beam 4, length penalty 1.0; the translation memory "
             "is the 29,000 training pairs, retrieved with `models/encoder-default` through "
             f"FAISS (T = 0.05). Signature: `{rows[0]['signature']}`.", "",
             "| model | k | val BLEU | test_2016_flickr BLEU | test: retrieval s | "
             "test: decoding s |", "|---|---|---|---|---|---|"]
    for r_val, r_test in zip(rows[0::2], rows[1::2], strict=True):
        lines.append(f"| `{Path(r_val['model']).name}` | {r_val['k']} | {r_val['bleu']:.2f} | "
                     f"{r_test['bleu']:.2f} | {r_test['retrieve_s']:.1f} | "
                     f"{r_test['decode_s']:.1f} |")
    lines += ["", "Training (both: same steps, batch and schedule; only k differs):", "",
              "| model | k | steps × pairs | wall minutes | hardware |", "|---|---|---|---|---|"]
    for path, m in meta.items():
        t = m["training"]
        lines.append(f"| `{Path(path).name}` | {t['k']} | {t['steps']} × {t['batch_size']} | "
                     f"{t['train_minutes_this_session']} | {t.get('hardware', '?')} |")
    gain_val = bleu(ra, "val", 4) - bleu(base, "val", 0)
    gain_test = bleu(ra, "test_2016_flickr", 4) - bleu(base, "test_2016_flickr", 0)
    wall = walls["retrieval-augmented, k=4"]
    lines += ["", "`qkv translate` on the 1,000 test sentences, beam 4, whole command "
              "(memory vectors cached): " + ", ".join(f"{n} {s:.1f} s" for n, s in walls.items())
              + ".", "",
              f"- Test BLEU with retrieval {bleu(ra, 'test_2016_flickr', 4):.2f} (target ≥ 50: "
              f"{'met' if bleu(ra, 'test_2016_flickr', 4) >= 50 else '**not met**'}).",
              f"- Retrieval − baseline: val {gain_val:+.2f}, test {gain_test:+.2f} (target ≥ "
              f"+1.0 on both: {'met' if min(gain_val, gain_test) >= 1 else '**not met**'}).",
              f"- 1,000 sentences, beam 4: {wall:.1f} s (target ≤ 60 s: "
              f"{'met' if wall <= 60 else '**not met**'})."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
