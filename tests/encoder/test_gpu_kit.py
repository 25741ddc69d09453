"""Issue 74's run kit (models/gpu-run-v4.sh), rehearsed on the CPU at a tiny scale as its
header says: prepare then run, end to end, leaving in OUT what a lease returns: v4 at fp16
as its run finished, and the reranker, loadable and scoring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from safetensors import safe_open

import encoder
from encoder import reranker

ROOT = Path(__file__).resolve().parents[2]


def test_the_kit_runs_end_to_end_at_a_tiny_scale(data_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TINY": "1", "DATA": str(data_dir), "WORK": str(tmp_path / "work"),
           "OUT": str(tmp_path / "out"), "RUN": str(tmp_path / "run"), "PY": sys.executable}
    done = subprocess.run(["bash", "models/gpu-run-v4.sh", "prepare", "run"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    work, out = tmp_path / "work", tmp_path / "out"
    assert (work / "bundle/sources.json").is_file() and (work / "rerank.jsonl.xz").is_file()
    graded = [json.loads(x) for x in (work / "graded.jsonl").read_text().splitlines()]
    assert graded and all(0 <= g["score"] <= 1 for g in graded)
    meta = json.loads((out / "v4/config.json").read_text())
    training = meta["training"]
    assert training["graded_weight"] > 0 and training["graded"].endswith("graded.jsonl")
    assert "steps_per_second" in training  # the finished run's own checkpoint, not last/
    for d, precision in (("v4", "fp16"), ("reranker", "fp16+q8")):
        with safe_open(str(out / d / "model.safetensors"), "pt") as f:
            assert f.metadata()["qkv_precision"] == precision
    v4 = encoder.load(out / "v4", device="cpu")
    assert v4.encode(["a dog"]).shape == (1, v4.dim)
    rr = reranker.load(out / "reranker", device="cpu")
    assert rr.score("a dog", ["a dog runs", "stocks fell"]).shape == (2,)
    assert json.loads((out / "reranker/config.json").read_text())["kind"] == "reranker"


def test_what_trains_on_the_gpu_needs_only_the_image_packages() -> None:
    """models/gpu_train.py's imports: none of the stores, the settings or the command line,
    whose wheels do not fit beside the bundle in one call (its header)."""
    code = ("import sys, runpy; sys.argv = ['x', '--help']\n"
            "import encoder.train, encoder.rerank_train, encoder.reranker\n"
            "import encoder.checkpoint\n"
            "bad = {'index', 'api', 'wiring', 'cli', 'faiss', 'milvus_lite', 'pymilvus',\n"
            "       'pydantic', 'pydantic_settings', 'typer', 'bm25s', 'Stemmer', 'fastapi'}\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & bad))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout
