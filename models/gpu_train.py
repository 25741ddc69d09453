"""The training half of ``models/gpu-run-v4.sh`` without ``qkv``'s command line: ``qkv``
imports the stores (Milvus Lite, FAISS) and the settings (pydantic) at start, which a GPU
image lacks, and their wheels (23 MB) do not fit beside the checkout and a training bundle
in one call's 64 MiB. ``encoder.train`` and ``encoder.rerank_train`` need only torch,
numpy, tokenizers, safetensors and tqdm.

    python models/gpu_train.py encoder --bundle B --out O --graded G [--budget-s S] ...
    python models/gpu_train.py reranker --examples E --out O [--budget-s S] ...
    python models/gpu_train.py fp16 SRC DST     # a checkpoint's weights at fp16, into DST

Each writes what the same ``qkv train-encoder`` / ``qkv train-reranker`` options would.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def encoder_run(a: argparse.Namespace) -> None:
    from encoder.train import TrainConfig, train

    arch = {"vocab_size": a.vocab_size, "d_model": a.d_model, "n_layers": a.n_layers,
            "n_heads": a.n_heads, "d_ff": a.d_ff, "max_tokens": a.max_tokens, "pooling": "dot",
            "name": "qkv-encoder-default"}
    train(TrainConfig(
        data_dir=a.bundle, out_dir=a.out, steps=a.steps, batch_size=a.batch_size, lr=a.lr,
        warmup_steps=a.warmup_steps, max_query_tokens=64, max_doc_tokens=192,
        mine_at=0.3, mine_every=a.mine_every, mine_pairs=a.mine_pairs,
        lexical_share=a.lexical_share, matryoshka=[32, 64, 128],
        checkpoint_every=a.checkpoint_every, seed=a.seed, device=a.device,
        budget_s=a.budget_s, arch=arch, graded=a.graded, graded_weight=a.graded_weight))


def reranker_run(a: argparse.Namespace) -> None:
    from encoder.rerank_train import RerankTrainConfig, train

    train(RerankTrainConfig(
        a.examples, a.out, a.init, steps=a.steps, queries=a.queries, negatives=a.negatives,
        lr=a.lr, max_tokens=a.max_tokens, budget_s=a.budget_s,
        checkpoint_every_s=a.checkpoint_every_s, device=a.device, seed=a.seed))


def fp16(a: argparse.Namespace) -> None:
    """SRC's checkpoint into DST with fp16 weights (``encoder.checkpoint.save_checkpoint``
    at ``fp16``), written beside DST, then swapped in whole."""
    from encoder.checkpoint import read_checkpoint, save_checkpoint
    from encoder.config import EncoderConfig
    from encoder.model import TransformerEncoder

    meta, state, tokenizer = read_checkpoint(a.src, "an encoder")
    model = TransformerEncoder(EncoderConfig.from_dict(meta["architecture"]))
    model.load_state_dict(state)
    dst = Path(a.dst)
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(tmp, model, tokenizer, meta, "fp16")
    shutil.rmtree(dst, ignore_errors=True)
    tmp.replace(dst)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    e = sub.add_parser("encoder")
    e.add_argument("--bundle", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--graded", default=None)
    e.add_argument("--graded-weight", type=float, default=0.1)
    e.add_argument("--steps", type=int, default=3600)
    e.add_argument("--batch-size", type=int, default=1024)
    e.add_argument("--lr", type=float, default=1e-3)
    e.add_argument("--warmup-steps", type=int, default=300)
    e.add_argument("--mine-every", type=int, default=700)
    e.add_argument("--mine-pairs", type=int, default=50000)
    e.add_argument("--lexical-share", type=float, default=0.30)
    e.add_argument("--checkpoint-every", type=int, default=250)
    e.add_argument("--budget-s", type=float, default=None)
    e.add_argument("--seed", type=int, default=1)
    e.add_argument("--device", default=None)
    for name, default in (("vocab-size", 16384), ("d-model", 256), ("n-layers", 4),
                          ("n-heads", 4), ("d-ff", 1024), ("max-tokens", 256)):
        e.add_argument(f"--{name}", type=int, default=default)
    e.set_defaults(run=encoder_run)
    r = sub.add_parser("reranker")
    r.add_argument("--examples", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--init", default=str(ROOT / "models/encoder-default"))
    r.add_argument("--steps", type=int, default=100_000)
    r.add_argument("--queries", type=int, default=32)
    r.add_argument("--negatives", type=int, default=7)
    r.add_argument("--lr", type=float, default=1e-4)
    r.add_argument("--max-tokens", type=int, default=192)
    r.add_argument("--budget-s", type=float, default=None)
    r.add_argument("--checkpoint-every-s", type=float, default=120.0)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--device", default=None)
    r.set_defaults(run=reranker_run)
    f = sub.add_parser("fp16")
    f.add_argument("src")
    f.add_argument("dst")
    f.set_defaults(run=fp16)
    args = ap.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
