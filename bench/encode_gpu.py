"""Encoding on a GPU (issue 43, item 4): the torch path with bf16 autocast on CUDA, against
the same model in fp32 on the CPU for the cosine bound.

Usage: python bench/encode_gpu.py [--model models/encoder-default] [--n 4096] [--out FILE]

Texts: sentences of the committed Python-docs demo corpus (``data/demo``), so the script
needs no data directory (it runs on a lent GPU machine as the checkout travels). Prints,
and with ``--out`` writes as one JSON line: sentences/s at batch 32 and 256 (texts sorted
by length as the bulk job does, tokenisation included), p50 and p95 latency of one sentence
(batch 1, 200 calls after 20 warm-ups), and the lowest cosine of the CUDA vectors to the
fp32 CPU vectors of the same texts. Without CUDA it says so and exits 2.

Where the time goes, at batch 256: ``tokenize_s`` (the tokenizer over all the texts),
``forward_s`` (the network, :meth:`TextEncoder.encode_ids` without the bag) and ``bag_s``
(the token bag added on the host); ``--profile FILE`` writes torch.profiler's table of one
such pass. ``--sdpa torch`` leaves torch its own attention kernels (the "before" arm of
:data:`encoder.device.CUDA_INFERENCE_CUDNN_SDPA`). ``--peer DIR`` also times a
sentence-transformers model (all-MiniLM-L6-v2, the speed issue's peer; its folder carried
to the GPU machine) on the same texts and device in fp16, at the same batch sizes: a peer
measured beside ours on the same card, since TEI itself cannot run there.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from encoder.text_encoder import TextEncoder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def sentences(n: int) -> list[str]:
    out: list[str] = []
    with gzip.open(ROOT / "data/demo/python-docs.jsonl.gz", "rt", encoding="utf-8") as f:
        for row in map(json.loads, f):
            out += [s for s in re.split(r"(?<=[.!?])\s+", row["text"])
                    if 5 <= len(s.split()) <= 60]
    step = max(1, len(out) // n)
    return out[::step][:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "models/encoder-default")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--record", action="store_true",
                    help="also record the figures (bench/results/encode_gpu.jsonl)")
    ap.add_argument("--device", default="cuda", help="cpu runs the same steps (a smoke test)")
    ap.add_argument("--peer", type=Path, help="a sentence-transformers model folder")
    ap.add_argument("--sdpa", choices=("qkv", "torch"), default="qkv",
                    help="attention kernels on CUDA: qkv's (no cuDNN, encoder.device."
                         "CUDA_INFERENCE_CUDNN_SDPA) or torch's own pick (cuDNN first on Hopper)")
    ap.add_argument("--profile", type=Path, help="torch.profiler's table of one batch-256 pass")
    from machine import add_results_arg, record

    add_results_arg(ap)
    args = ap.parse_args()

    import torch

    import encoder
    import encoder.device

    if args.sdpa == "torch":
        encoder.device.CUDA_INFERENCE_CUDNN_SDPA = True
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("no CUDA device")
        sys.exit(2)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    texts = sentences(args.n)
    gpu = encoder.load(args.model, device=args.device, backend="torch")
    cpu = encoder.load(args.model, device="cpu", backend="torch")
    fig: dict[str, object] = {
        "model": str(args.model), "texts": len(texts), "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if cuda else args.device, "sdpa": args.sdpa}
    speed, vec = timed(lambda batch, bs: gpu.encode(batch, batch_size=bs), texts, sync)
    fig.update(speed)
    fig.update(breakdown(gpu, texts, sync))
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            gpu.encode(texts, batch_size=256)
            sync()
        args.profile.write_text(prof.key_averages().table(
            sort_by="self_cpu_time_total", row_limit=25))
    if args.peer:
        fig.update(peer(args.peer, texts, args.device, sync))
    from encoder.device import Defaults

    Defaults.bf16 = False  # the reference in fp32 (QKV_NO_BF16)
    ref = cpu.encode(texts[:1024], batch_size=64)
    fig["min_cosine_to_cpu_fp32"] = round(float((vec[:1024] * ref).sum(axis=1).min()), 5)
    line = json.dumps(fig)
    print(line)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    if args.record:  # where the checkout is (the GPU machine's $OUT files come back instead)
        record("encode_gpu", "python bench/encode_gpu.py " + " ".join(sys.argv[1:]), fig,
               machine={"gpu": fig["device"], "torch": fig["torch"]}, results=args.results)


def timed(encode: Callable[[list[str], int], np.ndarray], texts: list[str],
          sync: Callable[[], None]) -> tuple[dict[str, float], np.ndarray]:
    """Sentences/s over ``texts`` at batch 32 and 256 (after a warm-up of 512 at 64), and
    one sentence's p50 and p95 latency (200 calls after 20 warm-ups); with the vectors of
    the batch-256 pass."""
    encode(texts[:512], 64)  # warm-up: kernels, autocast caches
    got: dict[str, float] = {}
    for bs in (32, 256):
        sync()
        t0 = time.perf_counter()
        vec = encode(texts, bs)
        sync()
        got[f"sentences_per_s_batch{bs}"] = round(len(texts) / (time.perf_counter() - t0), 1)
    lat = []
    for i in range(220):
        t0 = time.perf_counter()
        encode([texts[i]], 1)
        sync()
        lat.append(time.perf_counter() - t0)
    lat_ms = np.array(lat[20:]) * 1000
    got["p50_ms_batch1"] = round(float(np.percentile(lat_ms, 50)), 2)
    got["p95_ms_batch1"] = round(float(np.percentile(lat_ms, 95)), 2)
    return got, vec


def breakdown(enc: TextEncoder, texts: list[str], sync: Callable[[], None]
              ) -> dict[str, float]:
    """Seconds of one batch-256 pass spent tokenising, in the network and in the bag."""
    t0 = time.perf_counter()
    ids, _ = enc.tokenize(texts)
    t1 = time.perf_counter()
    net = enc.encode_ids(ids, batch_size=256, normalize=False, bag=False)
    sync()
    t2 = time.perf_counter()
    enc.add_token_bag(ids, net)
    t3 = time.perf_counter()
    return {"tokenize_s": round(t1 - t0, 4), "forward_s": round(t2 - t1, 4),
            "bag_s": round(t3 - t2, 4)}


def peer(folder: Path, texts: list[str], device: str, sync: Callable[[], None]
         ) -> dict[str, object]:
    """The same timings for a sentence-transformers model, fp16 on CUDA (fp32 on a CPU)."""
    import torch
    from sentence_transformers import SentenceTransformer

    half = device.startswith("cuda")
    model = SentenceTransformer(str(folder), device=device, model_kwargs={
        "dtype": torch.float16 if half else torch.float32})
    speed, _ = timed(lambda batch, bs: model.encode(batch, batch_size=bs), texts, sync)
    return {"peer": folder.name, **{f"peer_{k}": v for k, v in speed.items()}}


if __name__ == "__main__":
    main()
