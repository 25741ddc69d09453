"""Collection aliases: a second name that points at one collection and can be moved to
another in one step, for re-indexing without downtime (build ``docs_v2`` while ``docs``
answers from ``docs_v1``, then point ``docs`` at ``docs_v2``).

Every store method that takes a collection name takes an alias too, and works on the
collection it points at. The rules are Milvus': an alias and a collection never share a
name, an alias points at a collection (not at another alias), a collection that aliases
point at cannot be dropped, and an alias cannot be dropped as a collection
(:class:`AliasError`, a 409 over HTTP).

Each store reads the aliases through an :class:`AliasCache`: its own changes are seen at
once, another process's within :data:`ALIAS_TTL_S` (the cache is read again when older).
Whoever moves an alias and then drops the collection it pointed at waits
:data:`DROP_GRACE_S` in between, so that no reader still sends queries there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from index.store import StoreError, check_collection_name

ALIAS_TTL_S = 1.0
DROP_GRACE_S = 2 * ALIAS_TTL_S + 0.5


class AliasError(StoreError):
    """A name clash or a use the alias rules forbid (see the module docstring)."""


class AliasCache:
    """The alias → collection map of a store, read by ``load`` at most every ``ttl_s``."""

    def __init__(self, load: Callable[[], dict[str, str]], ttl_s: float = ALIAS_TTL_S) -> None:
        self._load, self.ttl_s = load, ttl_s
        self._map: dict[str, str] = {}
        self._at = float("-inf")
        self._lock = threading.Lock()

    def get(self) -> dict[str, str]:
        if time.monotonic() - self._at > self.ttl_s:
            with self._lock:
                if time.monotonic() - self._at > self.ttl_s:
                    self._map = dict(self._load())
                    self._at = time.monotonic()
        return self._map

    def resolve(self, name: str) -> str:
        """The collection ``name`` means: the one it points at if it is an alias, else
        ``name`` itself."""
        return self.get().get(name, name)

    def cached(self, name: str) -> str | None:
        """:meth:`resolve` from the map in memory while it is fresh, else None (nothing
        read)."""
        if time.monotonic() - self._at > self.ttl_s:
            return None
        return self._map.get(name, name)

    def invalidate(self) -> None:
        self._at = float("-inf")

    def fresh(self) -> dict[str, str]:
        """The map read now (not from the cache), sorted by alias."""
        self.invalidate()
        return dict(sorted(self.get().items()))


def check_create(aliases: dict[str, str], name: str) -> None:
    """Refuse a collection named like an alias."""
    if name in aliases:
        raise AliasError(f"{name!r} is an alias; a collection cannot take its name")


def check_drop(aliases: dict[str, str], name: str) -> None:
    """Refuse to drop an alias as a collection, or a collection that aliases point at."""
    if name in aliases:
        raise AliasError(f"{name!r} is an alias of collection {aliases[name]!r}, not a "
                         "collection: drop the alias, or the collection by its own name")
    pointing = sorted(a for a, c in aliases.items() if c == name)
    if pointing:
        raise AliasError(f"collection {name!r} is what alias(es) {', '.join(pointing)} point "
                         "at: move or drop them first")


def checked_set(store: Any, alias: str, collection: str) -> dict[str, str]:
    """Check ``store.set_alias(alias, collection)`` before it changes anything: the name,
    the rules, and that the collection exists; returns the aliases as they are now."""
    check_collection_name(alias)
    aliases: dict[str, str] = store.list_aliases()
    check_set(aliases, store.list_collections(), alias, collection)
    store.describe(collection)  # CollectionNotFoundError: 404
    return aliases


def check_set(aliases: dict[str, str], collections: list[str], alias: str,
              collection: str) -> None:
    """Refuse an alias named like a collection, or pointing at an alias."""
    if alias in collections:
        raise AliasError(f"{alias!r} is a collection; an alias cannot take its name")
    if collection in aliases:
        raise AliasError(f"{collection!r} is an alias (of {aliases[collection]!r}); an alias "
                         "points at a collection")
