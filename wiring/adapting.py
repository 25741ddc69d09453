"""``qkv adapt COLLECTION`` and ``POST /v1/collections/{name}/adapt`` (issue 38): adapt the
encoder to a collection's documents (:mod:`encoder.domain`), re-index them into a new
physical collection made by the adapted encoder, calibrate its hybrid search, and move the
collection's name onto it in one step.

Phases, each written to the job's journal (``<encoders dir>/jobs/<id>.json``) before it
starts: ``reading`` → ``training`` → ``re-indexing`` → ``calibrating`` → ``swapping`` →
``done`` (or ``skipped`` / ``rejected``, where adapting would not help or checked no
better: the collection is left as it was). Searches go to the old collection until the
swap. A job killed before ``swapping`` leaves the old collection serving (its half-built
copy is dropped on the next start: :func:`recover`); one killed during ``swapping``
is finished on the next start. Writes that arrive during the re-index go to both
collections (:class:`Shadow`), and a last pass before the swap copies whatever the two
still disagree on."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from index.aliases import DROP_GRACE_S
from index.store import CollectionInfo, EncoderInfo, Item, VectorStore

log = logging.getLogger(__name__)
Embed = Callable[[Sequence[str]], np.ndarray]
# an encoder by name: its embed (unit vectors, full dim), what it records, its sizes
EmbedWith = Callable[[str], tuple[Embed, EncoderInfo, list[int]]]
JOB_ID = re.compile(r"^adapt-[0-9a-f]{12}$")
BATCH = 256
FINAL = ("done", "skipped", "rejected", "failed", "interrupted")
OWNER = f"{socket.gethostname()}:{os.getpid()}"  # the process whose jobs these are
# A job of another host whose journal has not changed this long is its replica's no more
# (a training phase writes its progress as it goes; a dead replica writes nothing)
OWNER_STALE_S = 600.0


@dataclass
class Shadow:
    """Where writes to a collection being re-indexed go too."""

    target: str
    encoder: str  # the adapted encoder's name


class Journal:
    """One job's state, in a JSON file rewritten (atomically) at each change."""

    def __init__(self, path: Path, state: dict[str, Any]) -> None:
        self.path, self.state = path, state
        self._lock = threading.Lock()

    @classmethod
    def new(cls, root: Path, collection: str, options: dict[str, Any]) -> Journal:
        job = f"adapt-{uuid.uuid4().hex[:12]}"
        j = cls(root / "jobs" / f"{job}.json", {
            "id": job, "kind": "adapt", "collection": collection, "phase": "queued",
            "progress": 0.0, "options": options, "created_at": time.time(),
            "owner": OWNER})
        j.save()
        return j

    @classmethod
    def load(cls, path: Path) -> Journal:
        return cls(path, json.loads(path.read_text()))

    def update(self, **changes: Any) -> None:
        with self._lock:
            self.state.update(changes, updated_at=time.time())
            self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1, default=str))
        tmp.replace(self.path)


def held_elsewhere(state: dict[str, Any], now: float | None = None) -> bool:
    """Whether another live process runs this job: a replica sharing the encoders
    directory. On this host, its process is alive; on another, its journal changed in the
    last :data:`OWNER_STALE_S`. A journal without an owner (written before owners were
    recorded) is nobody's."""
    who = state.get("owner")
    if not isinstance(who, str) or ":" not in who:
        return False
    host, _, pid = who.rpartition(":")
    if host == socket.gethostname():
        if not pid.isdigit() or int(pid) == os.getpid():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # alive, another user's
            return True
        return True
    seen = float(state.get("updated_at") or state.get("created_at") or 0)
    return (now or time.time()) - seen < OWNER_STALE_S


def journals(root: Path) -> Iterator[Journal]:
    for path in sorted((root / "jobs").glob("*.json")):
        try:
            yield Journal.load(path)
        except (OSError, ValueError):
            log.warning("unreadable job journal %s: skipped", path)


def read_items(store: VectorStore, collection: str) -> list[Item]:
    return [it for page in store.scan(collection) for it in page]


def copy_items(store: VectorStore, target: str, items: list[Item], embed: Embed,
               info: EncoderInfo, progress: Callable[[float], None] = lambda s: None) -> None:
    """Re-embed ``items`` with ``embed`` and upsert them into ``target``."""
    for start in range(0, len(items), BATCH):
        page = items[start:start + BATCH]
        vectors = embed([it.text for it in page])
        store.upsert(target, [Item(it.id, v, it.text, it.value, it.metadata,
                                   keywords=it.keywords)
                              for it, v in zip(page, vectors, strict=True)], info)
        progress((start + len(page)) / max(1, len(items)))


def reconcile(store: VectorStore, source: str, target: str, embed: Embed,
              info: EncoderInfo) -> int:
    """Make ``target`` hold what ``source`` holds (ids, text, value, metadata): copy the
    differing and missing, delete the extra. Returns how many it changed."""
    old = {it.id: it for it in read_items(store, source)}
    new = {it.id: it for it in read_items(store, target)}
    stale = [it for i, it in old.items() if i not in new or
             (new[i].text, new[i].value, new[i].metadata) != (it.text, it.value, it.metadata)]
    extra = [i for i in new if i not in old]
    copy_items(store, target, stale, embed, info)
    if extra:
        store.delete(target, extra)
    return len(stale) + len(extra)


def target_name(store: VectorStore, physical: str) -> str:
    """A free physical name for the re-indexed copy: ``<physical>_a1``, ``_a2`` ..."""
    base = physical.rsplit("_a", 1)[0] if "_a" in physical and \
        physical.rsplit("_a", 1)[1].isdigit() else physical
    taken = set(store.list_collections()) | set(store.list_aliases())
    n = 1
    while f"{base}_a{n}" in taken:
        n += 1
    return f"{base}_a{n}"


def point(store: VectorStore, name: str, old: str, target: str) -> None:
    """Point ``name`` at ``target`` (idempotent), and every other alias of the old
    collection with it: where ``name`` is the old collection itself, it is dropped and made
    an alias of ``target``. The caller holds every other store call meanwhile
    (:meth:`index.guarded.GuardedStore.exclusive`): no search sees the name missing."""
    aliases = store.list_aliases()
    for alias, collection in aliases.items():
        if collection == old and alias != name:
            store.set_alias(alias, target)
    if aliases.get(name) == target:
        return
    if name in aliases:
        store.set_alias(name, target)
        return
    if name in store.list_collections():
        store.drop(name)
    store.set_alias(name, target)


def drop_old(store: VectorStore, old: str, target: str) -> None:
    """Drop the collection an alias pointed at before, once no reader can still be on it."""
    if old == target or old not in store.list_collections():
        return
    time.sleep(DROP_GRACE_S)
    if old not in store.list_aliases().values():
        store.drop(old)


def swap(store: VectorStore, name: str, old: str, target: str,
         exclusive: Callable[[], AbstractContextManager[Any]] = nullcontext) -> None:
    """:func:`point` under ``exclusive()``, then :func:`drop_old`."""
    with exclusive() as held:
        point(held or store, name, old, target)
    drop_old(store, old, target)


def run(store: VectorStore, journal: Journal, base: Path, root: Path,
        embed_with: EmbedWith, shadows: dict[str, Shadow] | None = None,
        exclusive: Callable[[], AbstractContextManager[Any]] = nullcontext,
        on_calibrate: Callable[[str, Embed, list[str]], Any] | None = None,
        on_swap: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The whole job (see the module docstring); ``on_calibrate(target, embed, held)``
    calibrates, its pseudo-queries cut from the ``held`` ids (documents kept out of the
    training: the adapted encoder knows the others by heart, and would look stronger on
    them than it is on real queries)."""
    from encoder import domain
    from wiring.calibrating import embed_at

    st = journal.state
    opts = st["options"]
    shadows = {} if shadows is None else shadows
    name = st["collection"]
    info: CollectionInfo = store.describe(name)
    if info.multi_tenant:
        raise ValueError(f"collection {name!r} is multi-tenant: its tenants' documents "
                         "would train one encoder; adapt is for single-tenant collections")
    journal.update(phase="reading", physical=info.name, progress=0.02)
    items = read_items(store, info.name)
    texts = [it.text for it in items]
    titles = [str(it.metadata.get("title") or "") if isinstance(it.metadata, dict) else ""
              for it in items]
    stamp = time.strftime("%Y%m%d%H%M%S")
    encoder_name = f"{(info.encoder.name if info.encoder else 'qkv-encoder')[:60]}" \
                   f"+{info.name[:40]}-{stamp}"
    out = root / encoder_name
    journal.update(phase="training", encoder=encoder_name, documents=len(items), progress=0.05)

    def progress(phase: str, share: float) -> None:
        journal.update(step=phase, progress=round(0.05 + 0.6 * share, 3))

    report = domain.adapt(base, texts, titles, out, encoder_name,
                          budget_s=float(opts.get("budget_s", domain.DEFAULT_BUDGET_S)),
                          force=bool(opts.get("force", False)), progress=progress,
                          started=float(st.get("created_at") or time.time()))
    journal.update(report=report.to_dict())
    if report.skipped or not report.accepted:
        shutil.rmtree(out, ignore_errors=True)
        phase = "skipped" if report.skipped else "rejected"
        journal.update(phase=phase, progress=1.0, reason=report.reason)
        return journal.state
    from wiring.components import write_card  # the registry lists it from here on

    for extra in ("retrieval.json",):  # hybrid's defaults and mapping, as the base's
        if (base / extra).is_file():
            shutil.copy(base / extra, out / extra)
    card = {"name": encoder_name, "base": info.encoder.name if info.encoder else None,
            "collection": name, "created": int(time.time()), "report": report.to_dict()}
    write_card(out, card)  # listed (and loadable) from here on
    embed_full, full, dims = embed_with(encoder_name)
    write_card(out, {**card, "fingerprint": full.fingerprint, "dim": full.dim, "dims": dims,
                     "max_tokens": json.loads((out / "config.json").read_text())[
                         "architecture"].get("max_tokens")})
    target = target_name(store, info.name)
    enc_info = EncoderInfo(encoder_name, full.fingerprint, info.dim)
    embed = embed_at(embed_full, info.dim)
    journal.update(phase="re-indexing", target=target, progress=0.7)
    store.create(target, info.dim, enc_info, exist_ok=False, hybrid=info.hybrid)
    if info.passages:  # its rows are passages: the copy reads them as the collection does
        store.set_passages(target, info.passages)
    shadows[info.name] = Shadow(target, encoder_name)
    try:
        copy_items(store, target, items, embed, enc_info,
                   lambda s: journal.update(progress=round(0.7 + 0.2 * s, 3)))
        journal.update(changed_in_last_pass=reconcile(store, info.name, target, embed,
                                                      enc_info))
        if info.hybrid and on_calibrate is not None:
            journal.update(phase="calibrating", progress=0.92)
            cal = on_calibrate(target, embed, [items[i].id for i in report.held_back])
            journal.update(calibration=getattr(cal, "to_dict", lambda: cal)())
        journal.update(phase="swapping", progress=0.97)
        on_swap()  # callers that looked the name up before the swap try again after it
        with exclusive() as held:  # no write lands in the old collection from here
            reconcile(held or store, info.name, target, embed, enc_info)
            shadows.pop(info.name, None)
            point(held or store, name, info.name, target)
        on_swap()
    finally:
        shadows.pop(info.name, None)
    drop_old(store, info.name, target)
    journal.update(phase="done", progress=1.0, reason=report.reason)
    return journal.state


def recover(store: VectorStore, root: Path,
            exclusive: Callable[[], AbstractContextManager[Any]] = nullcontext) -> list[str]:
    """After a restart: finish a swap that was under way; drop the half-built copy of a job
    killed before its swap (the old collection kept serving) and say so in its journal. A
    job another live replica runs (:func:`held_elsewhere`) is left to it."""
    said = []
    for j in journals(root):
        st = j.state
        if st.get("phase") in FINAL:
            continue
        if held_elsewhere(st):  # another replica's, running: never undone under it
            said.append(f"{st.get('id')}: {st.get('phase')} on {st['owner']}, left to it")
            continue
        try:
            if st.get("phase") == "swapping":
                swap(store, st["collection"], st["physical"], st["target"], exclusive)
                j.update(phase="done", progress=1.0, reason="swap finished after a restart")
            else:
                target = st.get("target")
                if target and target in store.list_collections() and \
                        target not in store.list_aliases().values():
                    store.drop(target)
                if st.get("encoder") and st.get("phase") in ("reading", "training"):
                    shutil.rmtree(root / st["encoder"], ignore_errors=True)
                    shutil.rmtree(root / (st["encoder"] + ".work"), ignore_errors=True)
                j.update(phase="interrupted", reason=f"the service stopped during "
                         f"{st.get('phase')}; the collection was left as it was: adapt again")
        except Exception as e:  # noqa: BLE001 - one job's trouble must not stop the start
            log.exception("recovering adapt job %s", st.get("id"))
            j.update(phase="failed", reason=f"recovery failed: {type(e).__name__}")
        said.append(f"{st.get('id')}: {j.state['phase']}")
    return said
