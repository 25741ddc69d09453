"""Where a batch's encoding time goes, and how near the CPU's int8 limit it is (issue 43).

Usage: python bench/encode_profile.py --data ../shared/data [--model DIR] [--reps 20]
       [--shapes 1,8,32,64,bulk256] [--threads N]

For each batch shape (the API's: 1, 8, 32, 64 sentences of mixed lengths, as requests come;
the bulk job's: 256 sentences sorted by length) it times, on the encoder's default CPU path
(the int8 ONNX Runtime graph), each part of ``TextEncoder.encode``:

- tokenise: cleaning and the tokenizer (``TextEncoder.tokenize``);
- pack: the graph's inputs (``encoder.onnx_graph.pack``);
- graph: ``InferenceSession.run``, split by ONNX Runtime's own profiler into stages:
  int8 products (MatMulIntegerToFloat), per-token quantisation (the range, scale and
  QuantizeLinear around each product, and the rescale and bias after it), attention
  (QAttention, which does the q, k, v product too, or MultiHeadAttention, and the
  gathers that pad and unpad around it), layer norms, GELU,
  residual adds, embedding lookup and pooling;
- token bag: ``add_token_bag``;
- Python: what ``encode`` costs beyond those (sorting, grouping, copies, normalising).

The graph and packing are timed over the runs ``encode`` makes of the batch (it cuts a batch
where padded attention would cost more than another run: ``_length_groups``). Each shape's
achieved arithmetic rate (GOP/s: 2 × multiply-adds of the linear layers and
attention, over the real tokens) is set against the CPU's measured int8 peak: a
MatMulIntegerToFloat of bulk size (4,096 × 256 by 256 × 1,024, and 4,096 × 1,024 by
1,024 × 256) in the same ONNX Runtime, same threads, best of ``--reps``. Prints a markdown
section and records the figures (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from encode_speed import cpu_kind, sentences  # noqa: E402
from machine import add_results_arg, record, stamp  # noqa: E402

STAGES = ("int8 products", "quantise + rescale", "attention", "layer norm", "gelu",
          "residual add", "embed", "pooling", "other")


def stage_of(node: str, op: str) -> str:
    """The stage a graph node belongs to (by the names ``build_graph`` gives them)."""
    if op == "MatMulIntegerToFloat":
        return "int8 products"
    if op in ("MultiHeadAttention", "QAttention") or any(
            k in node for k in (".qkv_bt", ".split", ".att")):
        return "attention"  # with QAttention, the q, k, v product too
    if node.endswith((".h1", ".h2")) or node == "hf":
        return "layer norm"
    if node.endswith(".g") or op in ("Gelu", "BiasGelu"):  # ORT fuses the bias add in
        return "gelu"
    if node.endswith((".x1", ".x2")):
        return "residual add"
    if node in ("tok", "pos_t", "x0"):
        return "embed"
    if node.startswith(("pool", "alpha", "s_masked", "hf_bt", "vec")):
        return "pooling"
    if any(node.endswith(s) for s in (".hi", ".lo0", ".lo", ".amax", ".inv", ".xu", ".xq",
                                      ".y", ".o", ".f1", ".f2", ".qkv")):
        return "quantise + rescale"
    return "other"


def ops_per_batch(cfg: Any, seqs: list[list[int]]) -> float:
    """Arithmetic operations (2 per multiply-add) of a batch: the linear layers over the
    real tokens, attention over each text's own length."""
    d, f, layers = cfg.d_model, cfg.d_ff, cfg.n_layers
    tokens = sum(len(s) for s in seqs)
    linear = 2 * tokens * (4 * d * d + 2 * d * f)
    attention = 2 * 2 * d * sum(len(s) ** 2 for s in seqs)
    return float(layers * (linear + attention))


def int8_peak(threads: int, reps: int) -> float:
    """GOP/s of ONNX Runtime's MatMulIntegerToFloat at bulk size, best of ``reps``."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    best = 0.0
    rng = np.random.default_rng(0)
    for k, n in ((256, 1024), (1024, 256)):
        m = 4096
        w = rng.integers(-64, 65, (k, n), dtype=np.int8)
        inits = [numpy_helper.from_array(w, "w"),
                 numpy_helper.from_array(np.array(1 / 127, np.float32), "a_scale"),
                 numpy_helper.from_array(np.full(n, 0.01, np.float32), "w_scale"),
                 numpy_helper.from_array(np.array(128, np.uint8), "a_zero")]
        node = helper.make_node("MatMulIntegerToFloat", ["x", "w", "a_scale", "w_scale",
                                                         "a_zero"], ["y"],
                                domain="com.microsoft")
        graph = helper.make_graph([node], "peak",
                                  [helper.make_tensor_value_info("x", TensorProto.UINT8,
                                                                 [m, k])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                 [m, n])], inits)
        proto = helper.make_model(graph, opset_imports=[
            helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        proto.ir_version = 8
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        x = rng.integers(0, 256, (m, k), dtype=np.uint8)
        sess.run(["y"], {"x": x})
        for _ in range(reps):
            t = time.perf_counter()
            sess.run(["y"], {"x": x})
            best = max(best, 2 * m * k * n / (time.perf_counter() - t) / 1e9)
    return best


def shapes(texts: list[str], spec: str, seed: int) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    out = []
    for s in spec.split(","):
        if s.startswith("bulk"):
            n = int(s[4:])
            out.append((f"bulk {n} (sorted)", sorted(rng.sample(texts, n), key=len)))
        else:
            out.append((f"API {s} (mixed)", rng.sample(texts, int(s))))
    return out


def best_time(fn: Any, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def graph_stages(enc: Any, runs: list[list[list[int]]], threads: int, reps: int
                 ) -> dict[str, float]:
    """Each stage's share of the graph's time, from ONNX Runtime's profiler."""
    import onnxruntime as ort

    from encoder.onnx_graph import build_graph, pack

    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(tmp) / "prof")
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1")
        graph = enc._onnx.graph_bytes() if enc._onnx is not None else (  # the one it runs
            build_graph(enc.model).SerializeToString())
        sess = ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])
        feeds = [pack(r) for r in runs]
        for _ in range(reps):
            for feed in feeds:
                sess.run(["vec", "alpha"], feed)
        events = json.loads(Path(sess.end_profiling()).read_text())
    spent: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = e["name"][: -len("_kernel_time")]
            spent[stage_of(node, e.get("args", {}).get("op_name", ""))] += e["dur"]
    total = sum(spent.values()) or 1.0
    return {s: spent.get(s, 0.0) / total for s in STAGES}


def graph_runs(enc: Any, ids: list[list[int]]) -> list[list[list[int]]]:
    """The graph runs ``encode(texts, batch_size=max(len, 64))`` makes of a batch's token
    id lists."""
    from encoder.text_encoder import _length_groups

    lengths = [len(x) for x in ids]
    order = sorted(range(len(ids)), key=lambda i: -lengths[i])
    return [[ids[i] for i in g] for g in _length_groups(order, lengths, max(len(ids), 64),
                                                        enc.dim, onnx=True)]


def profile(enc: Any, name: str, texts: list[str], threads: int, reps: int,
            peak: float) -> dict[str, Any]:
    from encoder.onnx_graph import pack

    ids, _ = enc.tokenize(texts)
    batch = len(texts)
    size = max(batch, 64)
    lengths = [len(x) for x in ids]
    runs = graph_runs(enc, ids)
    feeds = [pack(r) for r in runs]
    assert enc._onnx is not None
    session = enc._onnx.session(threads)
    raw = np.zeros((batch, enc.dim), np.float32)
    t_total = best_time(lambda: enc.encode(texts, batch_size=size), reps)
    t_tok = best_time(lambda: enc.tokenize(texts), reps)
    t_pack = best_time(lambda: [pack(r) for r in runs], reps)
    t_graph = best_time(lambda: [session.run(["vec", "alpha"], f) for f in feeds], reps)
    t_bag = best_time(lambda: enc.add_token_bag(ids, raw.copy()), reps)
    t_py = max(0.0, t_total - t_tok - t_pack - t_graph - t_bag)
    ops = ops_per_batch(enc.config, ids)
    stages = graph_stages(enc, runs, threads, reps)
    return {"shape": name, "batch": batch, "runs": len(runs), "tokens": sum(lengths),
            "ms": round(t_total * 1e3, 3), "per_s": round(batch / t_total, 1),
            "share": {"tokenise": t_tok / t_total, "pack": t_pack / t_total,
                      "graph": t_graph / t_total, "token bag": t_bag / t_total,
                      "python": t_py / t_total},
            "stages": stages, "gops_total": ops / t_total / 1e9,
            "gops_graph": ops / t_graph / 1e9,
            "peak_share": ops / t_total / 1e9 / peak if peak else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--model", default=str(ROOT / "models" / "encoder-default"))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--shapes", default="1,8,32,64,bulk256")
    ap.add_argument("--threads", type=int, default=0, help="0: every core")
    ap.add_argument("--seed", type=int, default=0)
    add_results_arg(ap)
    args = ap.parse_args()
    import os

    import torch

    import encoder

    threads = args.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    enc = encoder.load(args.model, device="cpu", backend="onnx")
    texts = sentences(args.data, 2000)
    peak = int8_peak(threads, args.reps)
    rows = [profile(enc, name, batch, threads, args.reps, peak)
            for name, batch in shapes(texts, args.shapes, args.seed)]
    command = shlex.join(["python", "bench/encode_profile.py", *sys.argv[1:]])
    parts = ("tokenise", "pack", "graph", "token bag", "python")
    lines = [f"## Where encoding time goes ({stamp()}, {cpu_kind()}, {threads} threads)", "",
             f"`{command}`", "",
             f"int8 peak (MatMulIntegerToFloat, bulk size): **{peak:.0f} GOP/s**.", "",
             "| shape | tokens | graph runs | ms | sentences/s | " + " | ".join(parts)
             + " | GOP/s (graph) | of peak |", "|---" * (7 + len(parts)) + "|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['tokens']} | {r['runs']} | {r['ms']:.2f} | "
                     f"{r['per_s']:.0f} | "
                     + " | ".join(f"{r['share'][p]:.0%}" for p in parts)
                     + f" | {r['gops_total']:.0f} ({r['gops_graph']:.0f}) | "
                     f"{r['peak_share']:.0%} |")
    lines += ["", "Inside the graph (ONNX Runtime's profiler, share of the graph's time):", "",
              "| shape | " + " | ".join(STAGES) + " |", "|---" * (1 + len(STAGES)) + "|"]
    for r in rows:
        lines.append(f"| {r['shape']} | "
                     + " | ".join(f"{r['stages'][s]:.0%}" for s in STAGES) + " |")
    section = "\n".join(lines)
    print(section)
    figures: dict[str, Any] = {"int8_peak_gops": round(peak, 1), "threads": threads,
                               "cpu_kind": cpu_kind()}
    for r in rows:
        key = r["shape"].split(" (")[0].replace(" ", "_").lower()
        figures[f"{key}_per_s"] = r["per_s"]
        figures[f"{key}_gops"] = round(r["gops_total"], 1)
        figures[f"{key}_peak_share"] = round(r["peak_share"], 3)
        figures[f"{key}_graph_share"] = round(r["share"]["graph"], 3)
    record("encode_profile", command, figures, section=section, results=args.results)


if __name__ == "__main__":
    main()
