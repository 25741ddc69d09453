"""API keys: each bound to a scope, optionally to tenants and collections, with its own
limits; stored hashed in a JSON-lines file that every replica reads and re-reads.

A key's secret is ``qkv-<id>-<random>``: the id finds the record, the secret's SHA-256 is
compared with the stored one in constant time; the secret itself is printed once by
``qkv keys create`` and stored nowhere. Scopes are levels, each holding the ones below:
``read`` (search, get, count, attend, generate, embeddings, TEI routes) < ``write``
(upserts, deletes, tunes) < ``admin`` (collections, aliases, keys). A key bound to tenants
makes every request it sends in one of them (another is 403, never a silent switch) and
reaches only multi-tenant collections, unless ``collections`` grants others by name.

:class:`KeyRing` re-reads the file when it changes (checked at most every
``RELOAD_EVERY_S``), so a revoke takes effect on running servers within a second. A
malformed file refuses to load with its line number; while running, a file made malformed
keeps the keys last read (and logs why) rather than opening the service. So does a file
that goes missing or empty after keys were read (a moved volume, a truncating editor, an
unmounted share): the service stays closed with the keys last read, and says so loudly,
until the file has keys again. Only ``QKV_KEYS_EMPTY_OPENS=1`` makes an emptied file a
deliberate "no keys" that opens a running service; a restart without a file starts open,
as a service that never had keys does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
SCOPES = ("read", "write", "admin")
RELOAD_EVERY_S = 0.5
_ID = re.compile(r"k[0-9a-f]{8}")
_SECRET = re.compile(r"qkv-(k[0-9a-f]{8})-[A-Za-z0-9_-]{20,}")
ADMIN_UNBOUND = ("an admin key manages every collection, alias and key: bind read or write "
                 "keys to tenants and collections")
ENV_KEY_ID = "env"  # QKV_API_KEY: the one admin key of earlier versions


class KeyFileError(ValueError):
    """The keys file cannot be read as keys (the message names the line)."""


@dataclass(frozen=True)
class Key:
    id: str
    hash: str  # sha256 hex of the secret
    scope: str
    tenants: tuple[str, ...] | None = None
    collections: tuple[str, ...] | None = None
    rps: float | None = None  # requests per second (token bucket, burst = 1 s)
    tps: float | None = None  # texts encoded per second
    name: str = ""
    created: str = ""
    revoked: str | None = None

    def allows(self, scope: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    def to_public(self) -> dict[str, Any]:
        """What a caller may see of the key (no hash)."""
        d = asdict(self)
        d.pop("hash")
        return d


def parse_key(line: str, where: str) -> Key:
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise KeyFileError(f"{where}: not JSON ({e.msg})") from e
    if not isinstance(d, dict):
        raise KeyFileError(f"{where}: a key is a JSON object")
    unknown = set(d) - set(Key.__dataclass_fields__)
    if unknown:
        raise KeyFileError(f"{where}: unknown fields {sorted(unknown)}")
    try:
        key = Key(
            id=str(d["id"]), hash=str(d["hash"]), scope=str(d["scope"]),
            tenants=_names(d.get("tenants")), collections=_names(d.get("collections")),
            rps=_rate(d.get("rps")), tps=_rate(d.get("tps")), name=str(d.get("name", "")),
            created=str(d.get("created", "")), revoked=d.get("revoked"))
    except KeyError as e:
        raise KeyFileError(f"{where}: missing field {e.args[0]!r}") from e
    except (TypeError, ValueError) as e:
        raise KeyFileError(f"{where}: {e}") from e
    if not _ID.fullmatch(key.id):
        raise KeyFileError(f"{where}: id {key.id!r} is not k + 8 hex digits")
    if key.scope not in SCOPES:
        raise KeyFileError(f"{where}: scope {key.scope!r} is not one of {', '.join(SCOPES)}")
    if not re.fullmatch(r"[0-9a-f]{64}", key.hash):
        raise KeyFileError(f"{where}: hash is not a sha256 hex digest")
    if key.scope == "admin" and (key.tenants or key.collections):
        raise KeyFileError(f"{where}: {ADMIN_UNBOUND}")
    return key


def _names(v: Any) -> tuple[str, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise ValueError("tenants and collections are non-empty lists of names, or null")
    return tuple(v)


def _rate(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise ValueError(f"a rate is a number > 0, or null; got {v!r}")
    return float(v)


def read_keys(path: Path) -> dict[str, Key]:
    """Every key in the file by id (none when it does not exist)."""
    if not path.exists():
        return {}
    keys: dict[str, Key] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            key = parse_key(line, f"{path.name} line {n}")
            if key.id in keys:
                raise KeyFileError(f"{path.name} line {n}: id {key.id} appears twice")
            keys[key.id] = key
    return keys


def write_keys(path: Path, keys: dict[str, Key]) -> None:
    """All of them, atomically (a reader sees the old file or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for k in keys.values():
            f.write(json.dumps(asdict(k)) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


@contextmanager
def locked(path: Path) -> Iterator[dict[str, Key]]:
    """The keys of ``path``, written back when the block ends, under an exclusive lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        keys = read_keys(path)
        yield keys
        write_keys(path, keys)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key(scope: str, tenants: list[str] | None = None,
            collections: list[str] | None = None, rps: float | None = None,
            tps: float | None = None, name: str = "") -> tuple[Key, str]:
    """A new key and its secret (shown once)."""
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r} is not one of {', '.join(SCOPES)}")
    if scope == "admin" and (tenants or collections):
        raise ValueError(ADMIN_UNBOUND)
    key_id = "k" + secrets.token_hex(4)
    secret = f"qkv-{key_id}-{secrets.token_urlsafe(24)}"
    key = Key(key_id, digest(secret), scope, _names(tenants or None),
              _names(collections or None), _rate(rps), _rate(tps), name,
              datetime.now(UTC).isoformat(timespec="seconds"))
    return key, secret


@dataclass
class KeyRing:
    """The keys of a file (re-read when it changes) and the env admin key."""

    path: Path | None
    env_secret: str | None = None
    empty_opens: bool = False  # QKV_KEYS_EMPTY_OPENS: an emptied file opens the service
    keys: dict[str, Key] = field(default_factory=dict)
    _stat: tuple[int, int, int] | None = None
    _checked: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.reload(strict=True)

    def reload(self, strict: bool = False) -> None:
        """Re-read the file if it changed; ``strict`` raises a malformed file's error."""
        if self.path is None:
            return
        try:
            st = self.path.stat()
            stat = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stat = None
        if stat == self._stat and not strict:
            return
        try:
            keys = read_keys(self.path)
        except (KeyFileError, OSError) as e:
            if strict:
                raise
            log.error("keys file not re-read, the keys last read stay: %s", e)
            self._stat = stat  # not again until it changes
            return
        if not keys and self.keys and not strict and not self.empty_opens:
            log.critical(
                "keys file %s is %s: the %d keys last read stay in force and the service "
                "stays closed; put the file back (or write keys to it), or set "
                "QKV_KEYS_EMPTY_OPENS=1 to let an emptied file open the service",
                self.path, "missing" if stat is None else "empty", len(self.keys))
            self._stat = stat  # not again until it changes
            return
        self.keys, self._stat = keys, stat

    def _fresh(self) -> None:
        now = time.monotonic()
        if now - self._checked >= RELOAD_EVERY_S:
            with self._lock:
                if now - self._checked >= RELOAD_EVERY_S:
                    self.reload()
                    self._checked = now

    @property
    def open(self) -> bool:
        """No key at all (none in the file, revoked or not, and no env key): an open
        local service, as before keys existed."""
        self._fresh()
        return not self.keys and not self.env_secret

    def find(self, secret: str) -> Key | None:
        """The active key of ``secret``, or None (unknown, wrong or revoked)."""
        self._fresh()
        if self.env_secret and secrets.compare_digest(secret.encode(),
                                                      self.env_secret.encode()):
            return Key(ENV_KEY_ID, digest(secret), "admin", name="QKV_API_KEY")
        m = _SECRET.fullmatch(secret)
        key = self.keys.get(m.group(1)) if m else None
        if key is None or key.revoked is not None:
            return None
        return key if secrets.compare_digest(digest(secret), key.hash) else None


def default_keys_file(store: str) -> Path | None:
    """``keys.jsonl`` beside a local store (a Lite file's or a FAISS directory's parent);
    None for a Milvus server (set QKV_KEYS_FILE on a volume every replica mounts)."""
    if store.startswith(("faiss://", "faiss+hnsw://")):
        return Path(store.split("://", 1)[1]).expanduser().parent / "keys.jsonl"
    if "://" in store:
        return None
    return Path(store).expanduser().parent / "keys.jsonl"
