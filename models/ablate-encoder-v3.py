"""Encoder v3's source ablations and temperature check (issue 40), as run on one lent GPU.

Usage (on the GPU machine, from the checkout, the bundle carried beside it):
    OUT=out python3 models/ablate-encoder-v3.py BUNDLE WORK BUDGET_S DEADLINE_S [RUNS]
    (FIXED_STEPS=N trains N steps instead of a time budget; give BUDGET_S 0 then)

BUNDLE: ``qkv build-pairs --technical --hold-out ...`` (models/train-encoder-v3.sh, step 2).
Each run of RUNS (comma-separated, default the four ablations) trains side by side on the
one GPU with models/train-encoder-default.sh's recipe (batch 1,024, lr 1e-3, warm-up 300,
mining from 30 % every 700 steps, 50,000 pairs, Matryoshka 32/64/128, lexical share 0.30,
seed 1), cut to BUDGET_S seconds (``--budget-s``), without the sources its ablation names,
or at another temperature; ``b4096`` and ``b8192`` take batches of 4,096 and 8,192 pairs,
encoded 1,024 texts a forward with gradient caching (``encoder.grad_cache``): in the
same time, fewer steps with more in-batch negatives each (warm-up and mining scaled to
the same pairs seen, the learning rate kept). The same runs through the
CLI: ``qkv train-encoder ... --drop-sources A,B --temperature T --budget-s B
--batch-size N --grad-cache C``. It calls ``encoder.train`` directly:
the GPU image's typer may need pydantic, which the image lacks.

The bundle is tokenised once first, into WORK/token-cache (``TokenTable.cached``): four
runs tokenising it side by side each spent 37-58 s of their budgets on it. A run's network
(fp16 + 8-bit tables, 10.9 MB) is copied to OUT/NAME.safetensors as soon
as it ends; runs still going at DEADLINE_S are killed and reported. OUT/meta.tar.gz holds
the logs, each run's config.json and nvidia-smi's samples. Score them on a CPU with
``bench/encoder_dev.py`` (a run's folder: that file as model.safetensors, its config.json,
the bundle's tokenizer.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(map(str, parts)) + "\n")
    sys.stdout.flush()


PARA = "parasci-acl,twitter-paraphrase,wikisplit,bible-kjv-web"
TECH = "scitldr,wikiqa,tldr-pages,manpages,foldoc"
UNLAB = "technical-spans,lex-technical"
# name: (sources dropped, InfoNCE temperature[, batch, texts a forward (gradient caching)])
RUNS: dict[str, tuple] = {
    "base": ("", 0.05), "no-para": (PARA, 0.05), "no-techlab": (TECH, 0.05),
    "no-unlab": (UNLAB, 0.05), "t02": ("", 0.02), "t10": ("", 0.1),
    # larger batches in the same time (issue 40, item 3): fewer steps, more negatives each;
    # at 300 s on one H200 both lost to base on every dev mean (collections 0.838 and 0.800
    # against 0.872: bench/history/RESULTS-narrative.md, 2026-11-28)
    "b4096": ("", 0.05, 4096, 1024), "b8192": ("", 0.05, 8192, 1024)}
CODE = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
from encoder.train import TrainConfig, train
bundle, out, budget, drop, temperature, steps, batch, chunk = sys.argv[1:9]
per = 1024 / int(batch)  # warm-up and mining every so many pairs, not steps
train(TrainConfig(data_dir=bundle, out_dir=out, steps=int(steps), batch_size=int(batch),
    grad_cache=int(chunk) or None, lr=1e-3,
    warmup_steps=max(20, round(300 * per)), temperature=float(temperature), max_query_tokens=64,
    max_doc_tokens=192, mine_at=0.3, mine_every=max(50, round(700 * per)), mine_pairs=50000,
    lexical_share=0.30,
    drop_sources=[n for n in drop.split(",") if n], matryoshka=[32, 64, 128],
    checkpoint_every=500, seed=1, budget_s=float(budget) or None,
    arch={"vocab_size": 16384, "d_model": 256, "n_layers": 4, "n_heads": 4, "d_ff": 1024,
          "max_tokens": 256, "pooling": "dot", "name": "qkv-encoder-default"}))
"""
# the bundle tokenised once, before the runs start (each reads it: TokenTable.cached);
# max_tokens as train() takes it, max(64, 192)
WARM = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
from encoder.dataset import tokenise_bundle
tokenise_bundle(sys.argv[1], sys.argv[2], 192)
"""
KEPT = ("steps", "steps_per_second", "mining_share", "loader_wait_share",
        "gpu_busy_percent_mean", "final_loss_ema", "final_acc_ema", "drop_sources",
        "temperature", "batch_size", "grad_cache")


def main(argv: list[str]) -> int:
    bundle, work = argv[0], Path(argv[1])
    budget_s, deadline_s = float(argv[2]), float(argv[3])
    names = argv[4].split(",") if len(argv) > 4 else ["base", "no-para", "no-techlab",
                                                      "no-unlab"]
    steps = os.environ.get("FIXED_STEPS", "3600")
    out = Path(os.environ.get("OUT", "out"))
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,utilization.gpu,memory.used",
         "--format=csv,noheader", "-lms", "1000"], stdout=open(work / "gpu_util.csv", "w"),
        stderr=subprocess.DEVNULL) if subprocess.run(
        ["sh", "-c", "command -v nvidia-smi"], capture_output=True).returncode == 0 else None
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "true"}
    subprocess.run([sys.executable, "-c", WARM, bundle, str(work)], env=env, check=True)
    say(f"bundle tokenised at {time.time() - t0:.0f}s")
    procs = {}
    for name in names:
        drop, temperature, batch, chunk = (*RUNS[name], 1024, 0)[:4]
        procs[name] = subprocess.Popen(
            [sys.executable, "-c", CODE, bundle, str(work / name), str(budget_s), drop,
             str(temperature), steps, str(batch), str(chunk)], env=env,
            stdout=open(work / f"{name}.log", "w"),
            stderr=subprocess.STDOUT)

    def collect(name: str, p: subprocess.Popen[bytes]) -> None:
        ck = work / name
        if (ck / "model.safetensors").is_file() and (ck / "config.json").is_file():
            (out / f"{name}.safetensors").write_bytes((ck / "model.safetensors").read_bytes())
            t = json.loads((ck / "config.json").read_text())["training"]
            got = {k: v for k, v in t.items() if k in KEPT}
        else:
            got = {"rc": p.returncode, "log_tail": (work / f"{name}.log").read_text()[-800:]}
        say(name, json.dumps(got), f"at {time.time() - t0:.0f}s")

    pending = dict(procs)
    while pending and time.time() - t0 < deadline_s:
        for name, p in list(pending.items()):
            if p.poll() is not None:
                collect(name, pending.pop(name))
        time.sleep(2)
    for name, p in pending.items():
        p.kill()
        p.wait()
        say(f"{name}: killed at the deadline")
        collect(name, p)
    if smi is not None:
        smi.kill()
    with tarfile.open(out / "meta.tar.gz", "w:gz") as tar:
        for f in [*sorted(work.glob("*.log")), *sorted(work.glob("*/config.json")),
                  work / "gpu_util.csv"]:
            if f.is_file():
                tar.add(f, arcname=str(f.relative_to(work)))
    say(f"wall {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
