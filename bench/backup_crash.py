"""kill -9 during backups and restores (issue 72): every completed backup verifies, every
restore ends complete or refused, never partial under the target name.

Usage: python bench/backup_crash.py [--cycles 20] [--rows 30000] [--model DIR]
       [--results DIR]

A Milvus Lite file holds a hybrid collection of ``--rows`` rows (random unit vectors
recorded as the ``--model`` encoder's, so a restore reuses them) and an alias. Each cycle,
as separate ``qkv`` processes:

1. ``qkv backup --to B`` killed with SIGKILL at a random moment (0.2 s up to the time a
   whole backup took); then ``B`` must be absent (no backup finished yet) or verify
   (:func:`index.backup.verify`: every part's checksum and row count) with all the rows;
   then the same command run again must complete, and ``B`` verify.
2. ``qkv restore B --as live --replace`` into another Lite file, killed the same way; then
   ``live`` must be absent (no restore finished yet) or an alias of a collection that holds
   every row (the previous restore's, or this one's); then the same command run again must
   complete, and ``live`` hold every row with the source's text, metadata and vector for a
   sample of ids.

The figures: cycles, kills that landed while the process ran, backups that did not verify,
restores partial under ``live``, reruns that failed, the restored collections no name
points at any more (whole: earlier restores ``--replace`` moved ``live`` off; partial: none
here, since each killed restore is rerun before the next backup), and the seconds a whole
backup and restore take. Prints a markdown section, recorded (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

COLLECTION = "src"
SAMPLE = 200


@dataclass
class Crashes:
    cycles: int = 0
    kills: int = 0  # landed while the process still ran
    backups_bad: list[str] = field(default_factory=list)
    restores_partial: list[str] = field(default_factory=list)
    reruns_failed: list[str] = field(default_factory=list)
    backup_s: float = 0.0
    restore_s: float = 0.0


def qkv(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([str(Path(sys.executable).with_name("qkv")), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(args: list[str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = qkv(args)
    out, err = p.communicate()
    return time.perf_counter() - t0, p.returncode, (out + err)[-600:]


def killed(args: list[str], after: float) -> bool:
    """Run ``qkv ARGS`` and SIGKILL it after ``after`` s; whether it was still running."""
    p = qkv(args)
    try:
        p.wait(after)
        return False
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait()
        return True


def release(path: Path) -> None:
    """Stop this process's Milvus Lite server for ``path`` (closing a store leaves it)."""
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(path))


def make_source(path: Path, model: Path, rows: int, seed: int) -> dict[str, tuple[str, dict]]:
    """The source collection; returns a sample of its rows (id -> text, metadata)."""
    import encoder as enc_mod
    from index import Item, MilvusStore
    from wiring.components import encoder_info

    info = encoder_info(enc_mod.load(model))
    rnd = np.random.default_rng(seed)
    s = MilvusStore(str(path))
    s.create(COLLECTION, info.dim, info, hybrid=True)
    sample: dict[str, tuple[str, dict]] = {}
    for start in range(0, rows, 5000):
        n = min(5000, rows - start)
        x = rnd.standard_normal((n, info.dim)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        items = [Item(f"d{start + i:07d}", x[i], f"document {start + i} about things",
                      None, {"n": start + i, "even": (start + i) % 2 == 0})
                 for i in range(n)]
        s.upsert(COLLECTION, items, info)
        for it in items[:: max(1, rows // SAMPLE)]:
            sample[it.id] = (it.text, it.metadata)
    s.set_alias("src_live", COLLECTION)
    s.close()
    release(path)
    return sample


def check_backup(b: Path, rows: int) -> str:
    """'' when ``b`` is absent or a whole backup of the rows, else what is wrong."""
    from index.backup import BackupError, verify

    if not b.exists():
        return ""
    try:
        m = verify(b)
    except BackupError as e:
        return str(e)
    got = sum(c["rows"] for c in m["collections"])
    return "" if got == rows else f"{got} rows, the source {rows}"


def check_live(dst: Path, rows: int, sample: dict[str, tuple[str, dict]], exact: bool
               ) -> str:
    """'' when ``live`` is absent (unless ``exact``: it must be there) or whole."""
    from index import MilvusStore

    if not dst.exists():
        return "no target store" if exact else ""
    s = MilvusStore(str(dst))
    try:
        aliases = s.list_aliases()
        if "live" not in aliases:
            return "live missing" if exact else ""
        have = s.count("live")
        if have != rows:
            return f"live -> {aliases['live']}: {have} rows of {rows}"
        if exact:
            got = {it.id: it for it in s.get("live", list(sample))}
            bad = [i for i, (t, m) in sample.items()
                   if i not in got or got[i].text != t or got[i].metadata != m]
            if bad:
                return f"{len(bad)} sampled rows differ, e.g. {bad[0]}"
        return ""
    finally:
        s.close()
        release(dst)


def staging_left(dst: Path, rows: int) -> tuple[int, int]:
    """Restored collections no alias points at: (whole ones, the earlier restores that
    ``--replace`` moved ``live`` off; partial ones, left by a killed restore whose backup a
    later cycle replaced, so that no rerun finished it)."""
    from index import MilvusStore
    from index.backup import STAGING

    if not dst.exists():
        return 0, 0
    s = MilvusStore(str(dst))
    try:
        live = set(s.list_aliases().values())
        left = [c for c in s.list_collections() if STAGING in c and c not in live]
        whole = sum(s.count(c) == rows for c in left)
        return whole, len(left) - whole
    finally:
        s.close()
        release(dst)


def run(tmp: Path, model: Path, cycles: int, rows: int, seed: int = 0,
        verbose: bool = True) -> tuple[Crashes, tuple[int, int]]:
    rnd = random.Random(seed)
    src, b, dst = tmp / "src.db", tmp / "backup", tmp / "dst.db"
    sample = make_source(src, model, rows, seed)
    backup = ["backup", "--store", str(src), "--to", str(b), "--collection", COLLECTION]
    restore = ["restore", str(b), "--store", str(dst), "--model", str(model), "--as", "live",
               "--replace"]
    c = Crashes()
    c.backup_s, code, out = finish(backup)  # how long each takes, uninterrupted
    if code != 0:
        raise RuntimeError(f"qkv backup: {out}")
    c.restore_s, code, out = finish(restore)
    if code != 0:
        raise RuntimeError(f"qkv restore: {out}")
    for cycle in range(cycles):
        c.kills += killed(backup, rnd.uniform(0.2, c.backup_s))
        if bad := check_backup(b, rows):
            c.backups_bad.append(f"cycle {cycle}, killed: {bad}")
        _, code, out = finish(backup)
        bad = check_backup(b, rows) if b.exists() else "no backup after the rerun"
        if code != 0 or bad:
            c.reruns_failed.append(f"cycle {cycle}, backup: {code} {bad or out}")
        c.kills += killed(restore, rnd.uniform(0.2, c.restore_s))
        if bad := check_live(dst, rows, sample, exact=False):
            c.restores_partial.append(f"cycle {cycle}: {bad}")
        _, code, out = finish(restore)
        bad = check_live(dst, rows, sample, exact=True)
        if code != 0 or bad:
            c.reruns_failed.append(f"cycle {cycle}, restore: {code} {bad or out}")
        c.cycles = cycle + 1
        if verbose:
            print(f"cycle {cycle + 1}: {c.kills} kills landed, {len(c.backups_bad)} bad "
                  f"backups, {len(c.restores_partial)} partial restores, "
                  f"{len(c.reruns_failed)} failed reruns", flush=True)
    return c, staging_left(dst, rows)


def main() -> None:
    from machine import add_results_arg, record, stamp

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--rows", type=int, default=30_000)
    ap.add_argument("--model", type=Path, default=ROOT / "models/encoder-default")
    ap.add_argument("--seed", type=int, default=0)
    add_results_arg(ap)
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        c, left = run(Path(tmp), args.model, args.cycles, args.rows, args.seed)
    seconds = time.perf_counter() - t0
    command = shlex.join(["python", *sys.argv])
    lines = [f"## kill -9 during backups and restores ({stamp()})", "", f"`{command}`", "",
             f"{c.cycles} cycles on {args.rows:,} rows in {seconds:.0f} s ({c.kills} of "
             f"{2 * c.cycles} kills landed while the process ran; a whole backup took "
             f"{c.backup_s:.1f} s, a restore {c.restore_s:.1f} s, each a `qkv` process): "
             f"**{len(c.backups_bad)} backups that did not verify, "
             f"{len(c.restores_partial)} restores partial under the target name**, "
             f"{len(c.reruns_failed)} reruns that failed. Left in the target store: "
             f"{left[0]} whole restored collections that `--replace` moved `live` off (for "
             f"the operator to drop) and {left[1]} partial ones (a killed restore whose "
             "backup the next cycle replaced, so no rerun finished it; no name points at "
             "them)."]
    for title, items in (("Backups", c.backups_bad), ("Restores", c.restores_partial),
                         ("Reruns", c.reruns_failed)):
        if items:
            lines += ["", f"{title} (first 5):", *[f"- {x}" for x in items[:5]]]
    section = "\n".join(lines)
    print(section)
    record("backup_crash", command, {  # the headline figures first: the summary shows 4
        "backups_bad": len(c.backups_bad), "restores_partial": len(c.restores_partial),
        "reruns_failed": len(c.reruns_failed), "cycles": c.cycles, "rows": args.rows,
        "kills_landed": c.kills, "replaced_left": left[0],
        "partial_left": left[1],
        "backup_s": round(c.backup_s, 1), "restore_s": round(c.restore_s, 1),
        "seconds": round(seconds)}, section=section, results=args.results)


if __name__ == "__main__":
    main()
