"""Build the demo corpus: the Python 3.11 tutorial and the most used library pages, in chunks.

Usage: python data/demo/make_python_docs.py --data ../shared/data
       [--out data/demo/python-docs.jsonl.gz]

Each reST section of ``tutorial/`` and ``library/`` becomes one or more chunks of at most
``--words`` words (≈ 120 tokens; the encoder reads up to 256), one JSON line
each: ``{"id": "library/json#3", "text": "json — ...: Section title. body...",
"metadata": {"file": "library/json.rst", "section": "...", "url": "https://docs.python.org/3.11/library/json.html"}}``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import re
from pathlib import Path

UNDERLINE = re.compile(r"^([=\-~^\"'*#+])\1{3,}\s*$")
ROLE = re.compile(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")  # :func:`json.dumps` -> json.dumps


def sections(path: Path) -> list[tuple[str, str]]:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    out, title, body = [], "", []  # type: tuple[list[tuple[str, str]], str, list[str]]
    skip_block = False
    for i, line in enumerate(lines):
        if UNDERLINE.match(line) and i > 0 and lines[i - 1].strip():
            if title and body:
                out.append((title, " ".join(" ".join(body).split())))
            title, body = ROLE.sub(r"\1", lines[i - 1].strip()).replace("``", ""), []
            continue
        if i + 1 < len(lines) and UNDERLINE.match(lines[i + 1]):
            continue
        stripped = line.strip()
        if stripped.startswith(".."):  # directives, comments: skip their indented block
            skip_block = not stripped.startswith((".. function::", ".. class::", ".. method::"))
            if not skip_block:  # keep API signatures, they are what people search for
                body.append(stripped.split("::", 1)[1].strip())
            continue
        if skip_block and (line.startswith("   ") or not stripped):
            continue
        skip_block = False
        if stripped:
            body.append(ROLE.sub(r"\1", stripped).replace("``", ""))
    if title and body:
        out.append((title, " ".join(" ".join(body).split())))
    return out


# The library pages people look up most; the whole tutorial is taken too. Kept small so
# that the first start embeds it in seconds on a CPU.
LIBRARY = """abc argparse asyncio-task base64 bisect collections contextlib copy csv dataclasses
datetime enum exceptions functions functools glob gzip hashlib heapq io itertools json logging
math os.path pathlib pickle random re shutil socket sqlite3 statistics stdtypes string
subprocess sys tempfile textwrap threading time typing unittest urllib.request venv
zipfile""".split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("python-docs.jsonl.gz"))
    ap.add_argument("--words", type=int, default=80)
    ap.add_argument("--min-words", type=int, default=12)
    args = ap.parse_args()
    root = args.data / "text/python-docs"
    n = 0
    raw = args.out.open("wb")
    with raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz, \
            io.TextIOWrapper(gz, encoding="utf-8") as f:
        pages = [*sorted((root / "tutorial").glob("*.txt")),
                 *(root / "library" / f"{name}.rst.txt" for name in LIBRARY)]
        for path in pages:
            rel = path.relative_to(root).as_posix().removesuffix(".txt")
            page = rel.removesuffix(".rst")
            chunk_no = 0
            for title, text in sections(path):
                words = text.split()
                for start in range(0, len(words), args.words):
                    piece = words[start : start + args.words]
                    if len(piece) < args.min_words:
                        continue
                    row = {"id": f"{page}#{chunk_no}", "text": f"{title}. {' '.join(piece)}",
                           "metadata": {"file": rel, "section": title,
                                        "url": f"https://docs.python.org/3.11/{page}.html"}}
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    chunk_no += 1
                    n += 1
    print(f"{n} chunks -> {args.out}")  # noqa: T201


if __name__ == "__main__":
    main()
