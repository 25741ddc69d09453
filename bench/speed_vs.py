"""Two of our encoder checkpoints timed side by side (issue 40: "encoding speed within 10 % of
today's"): the same sentences, alternating rounds in one process, the default backend.

Usage: python bench/speed_vs.py --data ../shared/data OLD NEW [--rounds 6]

OLD can be a checkpoint taken out of git, e.g. for the shipped v2::

    mkdir -p var/v2 && for f in config.json model.safetensors tokenizer.json; do
        git show 2e5bc6c:models/encoder-default/$f > var/v2/$f; done

Sentences: the 2,000 Reuters sentences of ``bench/encode_speed.py``. Prints each round's
sentences/s, the ratio NEW / OLD per round and of the best rounds, and the tokens per
sentence of each tokenizer; records them (``bench/machine.py``: bench/results/speed_vs.jsonl).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    from machine import add_results_arg, record

    add_results_arg(ap)
    args = ap.parse_args()

    from encode_speed import sentences

    import encoder

    texts = sentences(args.data, args.n)
    enc = {"old": encoder.load(args.old), "new": encoder.load(args.new)}
    tokens = {k: float(np.mean([len(i) for i in e.tokenize(texts)[0]])) for k, e in enc.items()}
    for e in enc.values():
        e.encode(texts[:256])
    rounds = []
    for r in range(args.rounds):
        rate = {}
        for k in (("old", "new") if r % 2 == 0 else ("new", "old")):
            t0 = time.perf_counter()
            enc[k].encode(texts, batch_size=64)
            rate[k] = len(texts) / (time.perf_counter() - t0)
        rounds.append(rate)
        print(f"round {r}: old {rate['old']:.0f}, new {rate['new']:.0f} sentences/s, "
              f"new/old {rate['new'] / rate['old']:.3f}", flush=True)
    best = {k: max(r[k] for r in rounds) for k in enc}
    fig = {"old": str(args.old), "new": str(args.new), "backend": enc["new"].backend,
           "sentences": len(texts), "best_old": round(best["old"]),
           "best_new": round(best["new"]), "ratio_of_bests": round(best["new"] / best["old"], 3),
           "round_ratios": [round(r["new"] / r["old"], 3) for r in rounds],
           "tokens_per_sentence": {k: round(v, 2) for k, v in tokens.items()}}
    print(fig)
    record("speed_vs", "python bench/speed_vs.py --data DATA " + f"{args.old} {args.new}", fig,
           results=args.results)


if __name__ == "__main__":
    main()
