"""Time the encoder's ONNX graph against the graph an earlier commit builds, side by side.

``python bench/graph_ab.py --data DATA --against REV`` builds both graphs from the same
shipped weights and calibrated ranges (``encoder/onnx_graph.py`` as it is now, and as it
was at ``REV``, read with ``git show``), runs them in alternating rounds at the API's batch
shapes (mixed texts) and the bulk job's (sorted), with 1 thread (the service's per-core
batches, threads sleeping) and every core (bulk, spinning), and prints for each shape the
median ratio of their speeds (now / then) and the least cosine between their vectors.
Only the graph runs are timed: tokenising and the token bag are the same for both.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from encode_profile import graph_runs, shapes  # noqa: E402
from encode_speed import sentences  # noqa: E402
from machine import add_results_arg, record, stamp  # noqa: E402


def graph_at(rev: str) -> Any:
    """``encoder/onnx_graph.py`` as it was at ``rev``, imported as a module of its own."""
    text = subprocess.run(["git", "show", f"{rev}:encoder/onnx_graph.py"], cwd=ROOT,
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "onnx_graph_then.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("onnx_graph_then", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--against", required=True, help="the commit whose graph to time against")
    ap.add_argument("--model", default=str(ROOT / "models" / "encoder-default"))
    ap.add_argument("--shapes", default="1,8,32,64,bulk256")
    ap.add_argument("--rounds", type=int, default=9)
    add_results_arg(ap)
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    import onnxruntime as ort

    import encoder
    from encoder.onnx_graph import build_graph, pack

    then = graph_at(args.against)
    enc = encoder.load(args.model, device="cpu", backend="onnx")
    assert enc._onnx is not None
    ranges = enc._onnx._ranges
    batches = []  # (shape, its graph runs' inputs, its tokens)
    for name, texts in shapes(sentences(args.data, 2000), args.shapes, 0):
        runs = graph_runs(enc, enc.tokenize(texts)[0])
        batches.append((name.split(" (")[0], [pack(r) for r in runs],
                        sum(len(r) for r in runs)))

    def session(build: Any, threads: int) -> Any:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        opts.log_severity_level = 3
        opts.add_session_config_entry("session.intra_op.allow_spinning",
                                      "1" if threads > 1 else "0")
        return ort.InferenceSession(build(enc.model, True, ranges).SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])

    cores = os.cpu_count() or 1
    figures: dict[str, Any] = {"against": args.against}
    lines = [f"## The encoder graph against {args.against}'s ({stamp()})", "",
             "`" + shlex.join(["python", "bench/graph_ab.py", *sys.argv[1:]]) + "`", "",
             "| threads | shape | then ms | now ms | now / then speed | least cosine |",
             "|---|---|---|---|---|---|"]
    for threads in sorted({1, cores}):
        sessions = {"then": session(then.build_graph, threads),
                    "now": session(build_graph, threads)}
        for name, feeds, tokens in batches:
            vec = {k: np.concatenate([s.run(["vec"], f)[0] for f in feeds])
                   for k, s in sessions.items()}
            a, b = (v / np.linalg.norm(v, axis=1, keepdims=True) for v in vec.values())
            cosine = float((a * b).sum(axis=1).min())
            reps = max(1, 2000 // tokens)
            spent: dict[str, list[float]] = {k: [] for k in sessions}
            for r in range(args.rounds):
                for k in (("then", "now") if r % 2 else ("now", "then")):
                    t = time.perf_counter()
                    for _ in range(reps):
                        for f in feeds:
                            sessions[k].run(["vec", "alpha"], f)
                    spent[k].append((time.perf_counter() - t) / reps)
            ratio = float(np.median(np.array(spent["then"]) / np.array(spent["now"])))
            lines.append(f"| {threads} | {name} | {1e3 * np.median(spent['then']):.2f} | "
                         f"{1e3 * np.median(spent['now']):.2f} | {ratio:.3f} | "
                         f"{cosine:.6f} |")
            key = f"t{threads}_{name.replace(' ', '_').lower()}"
            figures[f"{key}_speed_ratio"] = round(ratio, 3)
            figures[f"{key}_min_cosine"] = round(cosine, 6)
    section = "\n".join(lines)
    print(section)
    record("graph_ab", lines[2].strip("`"), figures, section=section, results=args.results)


if __name__ == "__main__":
    main()
