"""The int8 graph's vectors on an AVX2-only CPU, emulated, against this CPU's (issue 43).

``python bench/avx2_qemu.py --data DATA [--cpu Haswell] [--n 64]`` encodes ``--n`` sentences
with the shipped encoder's default CPU path here, then again in a child run under QEMU's
user-mode emulator (``qemu-x86_64 -cpu Haswell``: Debian package ``qemu-user``), where the
CPU reports AVX2 without AVX-512 or VNNI, so ONNX Runtime takes the kernels that sum
uint8 × int8 pairs in int16 lanes (which the graph's 7-bit weights keep from overflowing,
``encoder/onnx_graph.py``). Prints and records the least and mean cosine between the two
sets of vectors. QEMU is far too slow to time anything: this checks results, not speed.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from encode_speed import sentences  # noqa: E402
from machine import add_results_arg, record, stamp  # noqa: E402


def encode(data: Path, n: int, out: Path) -> None:
    import encoder

    enc = encoder.load(ROOT / "models" / "encoder-default", device="cpu", backend="onnx")
    np.save(out, enc.encode(sentences(data, n)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--cpu", default="Haswell", help="the CPU model QEMU emulates")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    add_results_arg(ap)
    args = ap.parse_args()
    if args.child:
        return encode(args.data, args.n, args.child)
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        raise SystemExit("needs qemu-x86_64 (Debian package qemu-user)")
    with tempfile.TemporaryDirectory() as tmp:
        here, there = Path(tmp) / "here.npy", Path(tmp) / "there.npy"
        encode(args.data, args.n, here)
        subprocess.run([qemu, "-cpu", args.cpu, sys.executable, __file__, "--data",
                        str(args.data), "--n", str(args.n), "--child", str(there)],
                       check=True, stderr=subprocess.DEVNULL)
        a, b = np.load(here), np.load(there)
    cos = (a * b).sum(axis=1)
    command = shlex.join(["python", "bench/avx2_qemu.py", *sys.argv[1:]])
    section = (f"## The int8 graph on an emulated {args.cpu} CPU ({stamp()})\n\n`{command}`\n\n"
               f"{args.n} sentences, the default CPU path here and under `qemu-x86_64 -cpu "
               f"{args.cpu}`: cosine between the two sets of vectors min **{cos.min():.6f}**, "
               f"mean {cos.mean():.6f}.")
    print(section)
    record("avx2_qemu", command, {"cpu": args.cpu, "n": args.n,
                                  "min_cosine": round(float(cos.min()), 6),
                                  "mean_cosine": round(float(cos.mean()), 6)},
           section=section, results=args.results)


if __name__ == "__main__":
    main()
