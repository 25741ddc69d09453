"""Each judged query's two result lists on every dev collection, cached for the per-query
studies of hybrid search (``bench/relevance.py``: what a hybrid hit's relevance means;
``bench/query_fusion.py``: the fusion weight chosen per query).

Usage: python bench/query_sides.py --data ../shared/data [--model models/encoder-default]
       [--dev var/dev] [--devcoll var/devcoll] [--cache var/calibration] [--out var/qsides]

For each dev collection of ``bench/calibration.py`` (and SciFact's test, marked held out)
the corpus is encoded once (the same cache as ``bench/calibration.py``), and each query is
searched exactly: dense top 100 by cosine, BM25 top 100
(:class:`index.hybrid.bm25.BM25Index`, scored as Milvus scores), each hit with its coverage
of the query's terms. Beside the judged queries, :data:`NONSENSE` queries of 3–5 random
WordNet nouns (half of them common ones, as in "purple elephant banana spaceship") are
searched the same way: queries no document answers. The collection's label-free weight is
what its tuning would choose (:func:`index.hybrid.calibration.measure` with seed 0 and
the encoder's mapping). One ``NAME.FINGERPRINT.json.gz`` per collection under ``--out``;
nothing is printed but progress, and nothing recorded: the studies record their figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from calibration import HELD_OUT, dev_sets, encoded  # noqa: E402

from index.beir import load_beir  # noqa: E402
from index.hybrid.analysis import analyze  # noqa: E402
from index.hybrid.bm25 import BM25Index  # noqa: E402
from index.hybrid.calibration import measure, model_mapping  # noqa: E402
from index.hybrid.fusion import CANDIDATES  # noqa: E402
from index.hybrid.relevance import MEET_DEPTH, scattered, spread  # noqa: E402

NONSENSE = 40  # nonsense queries per collection
VERSION = 2  # of the cached fields: 2 added each query's "scattered" and "spread"


def nouns(data: Path) -> tuple[list[str], list[str]]:
    """WordNet's single-word, lower-case, alphabetic nouns of 4–10 letters: all of them,
    and the common ones (tagged in its sense-tagged corpus at least once: "banana",
    "elephant", "purple")."""
    every, common = [], []
    for line in (data / "text/wordnet/index.noun").read_text(errors="replace").splitlines():
        if line.startswith(" "):
            continue
        fields = line.split()
        word = fields[0]
        if word.isalpha() and word.islower() and 4 <= len(word) <= 10:
            every.append(word)
            if int(fields[int(fields[3]) + 5]) > 0:  # tagsense_cnt, after the pointers
                common.append(word)
    return every, common


def nonsense(words: tuple[list[str], list[str]], name: str, n: int = NONSENSE
             ) -> dict[str, str]:
    """``n`` queries of 3–5 random nouns, common ones for half of them, the same for a
    collection's name every run."""
    rng = random.Random(zlib.crc32(name.encode()))
    return {f"nonsense-{i}": " ".join(rng.sample(words[i % 2], rng.randint(3, 5)))
            for i in range(n)}


def searched(enc: Any, texts: list[str], xb: np.ndarray, bm25: BM25Index, ids: list[str],
             queries: dict[str, str], terms: list[set[str]]) -> dict[str, Any]:
    """Each query's dense and BM25 top lists, best first: [position, cosine, coverage] and
    [position, BM25 score, cosine, coverage], where a hit's coverage is the share of the
    query's distinct analysed terms its text has (``terms``: each document's); whether
    BM25's best texts hold its terms only apart (scattered), and how the encoder's pooling
    spreads over it (:mod:`index.hybrid.relevance`)."""
    q_ids = list(queries)
    xq = enc.encode([queries[q] for q in q_ids], batch_size=64)
    weights = enc.pooling_weights([queries[q] for q in q_ids])
    k = min(CANDIDATES, len(texts))
    out = {}
    for start in range(0, len(q_ids), 256):
        S = xq[start:start + 256] @ xb.T
        for r, q in enumerate(q_ids[start:start + 256]):
            top = np.argpartition(-S[r], k - 1)[:k]
            top = top[np.lexsort((top, -S[r, top]))]
            asked = set(analyze(queries[q]))

            def cover(j: int, asked: set[str] = asked) -> float:
                return round(len(asked & terms[j]) / len(asked), 4) if asked else 0.0

            lexical = bm25.top(queries[q], k, ids)
            out[q] = {"text": queries[q], "terms": len(analyze(queries[q])),
                      "dense": [[int(j), round(float(S[r, j]), 6), cover(int(j))] for j in top],
                      "bm25": [[j, round(s, 5), round(float(S[r, j]), 6), cover(j)]
                               for j, s in lexical],
                      "scattered": scattered(frozenset(asked),
                                             (texts[j] for j, _ in lexical[:MEET_DEPTH])),
                      "spread": round(spread(weights[start + r]), 5)}
    return out


def _read(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        return json.load(f)  # type: ignore[no-any-return]


def main() -> None:
    import encoder

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=ROOT / "models/encoder-default")
    ap.add_argument("--dev", type=Path, default=ROOT / "var/dev")
    ap.add_argument("--devcoll", type=Path, default=ROOT / "var/devcoll")
    ap.add_argument("--cache", type=Path, default=ROOT / "var/calibration")
    ap.add_argument("--out", type=Path, default=ROOT / "var/qsides")
    ap.add_argument("--only", default="", help="Comma-separated collection names.")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sets = dev_sets(args.data, args.dev, args.devcoll)
    if args.only:
        sets = {n: v for n, v in sets.items() if n in args.only.split(",")}
    enc = encoder.load(args.model)
    mapping = model_mapping(args.model)
    words = nouns(args.data)
    for name, (folder, split) in sets.items():
        path = args.out / f"{name}.{enc.fingerprint}.json.gz"
        if path.is_file() and _read(path).get("version") == VERSION:
            continue  # cached, with every field the studies read
        t0 = time.time()
        corpus, queries, qrels = load_beir(folder, split)
        corpus = {i: t for i, t in corpus.items() if t.strip()}
        ids, texts = list(corpus), list(corpus.values())
        xb = encoded(enc, name, texts, args.cache)
        bm25 = BM25Index.from_texts(texts)
        terms = [set(analyze(t)) for t in texts]
        signals = measure(texts, xb, lambda t: enc.encode(list(t), batch_size=64), seed=0)
        row = {"version": VERSION, "name": name, "split": split,
               "held_out": (name, split) in HELD_OUT, "ids": ids,
               "weight": mapping.weight(signals), "signals": signals,
               "qrels": qrels, "queries": searched(enc, texts, xb, bm25, ids, queries, terms),
               "nonsense": searched(enc, texts, xb, bm25, ids, nonsense(words, name),
                                     terms)}
        with gzip.open(path, "wt") as f:
            json.dump(row, f)
        print(f"{name}: {len(ids)} docs, {len(queries)} queries, weight {row['weight']}, "
              f"{time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
