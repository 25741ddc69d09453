"""Long documents as passages: how a document of any length is cut, laid out as rows, and
written, read, deleted and searched as one whole.

**Cutting** (:func:`split`). A document is cut where its structure allows: at blank lines
(paragraphs) and Markdown headings; a paragraph longer than a passage is cut between
sentences, and a sentence longer than a passage into windows of words that overlap by
``overlap`` tokens (the last resort). A paragraph is a passage of its own (with the heading
above it, if any) unless the passage before it holds fewer than ``pack`` tokens (a short
line), never more than ``size`` tokens together and never across a heading. The passages'
spans cover the text exactly, in order (the whitespace between two passages belongs to the
first), so the whole text is their concatenation; what is embedded is the span's text
after the heading it sits under.

**Rows.** Passage 0 is the *head*: the row with the document's own id, holding its first
passage, its ``value`` and, in ``metadata["_qkv"]``, the document's version (``s``, a hash of
its content), its passage count (``n``), passage 0's character span (``o``) and the version
it replaced (``prev``). Passage i ≥ 1 is the row ``{id}§{s}§{i}`` with
``metadata["_qkv_p"] = [id, s, i, start, end]``. Every passage carries the document's
metadata, so filters and tenants apply to passages as to short documents. A document of
one passage with nothing to clean up is stored exactly as a short one always was.

**BM25 windows** (:func:`window_terms`). In a hybrid collection each passage of a document
of several is indexed for BM25 with its neighbours: its own terms twice and the passage's on
each side once (``Item.keywords``; the stores index them in place of the text's). A query
whose words a cut set apart still meets them in one row, and the passage holding a word
ranks above the neighbours that only see it. Chosen on the dev sets of
bench/long_documents.py and the dev collections with long texts (SciTLDR, Jargon), in a
throwaway run of the same rows through the in-process BM25 and the service's own dense
lists and fusion (2026-12-05, AVX2-only AMD EPYC): hybrid nDCG@10 ÷ whole-document BM25,
the passage alone against its window without and with itself twice, on SciTLDR 0.975 /
0.983 / 0.986, Jargon 1.143 / 1.154 / 1.161, the four joined sets' mean 1.198 / 1.193 /
1.208 (manpages, the one set that loses: 1.355 / 1.306 / 1.330); BM25 alone on SciTLDR 0.987
/ 0.999 / 0.992. The public test sets, not chosen on: SciFact 1.141 / 1.159 / 1.157,
Cranfield 1.013 / 1.034 / 1.025. The rows are what a reader gets back as passages; only what BM25
reads of them changes.

**Atomic from a reader's view** (:func:`commit`, :func:`remove`). An upsert writes the new
version's passages 1..n-1 first, then the head (the commit: one row), then deletes the old
version's passages. A reader keeps a passage only when its document's head names its
version, so it sees the old document whole or the new one whole. A kill -9 leaves either
uncommitted passages (a rerun of the same write makes the same ids and commits them) or the
old version's (the head's ``prev``: the next write of the document deletes them). A delete
removes the passages first and the head last; a document whose head is there but not all
its passages is being deleted, and reads as absent; a rerun finishes it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from index.filters import Condition
from index.hybrid.analysis import analyzed, fit_terms
from index.store import MAX_ID_BYTES, MAX_TEXT_BYTES, EncoderInfo, Hit, Item, VectorStore

HEAD_KEY = "_qkv"  # on a head: {"s", "n", "o", "prev"}
PART_KEY = "_qkv_p"  # on passage i >= 1: [document id, version, i, start, end]
RESERVED_PREFIX = "_qkv"  # metadata keys the caller may not use
SEP = "§"
MAX_DOCUMENT_BYTES = 10_000_000
SUFFIX_BYTES = 24  # what a passage id adds to its document's: §, 12 hex, §, up to 8 digits
DEFAULT_SIZE = 200  # tokens (measured in bench/long_documents.py)
DEFAULT_OVERLAP = 32
# a paragraph is a passage of its own unless the one before is shorter than this (a list
# item, a short line): on the dev sets of bench/long_documents.py paragraphs alone beat
# paragraphs packed up to 48 or 200 tokens (dense 1.14 x BM25 on the mean against 0.96 and
# 0.83, hybrid 1.19 against 1.12 and 1.07)
DEFAULT_PACK = 8
ROWS_PER_CALL = 512
MAX_PASSAGES_SEARCHED = 16_384  # Milvus' largest top k
HEADS_MARGIN = 5  # heads read beyond the documents a search asks for (some may be stale)
Count = Callable[[Sequence[str]], list[int]]  # token counts of texts

_BLANK = re.compile(r"\n[ \t]*\n\s*")
_HEADING = re.compile(r"^#{1,6}[ \t]+\S")
_SENTENCE = re.compile(r"(?<=[.!?;:])[\"')\]]*\s+(?=\S)")
_WORD = re.compile(r"\S+")


def token_counter(tokenizer: Any) -> Count:
    """The token counts of texts by an encoder's ``tokenizer`` (a ``tokenizers.Tokenizer``):
    what cuts passages to size. Without offsets (``encode_batch_fast``): counting is a tenth
    of a bulk job's encoding threads, and offsets were a third of it."""
    def count(texts: Sequence[str]) -> list[int]:
        return [len(e) for e in tokenizer.encode_batch_fast(list(texts))]
    return count


@dataclass(frozen=True)
class Settings:
    """A collection's chunking: passages of at most ``size`` tokens; ``overlap`` tokens
    shared between windows cut out of one long sentence."""

    size: int = DEFAULT_SIZE
    overlap: int = DEFAULT_OVERLAP
    pack: int = DEFAULT_PACK  # a passage of fewer tokens takes the next paragraph too

    def __post_init__(self) -> None:
        if not 16 <= self.size <= 4096:
            raise ValueError(f"passage size must be 16..4096 tokens, got {self.size}")
        if not 0 <= self.overlap < self.size // 2:
            raise ValueError(f"passage overlap must be 0..{self.size // 2 - 1} tokens (under "
                             f"half the size), got {self.overlap}")
        if self.pack < 0:
            raise ValueError(f"passage packing must be 0 tokens or more, got {self.pack}")

    @classmethod
    def sized(cls, size: int, overlap: int | None = None, pack: int | None = None
              ) -> Settings:
        """``size`` tokens, ``overlap`` and ``pack`` (None: the defaults, at most a quarter
        of the size)."""
        return cls(size, min(DEFAULT_OVERLAP, size // 4) if overlap is None else overlap,
                   min(DEFAULT_PACK, size // 4) if pack is None else pack)

    @classmethod
    def default(cls, window: int) -> Settings:
        """The defaults for an encoder that reads ``window`` tokens of a text: passages of
        :data:`DEFAULT_SIZE` tokens, or of ``window`` where it reads fewer."""
        return cls.sized(min(DEFAULT_SIZE, window))

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "overlap": self.overlap, "pack": self.pack}

    @classmethod
    def of(cls, d: dict[str, Any] | None) -> Settings | None:
        """A collection's settings from its record (None: a collection without chunking)."""
        return None if not d else cls(int(d["size"]), int(d["overlap"]),
                                      int(d.get("pack", d["size"])))


@dataclass(frozen=True)
class Passage:
    """``text[start:end]`` of its document; ``embed`` what is embedded for it."""

    start: int
    end: int
    embed: str


# cutting
@dataclass
class _Block:
    start: int
    end: int
    heading: bool


def _blocks(text: str) -> list[_Block]:
    """Paragraphs (between blank lines), with each Markdown heading line a block of its own."""
    out: list[_Block] = []
    pos = 0
    for m in [*_BLANK.finditer(text), None]:
        end = m.start() if m else len(text)
        para_start = pos
        line_start = pos
        for line in text[pos:end].split("\n"):
            line_end = line_start + len(line)
            if _HEADING.match(line.strip()):
                if line_start > para_start:
                    out.append(_Block(para_start, line_start, False))
                out.append(_Block(line_start, line_end, True))
                para_start = line_end + 1
            line_start = line_end + 1
        if para_start < end and text[para_start:end].strip():
            out.append(_Block(para_start, end, False))
        pos = m.end() if m else len(text)
    return out


def _pieces(text: str, start: int, end: int, tokens: int, s: Settings, count: Count
            ) -> list[tuple[int, int, int]]:
    """A block of ``tokens`` tokens as (start, end, tokens) pieces of at most ``s.size``:
    itself, else its sentences, else windows of words over a sentence too long."""
    if tokens <= s.size:
        return [(start, end, tokens)]
    cuts = [start] + [start + m.end() for m in _SENTENCE.finditer(text[start:end])] + [end]
    spans = [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    counts = count([text[a:b] for a, b in spans]) if len(spans) > 1 else [tokens]
    out: list[tuple[int, int, int]] = []
    for (a, b), n in zip(spans, counts, strict=True):
        if n <= s.size:
            out.append((a, b, n))
            continue
        words = [(a + m.start(), a + m.end()) for m in _WORD.finditer(text[a:b])]
        per = max(1, round(len(words) * s.size / n))  # words in one window of size tokens
        step = max(1, per - round(len(words) * s.overlap / n))
        for i in range(0, len(words), step):
            w = words[i:i + per]
            out.append((w[0][0], w[-1][1], round(n * len(w) / len(words))))
            if i + per >= len(words):
                break
    return out


def split(text: str, settings: Settings, count: Count) -> list[Passage]:
    """Cut ``text`` into passages of at most ``settings.size`` tokens (``count`` gives the
    token counts of texts); their spans cover ``text``, in order. A text with nothing but
    whitespace is one passage."""
    blocks = _layout(text, settings)
    if isinstance(blocks, Passage):
        return [blocks]
    return _split_blocks(text, blocks, settings, count)


def _layout(text: str, settings: Settings) -> Passage | list[_Block]:
    """The text's one passage where it needs no counting, else its blocks (to count)."""
    blocks = _blocks(text)
    if not blocks:
        return Passage(0, len(text), text)
    if len(blocks) == 1 and not blocks[0].heading and text.isascii() \
            and len(text) + 2 <= settings.size:
        # one paragraph that cannot hold more tokens than it has bytes, a prefix space and
        # ``<s>`` (byte-level BPE: a token is at least one byte; lower-casing and NFKC keep
        # ASCII as it is) is one passage: what the counting path makes of it, without the tokenizer
        # (a translation memory's sentences, a caption: most short documents)
        body = text[blocks[0].start:blocks[0].end].strip()
        return Passage(0, len(text), body or text)
    return blocks


class _Known:
    """``count`` that answers texts counted before from memory: :func:`plan` counts every
    document's blocks in one call. Called once a document (8,758 calls in 100,000 of
    ``bench/ingest.py``'s documents) in a job's planning thread, beside the encoder's and the
    store's threads, counting was 6.4 s of that thread's time in a ``qkv index`` of them
    with a free encoder (py-spy, AVX2-only AMD EPYC): each call gives the GIL up to
    tokenize and waits to take it back. Once a batch (75 calls): 0.5 s; the process's CPU
    55.2 -> 54.0 s (one run each, throwaway)."""

    def __init__(self, count: Count) -> None:
        self.count = count
        self.known: dict[str, int] = {}

    def learn(self, texts: Sequence[str]) -> None:
        new = [t for t in dict.fromkeys(texts) if t not in self.known]
        if new:
            self.known.update(zip(new, self.count(new), strict=True))

    def __call__(self, texts: Sequence[str]) -> list[int]:
        self.learn(texts)
        return [self.known[t] for t in texts]


def _split_blocks(text: str, blocks: list[_Block], settings: Settings, count: Count
                  ) -> list[Passage]:
    counts = count([text[b.start:b.end] for b in blocks])
    groups: list[tuple[int, int, str]] = []  # (start, end, heading above it)
    heading, cur, cur_tokens = "", None, 0
    under_heading = False  # the passage so far is a heading: its paragraph joins it
    for b, n in zip(blocks, counts, strict=True):
        if b.heading:
            if cur is not None:
                groups.append((*cur, heading))
            heading = text[b.start:b.end].strip().lstrip("#").strip()
            cur, cur_tokens, under_heading = (b.start, b.end), n, True
            continue
        for j, (a, e, k) in enumerate(_pieces(text, b.start, b.end, n, settings, count)):
            overlapping = cur is not None and a < cur[1]
            full = cur_tokens + k > settings.size or (
                j == 0 and cur_tokens >= settings.pack and not under_heading)
            under_heading = False
            if cur is not None and (full or overlapping):
                groups.append((*cur, heading))
                cur = None
            if cur is None:
                cur, cur_tokens = (a, e), k
            else:
                cur, cur_tokens = (cur[0], e), cur_tokens + k
    if cur is not None:
        groups.append((*cur, heading))
    out: list[Passage] = []
    for j, (a, e, head) in enumerate(groups):
        start = 0 if j == 0 else max(a, out[-1].end)  # windows overlap: spans may not
        end = len(text) if j == len(groups) - 1 else max(start, groups[j + 1][0])
        body = text[a:e].strip()
        if head and not body.startswith("#"):
            body = f"{head}\n{body}"
        out.append(Passage(start, end, body or text[start:end]))
    return out


# rows
_VERSION_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False)


def version(doc_text: str, value: str | None, metadata: dict[str, Any], settings: Settings,
            encoder: EncoderInfo | None) -> str:
    """A document's version: the hash of everything its rows are made of, the JSON of
    ``[doc_text, value, metadata, settings, encoder]`` (keys sorted), its last two written
    once a job (:func:`_version_tail`): the same bytes, a third of the time on short
    documents (the versions of 100,000 were 8 % of ``qkv index``'s Python time)."""
    h = hashlib.blake2b(digest_size=6)
    enc = _VERSION_JSON.encode
    blob = f"[{enc(doc_text)}, {enc(value)}, {enc(metadata)}, {_version_tail(settings, encoder)}]"
    h.update(blob.encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=64)
def _version_tail(settings: Settings, encoder: EncoderInfo | None) -> str:
    return ", ".join(_VERSION_JSON.encode(x) for x in (
        settings.to_dict(), encoder.to_dict() if encoder else None))


def part_id(doc_id: str, ver: str, i: int) -> str:
    return f"{doc_id}{SEP}{ver}{SEP}{i}"


def is_reserved(key: str) -> bool:
    return key.startswith(RESERVED_PREFIX)


def user_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A row's metadata without qkv's own keys."""
    if not any(is_reserved(k) for k in metadata):
        return metadata
    return {k: v for k, v in metadata.items() if not is_reserved(k)}


def check_document(doc_id: str, text: str, metadata: dict[str, Any]) -> None:
    """A document a collection with passages can take (``ValueError`` naming what not)."""
    if SEP in doc_id:
        raise ValueError(f"document id {doc_id[:40]!r} contains {SEP!r}, which a collection "
                         "with passages keeps for its passages' ids")
    if len(doc_id.encode()) > MAX_ID_BYTES - SUFFIX_BYTES:
        raise ValueError(f"document id {doc_id[:40]!r}... is longer than "
                         f"{MAX_ID_BYTES - SUFFIX_BYTES} bytes (a collection with passages "
                         "keeps the rest for its passages' ids)")
    if len(text.encode()) > MAX_DOCUMENT_BYTES:
        raise OverflowError(f"document {doc_id[:40]!r}: text is longer than "
                            f"{MAX_DOCUMENT_BYTES:,} bytes")
    bad = [k for k in metadata if is_reserved(k)]
    if bad:
        raise ValueError(f"document {doc_id[:40]!r}: metadata keys starting with "
                         f"{RESERVED_PREFIX!r} are qkv's own ({bad[0]!r})")


@dataclass
class Head:
    """What a head row says of its document (a short document: one passage, version '')."""

    version: str
    n: int
    span: tuple[int, int] | None
    prev: tuple[str, int] | None

    @classmethod
    def of(cls, item_or_hit: Item | Hit) -> Head:
        d = item_or_hit.metadata.get(HEAD_KEY)
        if not isinstance(d, dict):
            return cls("", 1, None, None)
        prev = d.get("prev")
        return cls(str(d.get("s", "")), int(d.get("n", 1)),
                   tuple(d["o"]) if d.get("o") else None,  # type: ignore[arg-type]
                   (str(prev[0]), int(prev[1])) if prev else None)

    def part_ids(self, doc_id: str) -> list[str]:
        """The ids of passages 1..n-1 of this version and of the one it replaced."""
        ids = [part_id(doc_id, self.version, i) for i in range(1, self.n)]
        if self.prev is not None and self.prev[0] != self.version:
            ids += [part_id(doc_id, self.prev[0], i) for i in range(1, self.prev[1])]
        return ids


@dataclass
class Planned:
    """Documents cut into passages, before their passages are embedded."""

    ids: list[str]
    texts: list[str]
    values: list[str | None]
    metadata: list[dict[str, Any]]
    versions: list[str]
    passages: list[list[Passage]]
    embed_texts: list[str] = field(default_factory=list)  # every passage, in order
    # a hybrid collection's: each passage of a document of several keeps the BM25 terms of
    # its window, itself and its neighbours (:func:`window_terms`)
    keywords: bool = False

    def rows(self) -> int:
        return len(self.embed_texts)


def plan(docs: Sequence[tuple[str, str, str | None, dict[str, Any]]], settings: Settings,
         count: Count, encoder: EncoderInfo | None, keywords: bool = False) -> Planned:
    """Cut ``docs`` ((id, text, value, metadata), the last of duplicate ids winning) into
    passages; ``ValueError``/``OverflowError`` for a document a collection cannot take.
    ``keywords``: for a hybrid collection (:attr:`Planned.keywords`)."""
    last = {d[0]: d for d in docs}
    p = Planned([], [], [], [], [], [], keywords=keywords)
    for doc_id, text, _, meta in last.values():
        check_document(doc_id, text, meta)
    layouts = [_layout(d[1], settings) for d in last.values()]
    known = _Known(count)
    known.learn([text[b.start:b.end] for (_, text, _, _), blocks in zip(last.values(), layouts,
                                                                        strict=True)
                 if not isinstance(blocks, Passage) for b in blocks])
    for (doc_id, text, value, meta), blocks in zip(last.values(), layouts, strict=True):
        parts = [blocks] if isinstance(blocks, Passage) else \
            _split_blocks(text, blocks, settings, known)
        p.ids.append(doc_id)
        p.texts.append(text)
        p.values.append(value)
        p.metadata.append(meta)
        p.versions.append(version(text, value, meta, settings, encoder))
        p.passages.append(parts)
        p.embed_texts.extend(x.embed for x in parts)
    return p


def _heads(store: VectorStore, collection: str, ids: Sequence[str], tenant: str | None,
           consistency: str = "Strong", brief: bool = False) -> dict[str, Item]:
    out: dict[str, Item] = {}
    for a in range(0, len(ids), ROWS_PER_CALL):
        for it in store.get(collection, list(ids[a:a + ROWS_PER_CALL]), tenant, consistency,
                            brief):
            out[it.id] = it
    return out


def _chunks(xs: Sequence[Any]) -> list[Sequence[Any]]:
    return [xs[a:a + ROWS_PER_CALL] for a in range(0, len(xs), ROWS_PER_CALL)]


def _rows(p: Planned, j: int, row: int, vectors: np.ndarray, tenant: str | None,
          prev: tuple[str, int] | None) -> tuple[Item, list[Item]]:
    """Planned document ``j``'s head and other passages, its vectors from ``row`` on
    (``prev``: the version it replaces and its passage count, named in the head)."""
    doc_id, ver, passages, meta = p.ids[j], p.versions[j], p.passages[j], p.metadata[j]
    text = p.texts[j]
    terms = window_terms(text, passages) if p.keywords else [None] * len(passages)
    parts = [Item(part_id(doc_id, ver, i), vectors[row + i], text[x.start:x.end], None,
                  {**meta, PART_KEY: [doc_id, ver, i, x.start, x.end]}, tenant, terms[i])
             for i, x in enumerate(passages) if i > 0]
    hm = dict(meta)
    if len(passages) > 1 or prev is not None:
        hm[HEAD_KEY] = {"s": ver, "n": len(passages), "o": [passages[0].start, passages[0].end],
                        "prev": list(prev) if prev else None}
    head = Item(doc_id, vectors[row], text[passages[0].start:passages[0].end], p.values[j], hm,
                tenant, terms[0])
    return head, parts


def window_terms(text: str, passages: Sequence[Passage]) -> list[str | None]:
    """What a hybrid collection's BM25 indexes for each passage of ``text``: for a document
    of several, the analysed terms (:func:`index.hybrid.analysis.analyzed`) of the passage
    twice and of the passage on each side of it once, so a query whose terms a cut set
    apart still finds the passages around the cut, and the passage that holds a term ranks
    above its neighbours that only see it (cut at a term to
    :data:`index.store.MAX_TEXT_BYTES`: the neighbours' terms come last and go first); for a
    document of one passage None (its text's own, as a short document's). Chosen on
    bench/long_documents.py's sets: see the module docstring."""
    if len(passages) < 2:
        return [None] * len(passages)
    terms = [analyzed(text[x.start:x.end]) for x in passages]
    windows: list[str | None] = []
    for i, own in enumerate(terms):
        near = [terms[j] for j in (i - 1, i + 1) if 0 <= j < len(terms)]
        windows.append(fit_terms(" ".join(t for t in (own, own, *near) if t), MAX_TEXT_BYTES))
    return windows


def new_rows(p: Planned, vectors: np.ndarray, tenant: str | None = None) -> list[Item]:
    """The rows of planned documents that no earlier version of is stored (a collection a
    bulk import fills): each one's passages, then its head, as :func:`commit` writes them."""
    out: list[Item] = []
    row = 0
    for j in range(len(p.ids)):
        head, parts = _rows(p, j, row, vectors, tenant, None)
        out += [*parts, head]
        row += len(p.passages[j])
    return out


def commit(store: VectorStore, collection: str, p: Planned, vectors: np.ndarray,
           encoder: EncoderInfo | None, tenant: str | None = None,
           written: Callable[[list[Item], list[str]], None] | None = None) -> int:
    """Write planned documents with their passages' ``vectors`` (in ``p.embed_texts``
    order): new passages, then the heads, then the old versions' passages deleted. A
    document whose head already names this version is left as it is (a rerun), but for
    what an interrupted write left behind. ``written(rows, deleted ids)`` is told what was
    written and deleted (a copy being made of the collection follows it). Returns the
    number of documents."""
    old = _heads(store, collection, p.ids, tenant)
    parts: list[Item] = []
    heads: list[Item] = []
    stale: list[str] = []
    row = 0
    for j, doc_id in enumerate(p.ids):
        ver, passages = p.versions[j], p.passages[j]
        rows = range(row, row + len(passages))
        row += len(passages)
        before = Head.of(old[doc_id]) if doc_id in old else None
        if before is not None and before.version == ver and before.n == len(passages):
            if before.prev is not None and before.prev[0] != ver:  # a write cut short
                stale += [part_id(doc_id, before.prev[0], i) for i in range(1, before.prev[1])]
            continue
        prev = (before.version, before.n) if before is not None and before.n > 1 else None
        if before is not None and before.prev is not None:
            stale += [part_id(doc_id, before.prev[0], i) for i in range(1, before.prev[1])
                      if before.prev[0] != ver]
        head, more = _rows(p, j, rows.start, vectors, tenant, prev)
        parts += more
        heads.append(head)
        if prev is not None and prev[0] != ver:
            stale += [part_id(doc_id, prev[0], i) for i in range(1, prev[1])]
    for chunk in _chunks(parts):
        store.upsert(collection, list(chunk), encoder)
    for chunk in _chunks(heads):
        store.upsert(collection, list(chunk), encoder)
    for chunk in _chunks(stale):
        store.delete(collection, list(chunk), tenant)
    if written is not None:
        written(parts + heads, stale)
    return len(p.ids)


def remove(store: VectorStore, collection: str, ids: Sequence[str], tenant: str | None = None
           ) -> list[str]:
    """Delete documents with all their passages: the passages first, the heads last. Returns
    every row id deleted."""
    heads = _heads(store, collection, list(dict.fromkeys(ids)), tenant)
    parts = [i for doc_id, h in heads.items() for i in Head.of(h).part_ids(doc_id)]
    for chunk in _chunks(parts):
        store.delete(collection, list(chunk), tenant)
    store.delete(collection, list(ids), tenant)
    return parts + list(ids)


def read(store: VectorStore, collection: str, doc_id: str, tenant: str | None = None
         ) -> tuple[Item, int] | None:
    """The whole document ``doc_id`` (its text the concatenation of its passages, its
    metadata the caller's, its vector passage 0's) and its passage count; None when absent
    or being deleted (a passage of its version missing). A passage's own id is no
    document's."""
    got = read_many(store, collection, [doc_id], tenant)
    return got[0] if got else None


def read_many(store: VectorStore, collection: str, ids: Sequence[str],
              tenant: str | None = None) -> list[tuple[Item, int]]:
    """The whole documents of ``ids`` that exist and are not being deleted, in that order,
    each with its passage count (see :func:`read`); a few reads for them all."""
    heads = _heads(store, collection, [i for i in dict.fromkeys(ids) if SEP not in i], tenant)
    told = {doc_id: Head.of(head) for doc_id, head in heads.items()}
    wanted = [part_id(doc_id, h.version, i) for doc_id, h in told.items()
              for i in range(1, h.n)]
    parts = {it.id: it for chunk in _chunks(wanted)
             for it in store.get(collection, list(chunk), tenant)}
    out: list[tuple[Item, int]] = []
    for doc_id in ids:
        head, h = heads.get(doc_id), told.get(doc_id)
        if head is None or h is None:
            continue
        more = [parts.get(part_id(doc_id, h.version, i)) for i in range(1, h.n)]
        if any(p is None for p in more):  # being deleted
            continue
        text = head.text + "".join(p.text for p in more if p is not None)
        out.append((Item(head.id, head.vector, text, head.value, user_metadata(head.metadata),
                         head.tenant), h.n))
    return out


def count_filter() -> Condition:
    """The filter that counts documents (heads) among a collection's rows."""
    return Condition(PART_KEY, "exists", False)


# searching
def depth(documents: int, limit: int) -> int:
    """How many passages to search for ``documents`` documents."""
    return min(limit, max(documents * 4, documents + 20))


def _valid(store: VectorStore, collection: str, hits: Sequence[Hit], tenant: str | None,
           consistency: str, documents: int | None = None
           ) -> tuple[list[tuple[Hit, str, int, int, int]], dict[str, Hit | Item]]:
    """Each passage hit whose version its document's head names, with its document's id,
    its index and span; and the heads (those among the hits, the others fetched: for the
    first ``documents`` documents and a few more in one call, the rest only when some of
    those were left out). A passage of another version is left out: an unfinished write,
    or the old version of a replaced document."""
    heads: dict[str, Hit | Item] = {h.id: h for h in hits
                                    if not isinstance(h.metadata.get(PART_KEY), list)}
    order = list(dict.fromkeys(str(h.metadata[PART_KEY][0]) if isinstance(
        h.metadata.get(PART_KEY), list) else h.id for h in hits))
    need = [d for d in order if d not in heads]
    first = need if documents is None else [
        d for d in order[:documents + HEADS_MARGIN] if d not in heads]
    if first:
        heads.update(_heads(store, collection, first, tenant, consistency, brief=True))
    out = _checked(hits, heads)
    rest = [d for d in need if d not in set(first)]
    if rest and documents is not None and len({x[1] for x in out}) < documents:
        heads.update(_heads(store, collection, rest, tenant, consistency, brief=True))
        out = _checked(hits, heads)
    return out, heads


def _checked(hits: Sequence[Hit], heads: dict[str, Hit | Item]
             ) -> list[tuple[Hit, str, int, int, int]]:
    """The hits whose document's head is known and names their version."""
    out = []
    for h in hits:
        part = h.metadata.get(PART_KEY)
        if isinstance(part, list):
            doc_id, ver, i, a, b = str(part[0]), str(part[1]), int(part[2]), part[3], part[4]
            head = heads.get(doc_id)
            if head is None or Head.of(head).version != ver:
                continue
            out.append((h, doc_id, i, int(a), int(b)))
        else:
            span = Head.of(h).span or (0, len(h.text))
            out.append((h, h.id, 0, int(span[0]), int(span[1])))
    return out


def _passage(h: Hit, i: int, a: int, b: int) -> dict[str, Any]:
    return {"index": i, "start": a, "end": b, "score": h.score, "text": h.text,
            "sources": h.sources or {}}


def group(store: VectorStore, collection: str, hits: Sequence[Hit], tenant: str | None,
          consistency: str = "Session", documents: int | None = None,
          passages_per_document: int = 3) -> list[Hit]:
    """Passage hits (best first) as document hits: each document once, scored by its best
    passage, with its id, value and metadata, its best passage's text and vector, and up to
    ``passages_per_document`` of its passages (``index``, ``start``, ``end``, ``score``,
    ``text``, ``sources``), best first. Stale passages are left out (:func:`_valid`; the
    heads read at the search's ``consistency``). With ``documents``, the first that many
    documents are what matters: the others may be left out."""
    valid, heads = _valid(store, collection, hits, tenant, consistency, documents)
    docs: dict[str, list[tuple[Hit, int, int, int]]] = {}
    for h, doc_id, i, a, b in valid:
        if doc_id not in heads:
            continue
        docs.setdefault(doc_id, [])
        if len(docs[doc_id]) < passages_per_document:
            docs[doc_id].append((h, i, a, b))
    out = []
    for doc_id, ps in docs.items():
        head, best = heads[doc_id], ps[0][0]
        out.append(Hit(id=doc_id, score=best.score, text=best.text, value=head.value,
                       metadata=user_metadata(head.metadata), vector=best.vector,
                       sources=best.sources, floor=best.floor, scattered=best.scattered,
                       mix=best.mix, passages=[_passage(*x) for x in ps]))
    return out


def as_passages(store: VectorStore, collection: str, hits: Sequence[Hit], tenant: str | None,
                consistency: str = "Session") -> list[Hit]:
    """Passage hits as passages (``group_by_document: false``): each with its document's
    id, value and metadata, and its own place in it. Stale passages are left out."""
    valid, heads = _valid(store, collection, hits, tenant, consistency)
    return [Hit(id=doc_id, score=h.score, text=h.text, value=heads[doc_id].value,
                metadata=user_metadata(h.metadata), vector=h.vector, sources=h.sources,
                floor=h.floor, scattered=h.scattered, mix=h.mix,
                passages=[_passage(h, i, a, b)])
            for h, doc_id, i, a, b in valid]
