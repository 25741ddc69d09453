"""Build the demo translation memory: the Multi30k task1 English→French training pairs.

Usage: python data/demo/make_multi30k_tm.py --data ../shared/data
       [--out data/demo/multi30k-en-fr.jsonl.gz]

Line n (1-based) of ``multi30k/task1/train.en.gz`` and of ``train.fr.gz`` make one JSON
line: ``{"id": "multi30k-train-<n>", "text": <English source>, "value": <French target>,
"metadata": {"source": "multi30k task1 train", "line": <n>}}``; pairs with an empty side
are left out. The encoder keys the English ``text``; the decoder reads the French ``value``.
`make run` loads it into the `tm-en-fr` collection on first start. Deterministic: the same
inputs give the same bytes (gzip without a name or a timestamp).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
from pathlib import Path

SOURCE = "multi30k task1 train"


def read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n").strip() for line in f]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).with_name("multi30k-en-fr.jsonl.gz"))
    args = ap.parse_args()
    root = args.data / "multi30k/task1"
    en, fr = read_lines(root / "train.en.gz"), read_lines(root / "train.fr.gz")
    if len(en) != len(fr):
        raise SystemExit(f"train.en.gz has {len(en)} lines, train.fr.gz {len(fr)}: not aligned")
    n = 0
    raw = args.out.open("wb")
    # no name and no time in the gzip header: the same bytes wherever it is written
    gz = gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=9, mtime=0)
    with raw, gz, io.TextIOWrapper(gz, encoding="utf-8") as f:
        for line, (source, target) in enumerate(zip(en, fr, strict=True), start=1):
            if not source or not target:
                continue
            row = {"id": f"multi30k-train-{line}", "text": source, "value": target,
                   "metadata": {"source": SOURCE, "line": line}}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    print(f"{n} pairs -> {args.out}")  # noqa: T201


if __name__ == "__main__":
    main()
