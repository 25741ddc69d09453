"""The filter ops beyond equality and ranges (``ne``, ``nin``, ``exists``, ``like``) mean the
same on every backend: random filters over items with missing keys, nulls, mixed types and
prefix-hostile strings, each store's hits compared with :func:`index.matches`."""

from __future__ import annotations

import random

import pytest
from store_backends import unit_rows

from index import And, Condition, Item, Or, VectorStore, matches
from index.filters import Filter, like_prefix, to_milvus_expr

D = 8
WORDS = ["doc", "doc_1", "doc%1", "docs", "do", "Doc", "émile", "é", "ü🚀x", "a\\b", "a\"b",
         "", "z\U0010ffff", "\U0010ffff\U0010ffff", "x\ty", "100", "10"]


def make_items(n: int, seed: int = 0) -> list[Item]:
    rng = random.Random(seed)
    xb = unit_rows(n, D, seed)
    items = []
    for i in range(n):
        meta: dict[str, object] = {}
        for key, values in (("s", WORDS), ("n", [0, 1, 2, 2.5, -3, 10]),
                            ("mixed", ["1", 1, 2.0, "x"]), ("flag", [True, False, "true"]),
                            ("maybe", [None, "a", 3])):
            if rng.random() < 0.75:
                meta[key] = rng.choice(values)
        items.append(Item(f"i{i}", xb[i], "t", metadata=meta))
    return items


def random_condition(rng: random.Random) -> Condition:
    key = rng.choice(["s", "n", "mixed", "flag", "maybe", "absent"])
    op = rng.choice(["ne", "nin", "exists", "like", "eq", "in"])
    # no booleans against numbers: Milvus Lite reads true as 1 there (index.filters)
    scalars: list[object] = ([True, False, "true"] if key == "flag"
                             else [*WORDS[:8], 1, 2, 2.5, "1", "a", 3])
    if op == "exists":
        return Condition(key, op, rng.random() < 0.5)
    if op == "like":
        word = rng.choice([w for w in WORDS if w])
        cut = word[: rng.randint(0, len(word))]
        pattern = "".join("\\" + c if c in "%_\\" else c for c in cut) + "%"
        return Condition(key, op, pattern)
    if op in ("in", "nin"):
        return Condition(key, op, rng.sample(scalars, rng.randint(1, 3)))
    return Condition(key, op, rng.choice(scalars))


def random_filter(rng: random.Random, depth: int = 0) -> Filter:
    if depth < 2 and rng.random() < 0.3:
        clauses = tuple(random_filter(rng, depth + 1) for _ in range(rng.randint(2, 3)))
        return And(clauses) if rng.random() < 0.5 else Or(clauses)
    return random_condition(rng)


def expected(f: Filter, meta: dict[str, object], backend: str) -> bool:
    """:func:`matches`, but a 2.3.5 server counts a key holding null as present to
    ``exists`` (the documented difference)."""
    if backend == "milvus-2.3.5" and isinstance(f, Condition) and f.op == "exists":
        return (f.key in meta) == f.value
    if isinstance(f, And):
        return all(expected(c, meta, backend) for c in f.clauses)
    if isinstance(f, Or):
        return any(expected(c, meta, backend) for c in f.clauses)
    return matches(f, meta)


def test_like_takes_prefix_patterns_only() -> None:
    assert like_prefix("doc\\_%") == "doc_"
    assert like_prefix("50\\%\\\\%") == "50%\\"
    assert like_prefix("%") == ""
    for bad in ["doc_%", "a%b%", "abc", "x\\y%", 5]:
        with pytest.raises(ValueError, match="like"):
            Condition("s", "like", bad)
    assert to_milvus_expr(Condition("s", "like", "ab%")) == (
        '(metadata["s"] >= "ab" and metadata["s"] < "ac")')
    assert to_milvus_expr(Condition("s", "ne", 1)) == (
        '((not (exists metadata["s"])) or (metadata["s"] != 1))')
    assert matches(Condition("s", "like", "\U0010ffff%"), {"s": "\U0010ffff!"})
    assert not matches(Condition("s", "like", "do%"), {"s": 5})
    assert matches(Condition("gone", "ne", "x"), {})
    assert not matches(Condition("gone", "eq", "x"), {})
    assert matches(Condition("v", "exists", False), {"v": None})


def test_filter_ops_mean_the_same_on_every_backend(store: VectorStore, collection: str,
                                                  backend: str) -> None:
    store.create(collection, D)
    items = make_items(60)
    store.upsert(collection, items)
    store.count(collection)  # a strong read: what follows searches at Session
    rng = random.Random(7)
    fixed: list[Filter] = [Condition("s", "like", "doc%"), Condition("s", "like", "doc\\_%"),
                           Condition("s", "like", "é%"), Condition("s", "like", "%"),
                           Condition("s", "like", "\U0010ffff%"), Condition("n", "ne", 2),
                           Condition("mixed", "nin", ["1", 1]), Condition("maybe", "exists", True),
                           Condition("maybe", "ne", "a"), Condition("absent", "exists", False)]
    for f in fixed + [random_filter(rng) for _ in range(30)]:
        want = {it.id for it in items if expected(f, it.metadata, backend)}
        (hits,) = store.search(collection, items[0].vector, k=60, filter=f,
                               consistency="Session")
        assert {h.id for h in hits} == want, (f, to_milvus_expr(f))
