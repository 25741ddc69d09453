"""Aliases on every backend: every method takes one, a move is one step, and Milvus' rules
(no shared names, no alias of an alias, no drop of what an alias points at) hold."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from store_backends import unit_rows

from index import AliasError, CollectionNotFoundError, Item, VectorStore

D = 8


def test_alias_reads_writes_and_moves(store: VectorStore, collection: str) -> None:
    other = f"{collection}_b"
    alias = f"al_{uuid.uuid4().hex[:8]}"
    xb = unit_rows(4, D)
    try:
        store.create(collection, D)
        store.create(other, D)
        store.upsert(collection, [Item("a", xb[0], "first")])
        store.upsert(other, [Item("b", xb[1], "second")])
        assert store.set_alias(alias, collection) is None
        assert store.list_aliases()[alias] == collection
        assert store.describe(alias).name == collection
        assert store.count(alias) == 1
        (hits,) = store.search(alias, xb[0], k=5, consistency="Strong")
        assert [h.id for h in hits] == ["a"]
        store.upsert(alias, [Item("c", xb[2], "through the alias")])  # writes land there
        assert {it.id for it in store.get(collection, ["a", "c"])} == {"a", "c"}
        store.delete(alias, ["c"])
        assert store.count(collection) == 1
        assert store.set_alias(alias, other) == collection  # the move: one step
        (hits,) = store.search(alias, xb[1], k=5, consistency="Strong")
        assert [h.id for h in hits] == ["b"]
        np.testing.assert_allclose(store.get(alias, ["b"])[0].vector, xb[1], atol=1e-6)
        assert alias not in store.list_collections()
        # the rules
        with pytest.raises(AliasError, match="alias"):
            store.drop(alias)  # an alias is not dropped as a collection
        with pytest.raises(AliasError, match="point"):
            store.drop(other)  # nor a collection an alias points at
        with pytest.raises(AliasError, match="is a collection"):
            store.set_alias(collection, other)
        with pytest.raises(AliasError, match="is an alias"):
            store.set_alias(f"{alias}_2", alias)
        with pytest.raises(AliasError, match="is an alias"):
            store.create(alias, D)
        with pytest.raises(CollectionNotFoundError):
            store.set_alias(f"{alias}_3", "no_such_collection")
        store.drop_alias(alias)
        assert alias not in store.list_aliases()
        with pytest.raises(CollectionNotFoundError):
            store.drop_alias(alias)
        with pytest.raises(CollectionNotFoundError):
            store.describe(alias)
    finally:
        for a, c in store.list_aliases().items():
            if c in (collection, other):
                store.drop_alias(a)
        store.drop(other)
