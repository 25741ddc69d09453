"""Encoders scored on the dev sets they are chosen on (issue 15), and on the public tests.

Usage: python bench/encoder_dev.py --data ../shared/data [--dev var/dev] [--dims 64,128]
           [--public] [--backends torch,onnx] [--idf-texts FILE] [--write] MODEL [MODEL ...]

MODEL: a checkpoint directory, or two side by side: ``concat:A,B`` or ``sum:A,B``
(:class:`Combined`), or one with an untrained lexical part beside it:
``lex:MODE:TABLE:WEIGHT:DIR`` (``bench/lexbag.py``; needs ``--idf-texts``).

Dev: STS-B dev and SICK trial (Spearman), and dense nDCG@10 against stemmed BM25 (bm25s)
on the carved ``scifact-dev`` and ``medquad-dev`` (``encoder.devsets``, written under
``--dev`` when missing) and ``multi30k-captions-val``. ``--public`` adds the public tests
(SciFact test, Cranfield, STS-B test, SICK test), reported but never chosen on. Each
``--dims`` size scores the vectors cut to that prefix and renormalised (Matryoshka).
``--backends`` scores each model on each encoder backend (``torch``: the network in fp32,
or bf16 where the CPU has it unless ``QKV_NO_BF16=1``; ``onnx``: the int8 ONNX Runtime
graph, ``encoder.onnx_graph``); by default the one ``encoder.load`` picks.
``--write`` records a row per model and size (``bench/machine.py``) with the table.
"""

from __future__ import annotations

import argparse
import csv
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lexbag import LexBag  # noqa: E402  (bench/, beside this script)


class Combined:
    """Two encoders side by side (issue 15: "a lexical model beside the semantic one whose
    vectors are concatenated or summed"), from a model argument ``concat:A,B`` or
    ``sum:A,B``. ``concat``: [a; b]/√2, 2·d coordinates, its inner product the mean of the
    two cosines; ``sum``: (a + b) renormalised, d coordinates (the two spaces must share
    their coordinates: B trained on from A). ``combine`` cuts each part to ``dim`` first."""

    def __init__(self, spec: str, backend: str | None) -> None:
        from wiring.components import load_encoder

        self.mode, paths = spec.split(":", 1)
        if self.mode not in ("concat", "sum"):
            raise SystemExit(f"combine with concat: or sum:, not {self.mode!r}")
        self.parts = [load_encoder(p, backend=backend) for p in paths.split(",")]
        self.name = f"{self.mode}({', '.join(Path(p).name for p in paths.split(','))})"
        self.backend = self.parts[0].backend

    def width(self, dim: int | None) -> int:
        """Coordinates of :meth:`combine`'s vectors."""
        cut = [min(dim or e.dim, e.dim) for e in self.parts]
        return sum(cut) if self.mode == "concat" else cut[0]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return np.concatenate([e.encode(texts, batch_size=batch_size) for e in self.parts], 1)

    def combine(self, x: np.ndarray, dim: int | None) -> np.ndarray:
        parts = np.split(x, len(self.parts), axis=1)
        if dim:
            parts = [p[:, :dim] / np.maximum(np.linalg.norm(p[:, :dim], axis=1, keepdims=True),
                                            1e-12) for p in parts]
        if self.mode == "concat":
            return np.concatenate(parts, 1) / np.sqrt(len(parts))
        s = np.sum(parts, axis=0)
        return s / np.maximum(np.linalg.norm(s, axis=1, keepdims=True), 1e-12)


class Cut:
    """An embedder whose vectors are the first ``dim`` coordinates, renormalised; the full
    vectors are computed once per text and shared between sizes."""

    def __init__(self, enc, dim: int | None, cache: dict[str, np.ndarray]) -> None:
        self.enc, self.dim, self.cache = enc, dim, cache

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        todo = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if todo:
            for t, v in zip(todo, self.enc.encode(todo, batch_size=batch_size), strict=True):
                self.cache[t] = v
        x = np.stack([self.cache[t] for t in texts]).astype(np.float32)
        if isinstance(self.enc, Combined | LexBag):
            return self.enc.combine(x, self.dim)
        if self.dim:
            x = x[:, : self.dim]
            x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return x


def sts_rows(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    """STS-B (score column 5, texts 6–7) or SICK (sentence_A, sentence_B, relatedness)."""
    a, b, gold = [], [], []
    with open(path, encoding="utf-8") as f:
        if path.name.startswith("SICK"):
            for row in csv.DictReader(f, delimiter="\t"):
                a.append(row["sentence_A"])
                b.append(row["sentence_B"])
                gold.append(float(row["relatedness_score"]))
        else:
            for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                if len(row) >= 7:
                    a.append(row[5])
                    b.append(row[6])
                    gold.append(float(row[4]))
    return a, b, np.array(gold)


def spearman(emb: Cut, path: Path) -> float:
    a, b, gold = sts_rows(path)
    cos = (emb.encode(a) * emb.encode(b)).sum(axis=1)
    return float(spearmanr(cos, gold).statistic)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--dev", type=Path, default=ROOT / "var/dev")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--public", action="store_true")
    ap.add_argument("--backends", default="")
    ap.add_argument("--idf-texts", type=Path, help="texts for lex: models' idf (JSONL)")
    ap.add_argument("--devcoll", type=Path, default=ROOT / "var/devcoll",
                    help="where bench/devcollections.py writes (or has written) them")
    ap.add_argument("--collections", default="",
                    help="comma-separated dev collections (bench/devcollections.py) scored "
                         "too, e.g. foldoc,manpages,jargon; 'collections mean ×BM25' averages "
                         "them")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("models", type=Path, nargs="+")
    from machine import add_results_arg, record  # bench/, beside this script

    add_results_arg(ap)
    args = ap.parse_args()

    from encoder.devsets import write_dev_sets
    from encoder.evaluate import bm25_run, dense_run, load_beir, score_run
    from wiring.components import load_encoder

    if not (args.dev / "medquad-dev").is_dir():
        write_dev_sets(args.data, args.dev)
    retrieval = [(args.dev / "scifact-dev", "dev"), (args.dev / "medquad-dev", "dev"),
                 (args.data / "beir/multi30k-captions-val", "test")]
    sts = [args.data / "sts/stsbenchmark/sts-dev.csv", args.data / "sts/sick2014/SICK_trial.txt"]
    if args.public:
        retrieval += [(args.data / "beir/scifact", "test"), (args.data / "beir/cranfield", "test")]
        sts += [args.data / "sts/stsbenchmark/sts-test.csv",
                args.data / "sts/sick2014/SICK_test_annotated.txt"]
    extra = [n.strip() for n in args.collections.split(",") if n.strip()]
    if extra:
        from devcollections import write_dev_collections

        retrieval += [(f, "dev") for f in
                      write_dev_collections(args.data, args.devcoll, extra).values()]
    sets = [(load_beir(f, s), f"{f.name}/{s}") for f, s in retrieval]
    bm25 = {name: score_run(bm25_run(c, q), r)["ndcg@10"] for (c, q, r), name in sets}
    dims = [None] + [int(d) for d in args.dims.split(",") if d.strip()]
    rows = []
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] or [None]
    for model, backend in ((m, b) for m in args.models for b in backends):
        enc: Any = (Combined(str(model), backend) if str(model).startswith(("concat:", "sum:"))
                    else LexBag(str(model), backend, args.idf_texts)
                    if str(model).startswith("lex:") else load_encoder(model, backend=backend))
        label = (enc.name if isinstance(enc, Combined | LexBag) else model.name) + (
            f" ({enc.backend})" if args.backends else "")
        cache: dict[str, np.ndarray] = {}
        for dim in dims:
            t0 = time.time()
            emb = Cut(enc, dim, cache)
            width = enc.width(dim) if isinstance(enc, Combined | LexBag) else dim or enc.dim
            row: dict[str, Any] = {"model": label, "dim": width}
            for (corpus, queries, qrels), name in sets:
                nd = score_run(dense_run(emb, corpus, queries), qrels)["ndcg@10"]
                row[name] = nd
                row[name + " ×BM25"] = nd / bm25[name]
            for path in sts:
                if path.is_file():
                    row[path.name] = spearman(emb, path)
            dev = [row[n + " ×BM25"] for _, n in sets[:3]]
            row["dev mean ×BM25"] = float(np.mean(dev))
            if extra:
                row["collections mean ×BM25"] = float(np.mean(
                    [row[f"{n}/dev ×BM25"] for n in extra]))
            rows.append(row)
            print(f"{label} dim {row['dim']} ({time.time() - t0:.0f}s): "
                  + ", ".join(f"{k} {v:.4f}" for k, v in row.items()
                              if isinstance(v, float)), flush=True)
    keys = [k for k in rows[0] if k not in ("model", "dim")]
    lines = ["| model | dim | " + " | ".join(keys) + " |",
             "|---|---|" + "---|" * len(keys)]
    lines += [f"| {r['model']} | {r['dim']} | " + " | ".join(f"{r[k]:.3f}" for k in keys) + " |"
              for r in rows]
    lines.append("| BM25 (bm25s) | | " + " | ".join(
        f"{bm25[k]:.3f}" if k in bm25 else "" for k in keys) + " |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        env = "".join(f"{k}={os.environ[k]} " for k in ("QKV_NO_BF16", "QKV_ONNX_ACTIVATIONS")
                      if os.environ.get(k))
        cmd = env + "python bench/encoder_dev.py --data DATA " + " ".join(
            (["--public"] if args.public else []) + [f"--dims {shlex.quote(args.dims)}"]
            + ([f"--backends {args.backends}"] if args.backends else [])
            + ([f"--idf-texts {args.idf_texts}"] if args.idf_texts else [])
            + ([f"--collections {args.collections}"] if extra else [])
            + [str(m) for m in args.models])
        section = (f"## Encoder dev scores ({time.strftime('%Y-%m-%d')})\n\n`{cmd}`: dense "
                   "nDCG@10 (and ×BM25), Spearman; dev sets carved from training sources "
                   "(encoder/devsets.py), the chosen-on figure is `dev mean ×BM25`.\n\n"
                   + table)
        head = ("model", "dim", "dev mean ×BM25", "collections mean ×BM25")
        for i, r in enumerate(rows):
            fig = {k: r[k] for k in head if k in r} | {
                k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
            record("encoder_dev", cmd, fig, section=section, results=args.results,
                   regenerate=i == len(rows) - 1)


if __name__ == "__main__":
    main()
