"""Long documents as passages (index.passages): how a document is cut, and that a reader sees
it whole through every write, a write cut short and a delete, on every backend."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index import VectorStore
from index import passages as P
from index.store import Item

DIM = 8


def words(texts: Sequence[str]) -> list[int]:
    """A token count: one a word (what the tests size passages in)."""
    return [len(t.split()) for t in texts]


def paragraph(rng: random.Random, n: int, tag: str) -> str:
    sentences = []
    while sum(len(s.split()) for s in sentences) < n:
        k = rng.randint(6, 14)
        sentences.append(" ".join(f"{tag}{rng.randint(0, 99)}" for _ in range(k)) + ".")
    return " ".join(sentences)


def document(seed: int, paragraphs: int = 8, size: int = 40) -> str:
    rng = random.Random(seed)
    parts = [f"# Title of {seed}"]
    for i in range(paragraphs):
        if i == paragraphs // 2:
            parts.append("## A section")
        parts.append(paragraph(rng, rng.randint(size // 2, size * 2), f"w{seed}x"))
    return "\n\n".join(parts)


def test_passages_cover_the_text_follow_its_paragraphs_and_fit_the_size() -> None:
    s = P.Settings(50, 8)
    text = document(1)
    ps = P.split(text, s, words)
    assert len(ps) > 3
    assert "".join(text[p.start:p.end] for p in ps) == text  # the whole text, in order
    paragraph_starts = {0} | {text.index(x) for x in text.split("\n\n")}
    for p in ps:
        assert words([p.embed])[0] <= s.size + 4  # + the heading it sits under
        body = text[p.start:p.end].strip()
        if words([body])[0] <= s.size:
            # a passage starts where a paragraph does, unless a paragraph was too long
            assert p.start in paragraph_starts or text[p.start - 1] == " "
    # the passages after "## A section" carry it; it starts a passage of its own
    sec = text.index("## A section")
    assert any(p.start == sec or (p.start < sec < p.end and text[p.start:sec].strip() == "")
               for p in ps)
    after = [p for p in ps if p.start > sec]
    assert after and all(p.embed.startswith("A section\n") for p in after)


def test_a_sentence_longer_than_a_passage_is_cut_in_overlapping_windows() -> None:
    s = P.Settings(40, 10)
    text = " ".join(f"t{i}" for i in range(200))  # one sentence, no punctuation
    ps = P.split(text, s, words)
    assert "".join(text[p.start:p.end] for p in ps) == text
    assert len(ps) >= 5 and all(words([p.embed])[0] <= s.size for p in ps)
    first, second = ps[0].embed.split(), ps[1].embed.split()
    assert first[-10:] == second[:10]  # windows share `overlap` tokens


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="overlap"):
        P.Settings(40, 20)
    with pytest.raises(ValueError, match="size"):
        P.Settings(8, 0)


def embed(texts: Sequence[str]) -> np.ndarray:
    """A deterministic unit vector a text (its hash), enough to tell rows apart."""
    out = np.zeros((len(texts), DIM), np.float32)
    for i, t in enumerate(texts):
        rng = np.random.default_rng(abs(hash(t)) % 2**32)
        v = rng.normal(size=DIM)
        out[i] = v / np.linalg.norm(v)
    return out


def planned_of(docs: dict[str, str], s: P.Settings) -> P.Planned:
    return P.plan([(i, t, f"value of {i}", {"k": i}) for i, t in docs.items()], s, words, None)


def write(store: VectorStore, coll: str, docs: dict[str, str], s: P.Settings) -> int:
    planned = planned_of(docs, s)
    return P.commit(store, coll, planned, embed(planned.embed_texts), None)


def rows(store: VectorStore, coll: str) -> int:
    return store.count(coll)


def expected_rows(docs: dict[str, str], s: P.Settings) -> int:
    return sum(len(P.split(t, s, words)) for t in docs.values())


def test_documents_round_trip_replace_and_delete_whole(store: VectorStore,
                                                       collection: str) -> None:
    s = P.Settings(50, 8)
    store.create(collection, DIM)
    store.set_passages(collection, s.to_dict())
    assert store.describe(collection).passages == s.to_dict()
    docs = {"a": document(1), "b": document(2), "short": "just a few words"}
    assert write(store, collection, docs, s) == 3
    assert rows(store, collection) == expected_rows(docs, s) > 3
    assert store.count(collection, None, P.count_filter()) == 3
    for i, t in docs.items():
        got = P.read(store, collection, i)
        assert got is not None and got[0].text == t and got[0].metadata == {"k": i}
        assert got[0].value == f"value of {i}"
    # a search returns documents, each once, scored by their best passage
    q = embed([P.split(docs["b"], s, words)[3].embed])
    hits = store.search(collection, q, 30)[0]
    grouped = P.group(store, collection, hits, None)
    assert grouped[0].id == "b" and grouped[0].passages and grouped[0].passages[0]["index"] == 3
    assert grouped[0].metadata == {"k": "b"} and grouped[0].value == "value of b"
    assert len({h.id for h in grouped}) == len(grouped) == 3
    p0 = grouped[0].passages[0]
    assert docs["b"][p0["start"]:p0["end"]] == p0["text"]
    # replaced by a shorter one: no passage of the old version is left
    docs["b"] = document(3, paragraphs=3)
    write(store, collection, {"b": docs["b"]}, s)
    assert rows(store, collection) == expected_rows(docs, s)
    got = P.read(store, collection, "b")
    assert got is not None and got[0].text == docs["b"]
    # written again unchanged: nothing moves
    write(store, collection, {"b": docs["b"]}, s)
    assert rows(store, collection) == expected_rows(docs, s)
    # a passage's own id is not a document
    assert P.read(store, collection, P.part_id("e", "x", 1)) is None
    (row,) = [h for h in store.search(collection, q, 30)[0] if P.PART_KEY in h.metadata][:1]
    assert P.read(store, collection, row.id) is None
    # deleted: every passage goes
    P.remove(store, collection, ["a", "b"])
    assert rows(store, collection) == 1 and P.read(store, collection, "a") is None


class CutShort(Exception):
    pass


class Dying:
    """A store whose writes stop (as a process killed) after ``budget`` write calls."""

    def __init__(self, store: VectorStore, budget: int) -> None:
        self.store, self.budget = store, budget

    def _spend(self) -> None:
        if self.budget <= 0:
            raise CutShort
        self.budget -= 1

    def upsert(self, *a: Any, **k: Any) -> int:
        self._spend()
        return self.store.upsert(*a, **k)

    def delete(self, *a: Any, **k: Any) -> None:
        self._spend()
        self.store.delete(*a, **k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.mark.parametrize("budget", [0, 1, 2])
def test_a_write_cut_short_shows_the_old_document_whole_and_a_rerun_leaves_no_orphan(
        store: VectorStore, collection: str, budget: int) -> None:
    s = P.Settings(50, 8)
    store.create(collection, DIM)
    old = {"d": document(5)}
    write(store, collection, old, s)
    new = {"d": document(6, paragraphs=10)}
    planned = planned_of(new, s)
    dying: Any = Dying(store, budget)
    with pytest.raises(CutShort):  # new passages, the head, old passages: cut after `budget`
        P.commit(dying, collection, planned, embed(planned.embed_texts), None)
    got = P.read(store, collection, "d")
    # before the head is written the old document is whole, after it the new one
    assert got is not None and got[0].text == (old["d"] if budget < 2 else new["d"])
    whole = got[0].text
    # a search sees one version only: every passage it returns is of the text read back
    hits = store.search(collection, embed([whole[:40]]), 50)[0]
    for h in P.as_passages(store, collection, hits, None):
        p = h.passages[0] if h.passages else {}
        assert whole[p["start"]:p["end"]] == p["text"]
    # the same write run again: the new document whole, and nothing else stored
    write(store, collection, new, s)
    got = P.read(store, collection, "d")
    assert got is not None and got[0].text == new["d"]
    assert rows(store, collection) == expected_rows(new, s)


def test_a_delete_cut_short_reads_as_absent_and_a_rerun_finishes_it(
        store: VectorStore, collection: str) -> None:
    s = P.Settings(50, 8)
    store.create(collection, DIM)
    write(store, collection, {"d": document(7), "e": "short"}, s)
    dying: Any = Dying(store, 1)
    with pytest.raises(CutShort):  # the passages deleted, not the head
        P.remove(dying, collection, ["d"])
    assert P.read(store, collection, "d") is None  # no half document
    P.remove(store, collection, ["d"])
    assert rows(store, collection) == 1


def test_user_ids_and_metadata_cannot_take_the_layouts_names() -> None:
    s = P.Settings(50, 8)
    with pytest.raises(ValueError, match="§"):
        P.plan([("a§b", "text", None, {})], s, words, None)
    with pytest.raises(ValueError, match="_qkv"):
        P.plan([("a", "text", None, {"_qkv": 1})], s, words, None)
    with pytest.raises(OverflowError, match="10,000,000"):
        P.plan([("a", "x" * (P.MAX_DOCUMENT_BYTES + 1), None, {})], s, words, None)


def test_a_short_document_is_stored_as_it_always_was(store: VectorStore,
                                                     collection: str) -> None:
    store.create(collection, DIM)
    write(store, collection, {"s": "a short text"}, P.Settings(50, 8))
    (it,) = store.get(collection, ["s"])
    assert isinstance(it, Item) and it.text == "a short text" and it.metadata == {"k": "s"}


def test_new_rows_are_what_a_first_commit_writes(tmp_path: Path) -> None:
    """A bulk import's rows (``new_rows``: documents stored for the first time) are the rows
    ``commit`` writes into an empty collection, the same ids, texts, metadata and vectors,
    and read back as the documents."""
    from index import FaissStore

    s = P.Settings(50, 8)
    docs = {"a": document(3), "b": document(4), "short": "just a few words"}
    planned = planned_of(docs, s)
    vectors = embed(planned.embed_texts)
    made = P.new_rows(planned, vectors)
    assert len(made) == expected_rows(docs, s) > len(docs)
    store = FaissStore(tmp_path)
    stored = {}
    for name in ("committed", "imported"):
        store.create(name, DIM)
        store.set_passages(name, s.to_dict())
        if name == "committed":
            P.commit(store, name, planned, vectors, None)
        else:
            store.upsert(name, made)
        stored[name] = {it.id: (it.text, it.value, it.metadata, it.vector.tolist())
                        for page in store.scan(name) for it in page}
        for i, t in docs.items():
            got = P.read(store, name, i)
            assert got is not None and got[0].text == t, (name, i)
    assert stored["committed"] == stored["imported"]


def test_a_short_ascii_paragraph_is_one_passage_without_the_tokenizer() -> None:
    """The shortcut for one short ASCII paragraph makes what the counting path makes, and
    its bound holds for the shipped byte-level BPE tokenizer: no ASCII text has more tokens
    than bytes, plus the prefix space and ``<s>``."""
    import string
    from pathlib import Path as _Path

    from tokenizers import Tokenizer

    rng = random.Random(7)
    s = P.Settings(64, 8)

    def never(texts: Sequence[str]) -> list[int]:
        raise AssertionError(f"counted {texts!r}")

    texts = ["a caption of a dog", "  padded on both sides \n", "one line\nand another",
             "x" * 62, "Ends with punctuation. Two sentences!"]
    texts += ["".join(rng.choices(string.printable[:94] + " ", k=rng.randint(1, 62)))
              for _ in range(300)]
    for t in texts:
        if not t.strip() or "\n\n" in t or P._blocks(t)[0].heading or len(P._blocks(t)) != 1:
            continue
        assert P.split(t, s, never) == P._split_blocks(t, P._blocks(t), s, words), t
    root = _Path(__file__).resolve().parents[2]
    tok = Tokenizer.from_file(str(root / "models/encoder-default/tokenizer.json"))
    count = P.token_counter(tok)
    worst = ["".join(rng.choices(string.printable, k=rng.randint(1, 300)))
             for _ in range(3000)]
    assert all(n <= len(t) + 2 for t, n in zip(worst, count(worst), strict=True))


def test_plan_counts_a_batch_of_documents_in_one_call_and_cuts_as_split_does() -> None:
    """:func:`P.plan` counts the blocks of all its documents in one call (a call a document
    gave up and took back the GIL each time in a bulk job's planning thread); the passages
    are the ones :func:`P.split` cuts a document at a time. A paragraph over the size is
    cut into sentences, counted in a call of its own."""
    s = P.Settings(50, 8)
    docs = {f"d{i}": document(i, paragraphs=3 + i % 4, size=30) for i in range(12)}
    docs |= {"short": "a caption of a dog", "blank": "  \n\n ", "same": document(3, 6, 30)}
    calls: list[int] = []

    def counted(texts: Sequence[str]) -> list[int]:
        calls.append(len(texts))
        return words(texts)

    planned = P.plan([(i, t, None, {}) for i, t in docs.items()], s, counted, None)
    assert planned.passages == [P.split(t, s, words) for t in docs.values()]
    blocks = {t[b.start:b.end] for d in docs.values() if d.strip() and d != "a caption of a dog"
              for t in [d] for b in P._blocks(t)}
    assert calls[0] == len(blocks) > len(docs)  # each block once, the repeated document's too
    over = sum(1 for b in blocks if words([b])[0] > s.size)
    assert over > 0 and len(calls) == 1 + over


@pytest.mark.parametrize("seed", range(5))
def test_a_documents_version_is_the_hash_of_its_json_as_before(seed: int) -> None:
    """:func:`P.version` writes the settings' and encoder's JSON once, not once a
    document: the bytes hashed, and so every stored version, are what they were."""
    import hashlib
    import json

    from index.store import EncoderInfo

    rnd = random.Random(seed)

    def old(text: str, value: str | None, meta: dict, st: P.Settings,
            enc: EncoderInfo | None) -> str:
        h = hashlib.blake2b(digest_size=6)
        h.update(json.dumps([text, value, meta, st.to_dict(), enc.to_dict() if enc else None],
                            sort_keys=True, ensure_ascii=False).encode())
        return h.hexdigest()

    words = ["état", "naïve", "日本", 'a"b', "x\ny", "plain", "\u2028", "😀"]
    for _ in range(50):
        text = " ".join(rnd.choices(words, k=rnd.randint(1, 6)))
        value = rnd.choice([None, "", "a value", "ünï"])
        meta = {rnd.choice(words): rnd.choice([1, 2.5, None, True, "s", [1, "a"],
                                               {"z": 1, "a": 2}])
                for _ in range(rnd.randint(0, 4))}
        st = P.Settings.sized(rnd.choice([64, 128, 256]))
        enc = rnd.choice([None, EncoderInfo("e", "f" * 16, 256), EncoderInfo("é", "0", 64)])
        assert P.version(text, value, meta, st, enc) == old(text, value, meta, st, enc)


def _windowed_doc() -> str:
    """Four paragraphs of 12 words (each a passage at size 20), one rare word in each of the
    first, second and fourth: zebra, quokka, narwhal."""
    rng = random.Random(7)
    paras = []
    for i, rare in enumerate(["zebra", "quokka", None, "narwhal"]):
        filler = [f"f{i}w{rng.randint(0, 5)}" for _ in range(11)]
        paras.append(" ".join([*filler, rare or f"f{i}w9"]) + ".")
    return "\n\n".join(paras)


def _bm25_rows(store: VectorStore, collection: str, query: str) -> set[str]:
    hits = store.search(collection, embed([query]), 20, consistency="Strong",
                        query_text=[query], mode="bm25")[0]
    return {h.id for h in hits}


def test_a_hybrid_collections_passage_is_found_by_its_neighbours_terms(
        store: VectorStore, collection: str) -> None:
    """In a hybrid collection each passage of a long document keeps the BM25 terms of its
    window (itself twice and the passage on each side): a word of the second passage finds
    the first three, not the fourth, and the second first; the store's scan gives the terms
    back, and a copy of the rows searches alike. Planned without keywords (a dense
    collection's way), a word finds its own passage only."""
    if not store.bm25_available():
        pytest.skip("this store has no BM25 (Milvus < 2.5)")
    s = P.Settings(20, 4)
    text = _windowed_doc()
    docs = [("long", text, None, {}), ("other", "zebra alone here.", None, {})]
    planned = P.plan(docs, s, words, None, keywords=True)
    assert [len(ps) for ps in planned.passages] == [4, 1]
    rows = P.new_rows(planned, embed(planned.embed_texts))
    windows = {it.id: it.keywords for it in rows}
    assert windows["other"] is None  # a document of one passage: its text's own terms
    ids = {i: P.part_id("long", planned.versions[0], i) if i else "long" for i in range(4)}
    assert windows[ids[1]] is not None and windows[ids[1]].split().count("zebra") == 1
    assert windows[ids[1]].split().count("quokka") == 2  # its own terms count twice
    assert "narwhal" not in windows[ids[1]].split() and "quokka" not in windows[ids[3]].split()
    store.create(collection, DIM, hybrid=True)
    store.set_passages(collection, s.to_dict())
    assert P.commit(store, collection, planned, embed(planned.embed_texts), None) == 2
    assert _bm25_rows(store, collection, "quokka") == {ids[0], ids[1], ids[2]}
    best = store.search(collection, embed(["quokka"]), 1, consistency="Strong",
                        query_text=["quokka"], mode="bm25")[0]
    assert [h.id for h in best] == [ids[1]]  # the passage holding it, above its neighbours
    assert _bm25_rows(store, collection, "narwhal") == {ids[2], ids[3]}
    assert _bm25_rows(store, collection, "zebra") == {ids[0], ids[1], "other"}
    scanned = {it.id: it for page in store.scan(collection) for it in page}
    assert all(scanned[i].keywords == windows[i] for i in ids.values())
    copy = f"{collection}_copy"
    store.create(copy, DIM, hybrid=True)
    try:
        store.upsert(copy, list(scanned.values()))
        assert _bm25_rows(store, copy, "quokka") == {ids[0], ids[1], ids[2]}
    finally:
        store.drop(copy)
    plain = P.plan(docs, s, words, None)
    assert all(it.keywords is None for it in P.new_rows(plain, embed(plain.embed_texts)))
    store.drop(collection)
    store.create(collection, DIM, hybrid=True)
    P.commit(store, collection, plain, embed(plain.embed_texts), None)
    assert _bm25_rows(store, collection, "quokka") == {ids[1]}


def test_window_terms_are_cut_to_a_stores_text_field() -> None:
    """A passage's window of long passages is cut at a term to what a text field holds."""
    from index.store import MAX_TEXT_BYTES

    text = "\n\n".join(" ".join(f"w{p}x{i}z" for i in range(6000)) for p in range(3))
    spans = [P.Passage(a, a + len(x), x) for a, x in
             zip([0, *[m + 2 for m in _ends(text)]], text.split("\n\n"), strict=True)]
    terms = P.window_terms(text, spans)
    assert all(t is not None and len(t.encode()) <= MAX_TEXT_BYTES for t in terms)
    whole = set(text.split())
    for t in terms:  # cut near the limit, at a term: the last one is whole
        assert t is not None and len(t.encode()) > MAX_TEXT_BYTES - 10
        assert t.split()[-1] in whole  # a term cut short has lost its "z"


def _ends(text: str) -> list[int]:
    return [i for i in range(len(text)) if text.startswith("\n\n", i)]
