"""Multi-tenancy on every backend: four tenants share one collection and the same ids;
random filters (including ones on a metadata key called ``tenant`` that names another
tenant), every search mode, get, delete and count find no document of another tenant."""

from __future__ import annotations

import random

import pytest
from store_backends import unit_rows
from test_filter_ops import random_filter

from index import Condition, Item, Or, VectorStore, matches

D = 8
TENANTS = ["acme", "globex", "a.b-c_d@e", "initech"]


def tenant_items(seed: int = 0) -> dict[str, list[Item]]:
    rng = random.Random(seed)
    out = {}
    for t, tenant in enumerate(TENANTS):
        xb = unit_rows(20, D, seed + t)
        out[tenant] = [
            Item(f"d{i}", xb[i], f"{tenant} {rng.choice(['dog', 'cat', 'river'])} {i}",
                 metadata={"s": rng.choice(["doc", "doc_1", "é", "x"]), "n": rng.choice([1, 2]),
                           "tenant": rng.choice(TENANTS)}, tenant=tenant)
            for i in range(20)]
    return out


def test_no_tenant_sees_another(store: VectorStore, collection: str) -> None:
    hybrid = store.bm25_available()
    store.create(collection, D, hybrid=hybrid, multi_tenant=True)
    assert store.describe(collection).multi_tenant
    items = tenant_items()
    for its in items.values():
        store.upsert(collection, its)
    for tenant, its in items.items():
        assert store.count(collection, tenant=tenant) == len(its)
    rng = random.Random(3)
    modes = ["dense", "bm25", "hybrid"] if hybrid else ["dense"]
    filters = [None, Condition("tenant", "eq", "globex"), Or((Condition("tenant", "ne", "x"),
               Condition("n", "eq", 1))), *[random_filter(rng) for _ in range(8)]]
    for tenant, its in items.items():
        mine = {it.id: it for it in its}
        for f in filters:
            mode = rng.choice(modes)
            (hits,) = store.search(collection, its[0].vector, k=40, filter=f, mode=mode,
                                   query_text=["dog cat river"], tenant=tenant,
                                   consistency="Session")
            for h in hits:  # the ids are shared: the text says whose document it is
                assert h.id in mine and h.text == mine[h.id].text, (tenant, f, mode, h)
            if mode == "dense":
                want = {i for i, it in mine.items() if f is None or matches(f, it.metadata)}
                assert {h.id for h in hits} == want, (tenant, f)
    # get and delete reach only the tenant's own document of that id
    got = store.get(collection, ["d1", "d2"], tenant="acme")
    assert [g.text for g in got] == [items["acme"][1].text, items["acme"][2].text]
    assert all(g.tenant == "acme" for g in got)
    store.delete(collection, ["d1"], tenant="acme")
    assert store.count(collection, tenant="acme") == 19
    assert store.count(collection, tenant="globex") == 20
    assert store.get(collection, ["d1"], tenant="globex")[0].text == items["globex"][1].text
    # an upsert of the same id by another tenant overwrites nothing of acme's
    store.upsert(collection, [Item("d2", items["acme"][2].vector, "globex's new d2",
                                   tenant="globex")])
    assert store.get(collection, ["d2"], tenant="acme")[0].text == items["acme"][2].text


def test_tenant_is_required_and_checked(store: VectorStore, collection: str) -> None:
    store.create(collection, D, multi_tenant=True)
    x = unit_rows(1, D)[0]
    with pytest.raises(ValueError, match="multi-tenant: every read and write"):
        store.upsert(collection, [Item("a", x, "t")])
    with pytest.raises(ValueError, match="multi-tenant: every read and write"):
        store.search(collection, x, k=1)
    with pytest.raises(ValueError, match="multi-tenant"):
        store.count(collection)
    for bad in ['a" or tenant != "', "", "x" * 65, "a:b", "ü"]:
        with pytest.raises(ValueError, match="a tenant is"):
            store.search(collection, x, k=1, tenant=bad)
    plain = f"{collection}_plain"
    store.create(plain, D)
    try:
        with pytest.raises(ValueError, match="not multi-tenant"):
            store.search(plain, x, k=1, tenant="acme")
    finally:
        store.drop(plain)
