"""The training set built once and tokenised once (issue 15: the trainer must not tokenise
on its training thread).

A :class:`Bundle` holds every distinct text once and, per source, int32 index arrays into
it: query, positive and a fixed hard negative (-1 where a pair has none). ``qkv
build-pairs`` writes it (the BM25 mining of :mod:`encoder.lexical` runs there, once), so
that a training run elsewhere (a lent GPU) starts from a small file. :class:`TokenTable`
tokenises the texts once, in parallel, into one flat uint16 array, and cuts padded batches
from it with numpy.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import lzma
import os
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tokenizers
import torch
from tokenizers import Tokenizer

from encoder.pairs import MAX_WORDS, PairSource
from encoder.tokenizer import clean_text

log = logging.getLogger(__name__)

TEXTS, ARRAYS, META = "texts.jsonl.xz", "pairs.npz", "sources.json"
TOKEN_CACHE = "token-cache"  # beside a run's folder: runs side by side tokenise a bundle once


@dataclass
class Source:
    """One source's pairs as rows of the bundle's text table."""

    name: str
    weight: float
    retrieval: bool
    q: np.ndarray  # (n,) int32
    d: np.ndarray  # (n,) int32
    neg: np.ndarray  # (n,) int32, -1 = no fixed negative

    def __len__(self) -> int:
        return len(self.q)


@dataclass
class Bundle:
    texts: list[str]
    sources: list[Source]

    @classmethod
    def from_sources(cls, sources: list[PairSource], max_words: int = MAX_WORDS) -> Bundle:
        """Every text cut at ``max_words`` words and stored once."""
        row: dict[str, int] = {}

        def ids(texts: list[str]) -> np.ndarray:
            return np.array([row.setdefault(_cut(t, max_words), len(row)) if t else -1
                             for t in texts], dtype=np.int32)

        out = []
        for s in sources:
            q, d = ids([p[0] for p in s.pairs]), ids([p[1] for p in s.pairs])
            neg = ids(s.negatives) if s.negatives else np.full(len(q), -1, dtype=np.int32)
            out.append(Source(s.name, s.weight, s.retrieval, q, d, neg))
        return cls(list(row), out)

    def save(self, folder: str | Path) -> Path:
        """Write the folder: the texts as xz-compressed JSON lines (small enough to carry
        to a GPU machine with the checkout), the index arrays, the sources' weights."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with lzma.open(folder / TEXTS, "wt", encoding="utf-8", preset=9) as f:
            for t in self.texts:
                f.write(json.dumps(t, ensure_ascii=False) + "\n")
        arrays = {f"{i}.{k}": getattr(s, k) for i, s in enumerate(self.sources)
                  for k in ("q", "d", "neg")}
        np.savez_compressed(folder / ARRAYS, **arrays)  # type: ignore[arg-type]
        meta = [{"name": s.name, "weight": s.weight, "retrieval": s.retrieval, "pairs": len(s)}
                for s in self.sources]
        (folder / META).write_text(json.dumps(meta, indent=1) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> Bundle:
        folder = Path(folder)
        with lzma.open(folder / TEXTS, "rt", encoding="utf-8") as f:
            texts = [json.loads(line) for line in f]
        arrays = np.load(folder / ARRAYS)
        meta = json.loads((folder / META).read_text())
        sources = [Source(m["name"], m["weight"], m["retrieval"], arrays[f"{i}.q"],
                          arrays[f"{i}.d"], arrays[f"{i}.neg"]) for i, m in enumerate(meta)]
        return cls(texts, sources)

    def without(self, names: Sequence[str]) -> Bundle:
        """The bundle without the sources named (an ablation); the texts stay as they are.
        Raises ValueError for a name it lacks, or when nothing would be left."""
        check_drop(names, [s.name for s in self.sources])
        drop = set(names)
        return Bundle(self.texts, [s for s in self.sources if s.name not in drop])


def source_names(folder: str | Path) -> list[str] | None:
    """The sources of a ``qkv build-pairs`` folder (from its small ``sources.json``), or
    None when ``folder`` is not one."""
    meta = Path(folder) / META
    return [m["name"] for m in json.loads(meta.read_text())] if meta.is_file() else None


def check_drop(drop: Sequence[str], names: Sequence[str]) -> None:
    """ValueError unless every name of ``drop`` is a source and one source is left."""
    if unknown := sorted(set(drop) - set(names)):
        raise ValueError(f"no such source to drop: {', '.join(unknown)} "
                         f"(the sources: {', '.join(sorted(names))})")
    if not set(names) - set(drop):
        raise ValueError("every source dropped: nothing to train on")


def _cut(text: str, max_words: int) -> str:
    words = text.split()
    return " ".join(words[:max_words]) if len(words) > max_words else text


class TokenTable:
    """Every text of a bundle tokenised once: ids (N,) uint16 flat, offsets (n + 1,)."""

    def __init__(self, tok: Tokenizer, texts: list[str], max_tokens: int,
                 chunk: int = 50_000) -> None:
        if tok.get_vocab_size() > 65535:
            raise ValueError("TokenTable stores ids as uint16: vocabulary too large")
        t0 = time.time()
        lengths, pieces = [], []
        for start in range(0, len(texts), chunk):
            encs = tok.encode_batch([clean_text(t) for t in texts[start:start + chunk]])
            for e in encs:
                ids = e.ids[:max_tokens]
                lengths.append(len(ids))
                pieces.append(np.asarray(ids, dtype=np.uint16))
        self.offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        self.offsets[1:] = np.cumsum(lengths)
        self.ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint16)
        log.info("tokenised %d texts (%d tokens) in %.0fs", len(texts), len(self.ids),
                 time.time() - t0)

    @classmethod
    def cached(cls, tok: Tokenizer, texts: list[str], max_tokens: int,
               folder: str | Path | None) -> TokenTable:
        """The table, read from ``folder`` when a run before wrote it there for the same
        tokenizer, texts and ``max_tokens`` (else made and written there, when given): on
        a lent GPU each of several runs side by side spent 37-58 s tokenising the bundle."""
        if folder is None:
            return cls(tok, texts, max_tokens)
        # what the ids depend on: the cleaning code, the tokenizer (and its library), the texts
        key = hashlib.sha1("\0".join([
            inspect.getsource(clean_text), tokenizers.__version__, unicodedata.unidata_version,
            tok.to_str(), str(max_tokens), str(len(texts))]).encode())
        for t in texts:
            key.update(t.encode("utf-8", "surrogatepass") + b"\0")
        path = Path(folder) / f"tokens-{key.hexdigest()[:16]}.npz"
        if path.is_file():
            with np.load(path) as f:
                table = cls.__new__(cls)
                table.ids, table.offsets = f["ids"], f["offsets"]
            log.info("token table of %d texts read from %s", len(texts), path)
            return table
        table = cls(tok, texts, max_tokens)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")  # several runs may write at once
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(tmp, ids=table.ids, offsets=table.offsets)
            tmp.replace(path)
        except OSError as e:  # a folder it cannot write: train without the cache
            log.warning("token table not cached in %s: %s", folder, e)
        return table

    def batch(self, rows: np.ndarray, max_len: int) -> torch.Tensor:
        """(B,) text rows → (B, L) int64 ids padded with 0, L ≤ ``max_len`` the longest."""
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        lens = np.minimum(ends - starts, max_len)
        out = np.zeros((len(rows), max(1, int(lens.max(initial=1)))), dtype=np.int64)
        for i, (s, n) in enumerate(zip(starts, lens, strict=True)):
            out[i, :n] = self.ids[s:s + n]
        return torch.from_numpy(out)

    def lengths(self, rows: np.ndarray) -> np.ndarray:
        return self.offsets[rows + 1] - self.offsets[rows]


def tokenise_bundle(folder: str | Path, runs: str | Path, max_tokens: int) -> TokenTable:
    """A ``qkv build-pairs`` folder's texts tokenised with its tokenizer into the token
    cache of the runs under ``runs`` (:meth:`TokenTable.cached`, ``runs/TOKEN_CACHE``, where
    ``encoder.train`` looks), before training runs that start side by side read it."""
    from encoder.tokenizer import load_tokenizer

    return TokenTable.cached(load_tokenizer(Path(folder) / "tokenizer.json"),
                             Bundle.load(folder).texts, max_tokens, Path(runs) / TOKEN_CACHE)
