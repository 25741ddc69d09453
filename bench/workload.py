"""What the index benchmarks run on: real texts from the data directory, a Milvus 2.3.5
server, and an RSS sampler. Shared by ``bench/ingest.py`` and ``bench/search.py``.

Texts are sentences and definitions cut from ``DATA/text``: Reuters-21578 titles and body
sentences, WordNet glosses and examples, Python-docs sentences, and (only when those do
not give enough) sentences of GCIDE definitions and quotations. Each is 3–80 words; they
are deduplicated and shuffled with a fixed seed, so every run sees the same texts in the
same order.
"""

from __future__ import annotations

import contextlib
import gzip
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"(])")
_ATTRIBUTION = re.compile(r"\s--[A-Z][^-]*$")
_NUMBERING = re.compile(r"^(\(?\d+\.|\([a-z]\))\s+")
_QUOTED = re.compile(r'"([^"]+)"')
CHUNK = 25_000  # texts per cached vector file (x-START-END.npy): encoding resumes by chunk


def _keep(text: str, lo: int = 3, hi: int = 80) -> bool:
    return lo <= len(text.split()) <= hi


def _sentences(body: str) -> list[str]:
    return [s for s in _SENTENCE.split(body) if _keep(s)]


def gcide_definitions(data: Path) -> Iterator[str]:
    """Definition paragraphs and quotations of GCIDE (dictd file, gzip-compatible): entry
    heads, etymologies, ``--Author`` attributions and ``{}`` cross-reference marks removed."""
    path = data / "text/gcide/gcide.dict.dz"
    block: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            s = line.strip()
            if s and not (s.startswith("[") and s.endswith("]")):
                block.append(line.rstrip())
                continue
            if block:
                head = not block[0].startswith(" ")
                text = " ".join(x.strip() for x in block)
                block = []
                if head:  # "Word \Pro*nun"ci*a`tion\, n. [Etym.] Definition."
                    if "\\" not in text or "]" not in text:
                        continue
                    text = text.rsplit("]", 1)[1]
                text = _NUMBERING.sub("", _ATTRIBUTION.sub("", text.strip()))
                text = text.replace("{", "").replace("}", "")
                if _keep(text, 4) and "\\" not in text:
                    yield text


def wordnet_examples(data: Path) -> Iterator[str]:
    """The quoted example sentences of WordNet 3.0 glosses."""
    for pos in ("noun", "verb", "adj", "adv"):
        with open(data / f"text/wordnet/data.{pos}", encoding="utf-8", errors="replace") as f:
            for line in f:
                if "|" in line and not line.startswith("  "):
                    yield from _QUOTED.findall(line.split("|", 1)[1])


def real_texts(data: Path, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """The first ``n`` of a fixed list of distinct (source, text) pairs from ``data/text``:
    Reuters, WordNet and Python-docs texts shuffled with ``seed``, then GCIDE's, shuffled.
    Every ``n`` gives a prefix of the same list, so the ingest docs (100k) are the first
    texts of the search benchmark's list and their vectors can be shared."""
    from encoder.pairs import python_doc_sections, reuters_articles, wordnet_glosses

    pool: dict[str, str] = {}
    for title, body in reuters_articles(data):
        for t in [title, *_sentences(body)]:
            pool.setdefault(t, "reuters")
    for _, definition in wordnet_glosses(data):
        if _keep(definition):
            pool.setdefault(definition, "wordnet")
    for example in wordnet_examples(data):
        if _keep(example):
            pool.setdefault(example, "wordnet")
    for _, section in python_doc_sections(data):
        for t in _sentences(section):
            pool.setdefault(t, "python-docs")
    items = sorted((src, t) for t, src in pool.items())
    random.Random(seed).shuffle(items)
    if n > len(items):  # GCIDE only when needed: the first three are enough for ingest
        extra = {t: "gcide" for d in gcide_definitions(data) for t in _sentences(d)
                 if t not in pool}
        more = sorted(("gcide", t) for t in extra)
        random.Random(seed).shuffle(more)
        items += more
    if n > len(items):
        raise SystemExit(f"{data}/text yields only {len(items)} distinct texts, asked for {n}")
    return items[:n]


def vector_cache(fingerprint: str) -> Path:
    """Where vectors of :func:`real_texts` made by one encoder are cached, by chunk."""
    path = ROOT / "var/bench" / f"vectors-{fingerprint}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def chunk_file(cache: Path, start: int, total: int) -> Path:
    """The cached vectors of texts ``start`` to ``min(start + CHUNK, total)``."""
    return cache / f"x-{start:07d}-{min(start + CHUNK, total):07d}.npy"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_tree(proc: psutil.Process | subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """TERM a process and its descendants, wait, then KILL whatever is left (the stack's
    :func:`stack.stop_process`), and reap it when it is our child."""
    from stack import stop_process

    with contextlib.suppress(psutil.NoSuchProcess):
        stop_process(psutil.Process(proc.pid), grace)
    if isinstance(proc, subprocess.Popen):
        proc.wait(10)  # reap our direct child


@contextlib.contextmanager
def milvus_server(data_dir: Path) -> Iterator[tuple[str, int]]:
    """Milvus 2.3.5 standalone (:class:`stack.MilvusStandalone`: free ports, its etcd's
    too) over ``data_dir``; yields (``http://`` URI, pid). Stopped by pid on exit."""
    from stack import MilvusStandalone

    server = MilvusStandalone(data_dir)
    server.start()
    assert server.proc is not None
    try:
        yield server.uri, server.proc.pid
    finally:
        server.stop()


@dataclass
class RssSampler:
    """Samples the RSS of ``pid`` every ``interval`` s in a thread, with ``progress()``
    (e.g. rows written so far) beside each sample."""

    pid: int
    progress: Callable[[], int] = lambda: 0
    interval: float = 0.25
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (s, rows, bytes)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> RssSampler:
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        proc = psutil.Process(self.pid)
        while not self._stop.is_set():
            try:
                rss = proc.memory_info().rss
            except psutil.NoSuchProcess:
                return
            self.samples.append((time.perf_counter() - self._t0, self.progress(), rss))
            self._stop.wait(self.interval)

    @property
    def peak_mb(self) -> float:
        return max((s[2] for s in self.samples), default=0) / 2**20

    def curve(self, points: int = 6) -> list[tuple[int, float]]:
        """(rows, MB) at evenly spaced row counts: the RSS growth curve."""
        if not self.samples:
            return []
        last = max(s[1] for s in self.samples)
        out = []
        for i in range(1, points + 1):
            target = last * i // points
            rss = max((s[2] for s in self.samples if s[1] <= target), default=0)
            out.append((target, rss / 2**20))
        return out


def paired_bootstrap(refs: list[str], base: list[str], other: list[str], samples: int,
                     seed: int = 12345) -> tuple[float, float, float]:
    """(BLEU(other) − BLEU(base), and the 2.5th and 97.5th percentiles of that difference
    over ``samples`` resamplings of the sentences)."""
    import numpy as np
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    a = np.array(bleu._extract_corpus_statistics(base, [refs]), dtype=np.float64)
    b = np.array(bleu._extract_corpus_statistics(other, [refs]), dtype=np.float64)

    def score(stats: np.ndarray) -> float:
        return float(bleu._compute_score_from_stats(list(stats)).score)

    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(samples):
        idx = rng.integers(0, len(refs), len(refs))
        diffs.append(score(b[idx].sum(0)) - score(a[idx].sum(0)))
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return score(b.sum(0)) - score(a.sum(0)), float(lo), float(hi)
