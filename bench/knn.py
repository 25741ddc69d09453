"""Token memory (kNN-MT) against the same decoder without it, side by side in one run.

Usage: python bench/knn.py --data ../shared/data [--models decoder-en-fr,...]
       [--memories var/knn] [--samples 1000]

For each shipped decoder: its token memory of the 29,000 training pairs (``qkv
build-token-memory``; built into ``--memories/NAME`` when missing, with its size), then
``evaluate_translation`` on val and test_2016_flickr, beam 4, with the memory off and on
(the defaults of :class:`decoder.knn.KnnOptions`, chosen on val), each decoding timed in
this process one after the other. The BLEU difference gets a paired-bootstrap 95 %
interval (``--samples`` resamplings of the sentences, both systems scored on the same
resample from sacreBLEU's sufficient statistics). Prints a markdown section and records it
with the figures, a row per decoder and split (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

from machine import add_results_arg, record
from workload import ROOT, paired_bootstrap

from wiring import runtime  # noqa: E402

runtime.configure()

from translate import translate_wall  # noqa: E402

from decoder.data import read_pairs  # noqa: E402
from decoder.knn import KnnOptions  # noqa: E402
from wiring.token_memory import build_token_memory  # noqa: E402
from wiring.translation import evaluate_translation  # noqa: E402

SPLITS = ["val", "test_2016_flickr"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--models", default="decoder-en-fr")
    ap.add_argument("--memories", type=Path, default=ROOT / "var/knn")
    ap.add_argument("--samples", type=int, default=1000)
    add_results_arg(ap)
    args = ap.parse_args()
    task1 = args.data / "multi30k/task1" if (args.data / "multi30k").is_dir() else args.data
    knn = KnnOptions()
    rows, built, walls = [], [], []
    for name in args.models.split(","):
        model = ROOT / "models" / name
        memory = args.memories / name
        if not (memory / "memory.json").is_file():
            info = build_token_memory(model, task1, memory, progress=False)
            built.append((name, info))
            print("built", name, info, flush=True)
        meta = json.loads((memory / "memory.json").read_text())
        k = int((json.loads((model / "config.json").read_text()).get("training") or {})
                .get("k", 0))  # qkv translate retrieves as the decoder was trained
        walls.append((name, translate_wall(model, task1, k), translate_wall(model, task1, k,
                                                                           memory)))
        print("qkv translate", walls[-1], flush=True)
        size = sum(f.stat().st_size for f in memory.iterdir())
        with tempfile.TemporaryDirectory() as tmp:
            off = evaluate_translation(model, task1, SPLITS, hypotheses=Path(tmp) / "off")
            on = evaluate_translation(model, task1, SPLITS, hypotheses=Path(tmp) / "on",
                                      knn_memory=memory, knn=knn)
            for r_off, r_on in zip(off, on, strict=True):
                split = r_off["split"]
                refs = [t for _, t in read_pairs(task1, split, "en", "fr")]
                h_off = (Path(tmp) / "off" / f"{split}.fr").read_text().splitlines()
                h_on = (Path(tmp) / "on" / f"{split}.fr").read_text().splitlines()
                d, lo, hi = paired_bootstrap(refs, h_off, h_on, args.samples)
                rows.append((name, split, r_off, r_on, d, lo, hi, meta, size))
                print(name, split, r_off["bleu"], r_on["bleu"], f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]",
                      r_off["decode_s"], r_on["decode_s"], flush=True)
    argv = shlex.join(["python", "bench/knn.py", *sys.argv[1:]])
    lines = [f"\n## Token memory (kNN-MT) on or off ({time.strftime('%Y-%m-%d')}, 2 CPU threads)",
             "", f"`{argv}`", "",
             f"Options (chosen on val): k {knn.k}, T {knn.temperature}, λ {knn.lam}, "
             f"adaptive {knn.adaptive} (reach {knn.reach}), nprobe {knn.nprobe}. The memory is "
             "the 29,000 training pairs; beam 4; Δ with a paired-bootstrap 95 % interval "
             f"({args.samples} resamplings).", "",
             "| decoder | split | BLEU off | BLEU on | Δ [95 % CI] | mean λ | decode s off | "
             "decode s on | on / off | memory keys | bytes / pair |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, split, r_off, r_on, d, lo, hi, meta, size in rows:
        pairs = meta.get("pairs") or 29000
        lines.append(
            f"| {name} | {split} | {r_off['bleu']:.2f} | {r_on['bleu']:.2f} | "
            f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}] | {r_on['knn']['mean_lambda']:.3f} | "
            f"{r_off['decode_s']:.1f} | {r_on['decode_s']:.1f} | "
            f"{r_on['decode_s'] / r_off['decode_s']:.2f}× | {meta['keys']:,} | "
            f"{size / pairs:,.0f} |")
    lines += ["", "`qkv translate` of the 1,000 test_2016_flickr sentences, beam 4, whole command "
              "(start, loading, retrieval, decoding), run one after the other:", "",
              "| decoder | off (s) | with the token memory (s) | on / off |", "|---|---|---|---|"]
    for name, off_s, on_s in walls:
        lines.append(f"| {name} | {off_s:.1f} | {on_s:.1f} | {on_s / off_s:.2f}× |")
    for name, info in built:
        lines.append(f"\nBuilt {name}'s memory here: {info}.")
    section = "\n".join(lines)
    print(section)
    wall = {name: (off_s, on_s) for name, off_s, on_s in walls}
    for i, (name, split, r_off, r_on, d, lo, hi, meta, size) in enumerate(rows):
        record("knn", argv, {
            "decoder": name, "split": split, "bleu_off": round(r_off["bleu"], 2),
            "bleu_on": round(r_on["bleu"], 2), "delta_bleu": round(d, 2),
            "delta_ci95_low": round(lo, 2), "delta_ci95_high": round(hi, 2),
            "mean_lambda": round(r_on["knn"]["mean_lambda"], 3),
            "decode_s_off": round(r_off["decode_s"], 1), "decode_s_on": round(r_on["decode_s"], 1),
            "translate_wall_s_off": round(wall[name][0], 1),
            "translate_wall_s_on": round(wall[name][1], 1), "memory_keys": meta["keys"],
            "bytes_per_pair": round(size / (meta.get("pairs") or 29000))},
            section=section, results=args.results, regenerate=i == len(rows) - 1)


if __name__ == "__main__":
    main()
