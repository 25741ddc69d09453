"""A miniature of the shared data directory, written by tests into a temporary folder."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

ANIMALS = ["dog", "cat", "horse", "bird", "fish", "cow", "goat", "duck", "fox", "bear"]
ACTIONS = ["runs", "jumps", "sleeps", "eats", "swims", "plays", "sits", "walks"]
PLACES = ["in the park", "on the beach", "in a field", "near the river", "in the snow",
          "on a hill", "at the farm", "in the forest"]


def _caption(rng: random.Random, a: str, p: str) -> str:
    return f"A {rng.choice(['small', 'big', 'brown', 'white'])} {a} {rng.choice(ACTIONS)} {p}."


def write_data_dir(root: Path, seed: int = 0) -> Path:
    """A miniature of ../shared/data with every file the pair sources read."""
    rng = random.Random(seed)
    t2 = root / "multi30k/task2"
    t2.mkdir(parents=True)
    groups = [(a, p) for a in ANIMALS for p in PLACES]
    for i in range(1, 6):
        with gzip.open(t2 / f"train.{i}.en.gz", "wt") as f:
            f.writelines(_caption(rng, a, p) + "\n" for a, p in groups)
    sts = root / "sts/stsbenchmark"
    sts.mkdir(parents=True)
    rows = []
    for k, (a, p) in enumerate(groups[:40]):
        other = groups[(k + 7) % len(groups)]
        rows.append(f"g\tcap\t2012\t{k:04d}\t4.600\t{_caption(rng, a, p)}\t{_caption(rng, a, p)}")
        rows.append(f"g\tcap\t2012\t{k:04d}\t0.400\t{_caption(rng, a, p)}\t"
                    f"{_caption(rng, *other)}")
    (sts / "sts-train.csv").write_text("\n".join(rows) + "\n")
    (sts / "sts-dev.csv").write_text("\n".join(rows[:30]) + "\n")
    sick = root / "sts/sick2014"
    sick.mkdir(parents=True)
    lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
    lines += [f"{k}\t{_caption(rng, a, p)}\tA {a} is {p}\t4.0\tENTAILMENT"
              for k, (a, p) in enumerate(groups[:30])]
    (sick / "SICK_train.txt").write_text("\n".join(lines) + "\n")
    msrp = root / "pairs/msrp"
    msrp.mkdir(parents=True)
    lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    lines += [f"1\t{k}\t{k + 1}\tThe {a} was seen {p}.\tSomeone saw the {a} {p}."
              for k, (a, p) in enumerate(groups[:30])]
    (msrp / "msr-para-train.tsv").write_text("\n".join(lines) + "\n")
    wn = root / "text/wordnet"
    wn.mkdir(parents=True)
    wn_lines = [f"0000{k:04d} 05 n 01 {a} 0 000 | a {a} animal that lives {p}  "
                for k, (a, p) in enumerate(groups[:20])]
    (wn / "data.noun").write_text("  1 licence header\n" + "\n".join(wn_lines) + "\n")
    for pos in ("verb", "adj", "adv"):
        (wn / f"data.{pos}").write_text("  1 licence header\n")
    write_beir(root / "beir/scifact", rng)
    reuters = root / "text/reuters21578"
    reuters.mkdir(parents=True)
    arts = [f'<REUTERS ID="{k}"><TEXT><TITLE>{a.upper()} PRICES RISE {p.upper()}</TITLE>'
            f"<BODY>{' '.join(_caption(rng, a, p) for _ in range(8))} Reuter</BODY></TEXT>"
            f"</REUTERS>" for k, (a, p) in enumerate(groups[:20])]
    (reuters / "reut2-000.sgm").write_text("\n".join(arts))
    docs = root / "text/python-docs/library"
    docs.mkdir(parents=True)
    (docs / "animals.rst.txt").write_text("".join(
        f"The {a} module\n{'=' * 20}\n\n{' '.join(_caption(rng, a, p) for _ in range(4))}\n\n"
        for a, p in groups[:10]))
    nli = root / "nli"
    nli.mkdir(parents=True)
    with gzip.open(nli / "triples.csv.gz", "wt") as f:
        f.write("anchor,entailment,contradiction,source\n")
        f.writelines(f"The {a} {act} {p}.,An animal is {p}.,No {a} is anywhere {p}.,snli-dev\n"
                     for (a, p), act in zip(groups[:12], ACTIONS * 2, strict=False))
    mq = root / "qa/medquad"
    mq.mkdir(parents=True)
    with gzip.open(mq / "pairs.jsonl.gz", "wt") as f:
        for a, p in groups[:30]:
            f.write(json.dumps({"question": f"What is {a} fever {p}?", "focus": f"{a} fever",
                                "passage": f"{a.title()} fever is an illness caught {p}. "
                                + " ".join(_caption(rng, a, p) for _ in range(3))}) + "\n")
    write_gcide(root / "text/gcide")
    return root


GCIDE_ENTRIES = {  # dictd entries as GCIDE writes them
    "Zebra": 'Zebra \\Ze"bra\\, n. [Pg. zebra.] (Zool.)\n   Any member of three species of '
             "African wild horses\n   with dark bands.\n   [1913 Webster]\n",
    "Ocean": 'Ocean \\O"cean\\, n. [F. oc[\'e]an.]\n   1. The whole body of salt water which '
             "covers\n      the globe; -- called also the {sea}.\n      [1913 Webster]\n\n   2. "
             "One of the large bodies of water into which the\n      great ocean is divided.\n",
}


def write_gcide(folder: Path) -> Path:
    """``gcide.dict.dz`` (gzip) and ``gcide.index`` (headword, base64 offset and length),
    a phrase line pointing at its head word's entry as GCIDE's index does."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def b64(n: int) -> str:
        out = alphabet[n % 64]
        while n >= 64:
            n //= 64
            out = alphabet[n % 64] + out
        return out

    folder.mkdir(parents=True)
    body, index = b"", ["00-database-info\tA\tB"]
    for word, entry in GCIDE_ENTRIES.items():
        raw = entry.encode()
        index.append(f"{word}\t{b64(len(body))}\t{b64(len(raw))}")
        if word == "Ocean":
            index.append(f"Ocean wave\t{b64(len(body))}\t{b64(len(raw))}")
        body += raw
    with gzip.open(folder / "gcide.dict.dz", "wb") as f:
        f.write(body)
    (folder / "gcide.index").write_text("\n".join(index) + "\n")
    return folder


def write_beir(folder: Path, rng: random.Random) -> Path:
    """A BEIR-layout folder: one document per (animal, place), queries about them."""
    (folder / "qrels").mkdir(parents=True)
    groups = [(a, p) for a in ANIMALS for p in PLACES]
    with open(folder / "corpus.jsonl", "w") as f:
        for k, (a, p) in enumerate(groups):
            body = " ".join(_caption(rng, a, p) for _ in range(8))
            f.write(json.dumps({"_id": f"d{k}", "title": f"The {a} {p}", "text": body}) + "\n")
    with open(folder / "queries.jsonl", "w") as f:
        for k, (a, p) in enumerate(groups):
            f.write(json.dumps({"_id": f"q{k}", "text": f"where does the {a} go {p}"}) + "\n")
    for split, ks in (("train", range(0, len(groups), 2)), ("test", range(1, len(groups), 2))):
        lines = ["query-id\tcorpus-id\tscore"] + [f"q{k}\td{k}\t1" for k in ks]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


COMMODITIES = "copper wheat coffee sugar cotton tin zinc cocoa rubber oil".split()


def write_corpus(folder: Path) -> Path:
    """A user's corpus for adapting an encoder: 30 titled market reports (docs.jsonl)."""
    path = folder / "docs.jsonl"
    w = COMMODITIES
    rows = [{"title": f"{c} report {i}",
             "text": " ".join(f"the {c} market moved {i} points as {w[(i + j) % 10]} "
                              "traders watched prices" for j in range(6))}
            for i, c in enumerate(w * 3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
