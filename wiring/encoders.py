"""The encoder registry: the encoders one service serves (issue 38), the default
(``QKV_MODEL``) and any number of derived checkpoints under the encoders directory
(``QKV_ENCODERS_DIR``; ``qkv adapt`` writes them there), each loaded on first use and kept
within a budget of loaded encoders (least recently used out first; the default always
stays). Each has its own dynamic batcher, so texts for two encoders are never batched
together. A collection records which encoder made it (:class:`index.EncoderInfo`);
:meth:`Encoders.of` finds it for every call that embeds for a collection, and raises a
conflict naming it when it is gone. The loader is the server's: it makes the batcher."""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from index import CollectionInfo, EncoderInfo
from wiring import memory
from wiring.components import read_card
from wiring.errors import ConflictError, NotFoundError

log = logging.getLogger(__name__)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+@-]{0,127}$")


@dataclass
class Served:
    """One loaded encoder, its :class:`EncoderInfo` and its batcher."""

    name: str
    path: Path
    encoder: Any  # encoder.TextEncoder
    info: EncoderInfo
    batcher: Any  # the server's queue for it (api.batcher.DynamicBatcher): embed, close
    created: int
    card: dict[str, Any]

    def close(self) -> None:
        self.batcher.close()


class Encoders:
    """The registry. ``load(path)`` makes a :class:`Served` (the service's loader)."""

    def __init__(self, default: Served, root: Path | None, load: Callable[[str, Path], Served],
                 max_loaded: int = 3) -> None:
        self.default, self.root, self._load = default, root, load
        self.max_loaded = max(1, max_loaded)
        self._loaded: OrderedDict[str, Served] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def cards(self) -> dict[str, dict[str, Any]]:
        """Every derived encoder on disk by name (loaded or not), from its card."""
        out: dict[str, dict[str, Any]] = {}
        if self.root is None or not self.root.is_dir():
            return out
        for d in sorted(self.root.iterdir()):
            card = read_card(d) if d.is_dir() else None
            if card is not None and card.get("name") == d.name:
                out[d.name] = card
        return out

    def names(self) -> list[str]:
        return [self.default.name, *(n for n in self.cards() if n != self.default.name)]

    def loaded(self) -> list[str]:
        with self._lock:
            return [self.default.name, *self._loaded]

    def loaded_now(self, name: str | None = None) -> Served | None:
        """The encoder called ``name`` if it is in memory (the default always is), else
        None: what a request may take on the event loop without a thread for a load."""
        if name is None or name == self.default.name:
            return self.default
        with self._lock:
            served = self._loaded.get(name)
            if served is not None:
                self._loaded.move_to_end(name)
            return served

    def get(self, name: str | None = None) -> Served:
        """The encoder called ``name`` (the default when None), loaded if it is not; 404
        for a name the service does not have."""
        served = self.loaded_now(name)
        if served is not None:
            return served
        assert name is not None  # loaded_now answered for the default
        with self._lock:
            gate = self._loading.setdefault(name, threading.Lock())
        with gate:  # one load per name; other names load meanwhile
            with self._lock:
                if name in self._loaded:
                    return self._loaded[name]
            path = self._path(name)
            served = self._load(name, path)
            with self._lock:
                self._loaded[name] = served
                evicted = []
                while len(self._loaded) + 1 > self.max_loaded:
                    evicted.append(self._loaded.popitem(last=False)[1])
            for old in evicted:  # requests holding it finish; its batcher takes no more
                log.info("encoder %s unloaded (QKV_ENCODERS_LOADED=%d)", old.name,
                         self.max_loaded)
                old.close()
            if evicted:
                memory.trim()  # what the evicted encoders held (wiring.memory)
            log.info("encoder %s loaded from %s", name, path)
            return served

    def _path(self, name: str) -> Path:
        if not NAME.match(name) or self.root is None or read_card(self.root / name) is None:
            raise NotFoundError(f"model {name!r} not found; this server serves "
                            f"{', '.join(repr(n) for n in self.names())} (GET /v1/models)")
        return self.root / name

    def of(self, info: CollectionInfo) -> Served:
        """The encoder that made collection ``info`` (the default for one without a record,
        or made with the default); 409 when the service does not have it."""
        made_by = info.encoder
        if made_by is None or made_by.name == self.default.name:
            return self.default
        try:
            served = self.get(made_by.name)
        except Exception as e:  # noqa: BLE001 - gone, damaged: the same answer to the user
            if not isinstance(e, NotFoundError):
                log.exception("encoder %s of collection %s did not load", made_by.name,
                              info.name)
            raise ConflictError(
                f"collection {info.name!r} was made by encoder {made_by.name!r} (fingerprint "
                f"{made_by.fingerprint}), which this service does not have; put its "
                "checkpoint back in the encoders directory (QKV_ENCODERS_DIR) or re-index "
                "the collection with another encoder") from e
        return served

    def close(self) -> None:
        with self._lock:
            loaded, self._loaded = list(self._loaded.values()), OrderedDict()
        for s in loaded:
            s.close()
