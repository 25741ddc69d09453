"""Parallel text on disk: one sentence a line, plain or gzipped, aligned by line number
(the Multi30k layout: ``<dir>/{split}.{lang}[.gz]``)."""

from __future__ import annotations

import gzip
from pathlib import Path


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file, plain or ``.gz``; invalid bytes become U+FFFD.

    Only ``\\n`` ends a line (a stray ``\\r`` is dropped), so the count matches ``wc -l``
    plus a last line without a newline.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip magic, whatever the suffix
        raw = gzip.decompress(raw)
    lines = raw.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.removesuffix("\r") for ln in lines]


def find_split(data_dir: str | Path, split: str, lang: str) -> Path:
    """``{split}.{lang}`` or ``{split}.{lang}.gz`` in ``data_dir`` (or its
    ``multi30k/task1``)."""
    root = Path(data_dir)
    for folder in (root, root / "multi30k" / "task1"):
        for name in (f"{split}.{lang}.gz", f"{split}.{lang}"):
            if (folder / name).is_file():
                return folder / name
    raise FileNotFoundError(f"no {split}.{lang}[.gz] in {root} or {root / 'multi30k/task1'}")


def read_pairs(
    data_dir: str | Path, split: str, src_lang: str = "en", tgt_lang: str = "fr"
) -> list[tuple[str, str]]:
    """Aligned (source, target) sentence pairs of one split."""
    src = read_lines(find_split(data_dir, split, src_lang))
    tgt = read_lines(find_split(data_dir, split, tgt_lang))
    if len(src) != len(tgt):
        raise ValueError(f"{split}: {len(src)} {src_lang} lines but {len(tgt)} {tgt_lang} lines")
    return list(zip(src, tgt, strict=True))
