"""Translation quality and speed of the shipped decoders: sacreBLEU on Multi30k val and
test_2016_flickr (English→French), and the wall time of ``qkv translate`` on the 1,000
test sentences with beam 4, all on this machine's CPU.

Usage: python bench/translate.py --data ../shared/data --model K4_DECODER
       [--baseline models/decoder-en-fr]
       python bench/translate.py --data ../shared/data --adapt runs/decoder-en-fr-half
       [--lambdas 0.35,0.5,0.7] [--samples 1000]

K4_DECODER: a retrieval-augmented decoder (``qkv train-decoder --k 4``; the one shipped until
issue 16 is ``models/decoder-en-fr`` at commit 7c5fae0); the baseline is the k = 0 decoder
shipped now. For each model: ``wiring.translation.evaluate_translation`` (what ``qkv eval-decoder``
prints) on val and test, the memory being the 29,000 training pairs, beam 4 — the
retrieval-augmented model with its training k (4), the baseline with k=0, and the
retrieval-augmented model once more with k=0 (what its neighbours add). Then the whole
``qkv translate`` command (process start, model and encoder load, memory vectors from the
cache, retrieval, beam search) is timed on the test file. Targets (issue 5): test BLEU ≥ 50
with retrieval; retrieval ≥ baseline + 1.0 BLEU on val and on test; 1,000 sentences with
beam 4 in ≤ 60 s. Prints a markdown section and records it with the figures
(``bench/machine.py``).

``--adapt MODEL``: the adaptation benchmark (issue 16) instead. MODEL is a decoder trained
on a share of the training pairs (``qkv train-decoder --k 0 --train-fraction 0.5``); it
translates val and test with its token memory off, (a) of the pairs it was trained on,
(b) of all 29,000 (the rest it never saw), with the default options and then with the
memory's λ_max chosen on val among ``--lambdas`` for (b); BLEU differences get
paired-bootstrap 95 % intervals. Target: (b) − off ≥ +1.5 on val and on test.
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

from machine import add_results_arg, record
from workload import ROOT, paired_bootstrap

from wiring import runtime  # noqa: E402

runtime.configure()

from decoder.data import find_split, read_pairs  # noqa: E402
from decoder.knn import KnnOptions  # noqa: E402
from decoder.train import train_subset  # noqa: E402
from wiring.token_memory import build_token_memory  # noqa: E402
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
    ap.add_argument("--model", type=Path, help="A retrieval-augmented (k = 4) decoder.")
    ap.add_argument("--baseline", type=Path, default=ROOT / "models/decoder-en-fr")
    add_results_arg(ap)
    ap.add_argument("--adapt", type=Path, help="A decoder trained on a share of the pairs.")
    ap.add_argument("--memories", type=Path, default=ROOT / "var/knn")
    ap.add_argument("--lambdas", default="0.35,0.5,0.7")
    ap.add_argument("--samples", type=int, default=1000)
    args = ap.parse_args()
    argv = "python bench/translate.py " + shlex.join(sys.argv[1:])
    if args.adapt is not None:
        lambdas = [float(x) for x in args.lambdas.split(",")]
        text, figures = adaptation(argv, args.adapt, args.data, args.memories, lambdas,
                                   args.samples)
        print(text)
        record("translate", argv, figures, section=text, results=args.results)
        return
    if args.model is None:
        ap.error("give --model K4_DECODER (or --adapt MODEL)")
    rows: list[dict[str, Any]] = []
    for model, k in ((args.model, None), (args.baseline, None), (args.model, 0)):
        rows += evaluate_translation(model, args.data, SPLITS, k=k)
        print(json.dumps(rows[-2:]), flush=True)
    walls = {"retrieval-augmented, k=4": translate_wall(args.model, args.data, 4),
             "baseline, k=0": translate_wall(args.baseline, args.data, 0)}
    print(json.dumps(walls), flush=True)
    meta = {str(m): json.loads((m / "config.json").read_text())
            for m in (args.model, args.baseline)}
    section = report(argv, rows, walls, meta)
    print(section)
    # rows: the k = 4 model's val and test, the baseline's, the k = 4 model's at k = 0
    fig: dict[str, Any] = {
        "retrieval_minus_baseline_val": round(rows[0]["bleu"] - rows[2]["bleu"], 2),
        "retrieval_minus_baseline_test": round(rows[1]["bleu"] - rows[3]["bleu"], 2)}
    for r in rows:
        fig[f"{Path(r['model']).name} k{r['k']} {r['split']} bleu"] = round(r["bleu"], 2)
    fig |= {f"translate_wall_s {n}": round(sec, 1) for n, sec in walls.items()}
    record("translate", argv, fig, section=section, results=args.results)


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


def _memories(model: Path, task1: Path, root: Path) -> tuple[Path, Path, int, int]:
    """(memory of the pairs ``model`` trained on, memory of all train pairs, their sizes
    in pairs), built under ``root`` when missing."""
    training = json.loads((model / "config.json").read_text())["training"]
    pairs = read_pairs(task1, "train")
    own = train_subset(len(pairs), float(training.get("train_fraction", 1.0)),
                       int(training["seed"]))
    a, b = root / f"{model.name}-own", root / f"{model.name}-all"
    if not (a / "memory.json").is_file():
        with tempfile.TemporaryDirectory() as tmp:
            rows = Path(tmp) / "own.jsonl"
            rows.write_text("".join(json.dumps({"id": str(i), "text": pairs[i][0],
                                                "value": pairs[i][1]}) + "\n" for i in own))
            print("built (a)", build_token_memory(model, None, a, pairs_jsonl=rows,
                                                  progress=False), flush=True)
    if not (b / "memory.json").is_file():
        print("built (b)", build_token_memory(model, task1, b, progress=False), flush=True)
    return a, b, len(own), len(pairs)


def adaptation(argv: str, model: Path, data: Path, root: Path, lambdas: list[float],
               samples: int) -> tuple[str, dict[str, Any]]:
    """The adaptation benchmark (see the module docstring): a markdown section and its
    figures."""
    task1 = data / "multi30k/task1" if (data / "multi30k").is_dir() else data
    a, b, n_own, n_all = _memories(model, task1, root)
    refs = {s: [t for _, t in read_pairs(task1, s)] for s in SPLITS}
    tmp = Path(tempfile.mkdtemp())

    def run(name: str, memory: Path | None, knn: KnnOptions | None,
            splits: list[str]) -> dict[str, tuple[float, list[str], float]]:
        rows = evaluate_translation(model, task1, splits, hypotheses=tmp / name,
                                    knn_memory=memory, knn=knn)
        out = {r["split"]: (r["bleu"], (tmp / name / f"{r['split']}.fr").read_text(
            encoding="utf-8").splitlines(), (r.get("knn") or {}).get("mean_lambda", 0.0))
            for r in rows}
        print(name, {s: (v[0], v[2]) for s, v in out.items()}, flush=True)
        return out

    off = run("off", None, None, SPLITS)
    grid = {lam: run(f"b-val-{lam}", b, KnnOptions(lam=lam), ["val"])["val"][0]
            for lam in lambdas}
    best = max(grid, key=lambda lam: grid[lam])
    lines = [f"## Decoder: adaptation with the token memory ({time.strftime('%Y-%m-%d')}, "
             f"{os.cpu_count()} CPU threads)", "", f"Command: `{argv}`", "",
             f"Decoder `{model}` trained on {n_own:,} of the {n_all:,} training pairs "
             f"({json.loads((model / 'config.json').read_text())['training']['steps']} steps); "
             "token memory (a) of those pairs, (b) of all of them. Beam 4; Δ against the "
             f"memory off with a paired-bootstrap 95 % interval ({samples} resamplings).", "",
             "λ_max on val with memory (b): " + ", ".join(
                 f"{lam} → {bleu:.2f}" for lam, bleu in grid.items())
             + f" (off {off['val'][0]:.2f}); chosen {best}.", "",
             "| options | memory | split | BLEU off | BLEU on | Δ [95 % CI] | mean λ |",
             "|---|---|---|---|---|---|---|"]
    gains: dict[tuple[str, str], float] = {}
    fig: dict[str, Any] = {"lambda_max_chosen": best,
                           **{f"val_bleu_b_lambda_{lam}": round(v, 2) for lam, v in grid.items()},
                           **{f"off {s} bleu": round(off[s][0], 2) for s in SPLITS}}
    for label, lam in (("defaults", KnnOptions().lam), (f"λ_max {best} (val)", best)):
        if label != "defaults" and best == KnnOptions().lam:
            continue
        for tag, memory in (("(a) own pairs", a), ("(b) all pairs", b)):
            on = run(f"{tag[1]}-{lam}", memory, KnnOptions(lam=lam), SPLITS)
            for split in SPLITS:
                d, lo, hi = paired_bootstrap(refs[split], off[split][1], on[split][1], samples)
                gains[(f"{label} {tag}", split)] = d
                key = f"{label} {tag[:3]} {split}"
                fig |= {f"{key} bleu": round(on[split][0], 2), f"{key} delta": round(d, 2),
                        f"{key} ci95_low": round(lo, 2), f"{key} ci95_high": round(hi, 2),
                        f"{key} mean_lambda": round(on[split][2], 3)}
                lines.append(f"| {label} | {tag} | {split} | {off[split][0]:.2f} | "
                             f"{on[split][0]:.2f} | {d:+.2f} [{lo:+.2f}, {hi:+.2f}] | "
                             f"{on[split][2]:.3f} |")
    b_gains = [v for (name, _), v in gains.items() if name.startswith("defaults (b)")]
    lines += ["", f"- Target (b) − off ≥ +1.5 on val and test, default options: "
              f"{'met' if min(b_gains) >= 1.5 else '**not met**'} "
              f"({', '.join(f'{g:+.2f}' for g in b_gains)})."]
    return "\n".join(lines), fig


if __name__ == "__main__":
    main()
