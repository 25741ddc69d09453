"""Crasher: ``kill -9`` the server every few seconds while clients upsert, and check after
each restart that every acknowledged document is there (Qdrant's crasher test, on qkv).

Usage: python bench/crasher.py [--store lite|faiss] [--cycles 50] [--writers 4]
       [--model DIR] [--results DIR]

``qkv serve`` runs on a fresh store; ``--writers`` threads upsert batches of new ids over
HTTP and record each batch the server acknowledged (200). Every 1-3 s (random) the server
is killed with SIGKILL and started again; then the collection's count must be at least the
acknowledged total (a 503 there, "store unavailable", is retried for up to 60 s and
counted: on the Intel machine the first count after a restart took longer than the store's
10 s timeout while Lite merged 70,000 rows into one segment and indexed it as it started),
and every id acknowledged in the last second before the kill, plus 100
others at random, must read back (GET). Meanwhile a reader reads acknowledged ids at random
all the time, across the kills and restarts: a 404 is a document unreadable at that moment.
Prints a line per cycle and a markdown section, recorded with the figures
(``bench/machine.py``). ``tests/api/test_crasher.py`` runs a few cycles of it.
"""

from __future__ import annotations

import argparse
import random
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BATCH = 16
CHECK_SAMPLE = 100


COUNT_RETRY_S = 60.0  # how long the count after a restart may answer 503 before it fails


@dataclass
class Crashes:
    cycles: int = 0
    acked: dict[str, float] = field(default_factory=dict)  # id -> when acknowledged
    order: list[str] = field(default_factory=list)  # the same ids, read without the lock
    lost: list[str] = field(default_factory=list)
    short_counts: list[tuple[int, int]] = field(default_factory=list)  # (count, acked)
    checked: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failed_reads: dict[str, int] = field(default_factory=dict)  # "status body" -> how many
    # unreadable right after a restart, readable 1 s later: an open defect (issue 44), kept
    # apart from loss so that the loss check stays exact
    transient: list[str] = field(default_factory=list)
    # the continuous reader: acknowledged ids read back all the time, across kills
    reads: int = 0
    read_answers: dict[int, int] = field(default_factory=dict)  # status -> how many
    unreadable: list[str] = field(default_factory=list)  # acknowledged, answered 404
    # the collection's count right after a restart answered 503 (retry): seconds until it
    # answered, one entry a restart where it did (Lite merging and indexing at its start)
    count_waits: list[float] = field(default_factory=list)  # (and any over 1 s)
    count_503: int = 0  # restarts whose count answered 503 at least once


def _reader(base: list[str], crashes: Crashes, stop: threading.Event, seed: int) -> None:
    """Read acknowledged documents back at random, all the time: before, during and right
    after each restart (without the writers' lock, which the check after a restart holds).
    A connection refused (the server down) is no answer; a 404 for an acknowledged id is a
    document unreadable at that moment."""
    rnd = random.Random(seed)
    with httpx.Client(timeout=30) as c:
        while not stop.is_set():
            if not crashes.order:
                time.sleep(0.05)
                continue
            i = crashes.order[rnd.randrange(len(crashes.order))]
            try:
                r = c.get(f"{base[0]}/v1/collections/crash/documents/{i}")
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            crashes.reads += 1
            crashes.read_answers[r.status_code] = crashes.read_answers.get(r.status_code, 0) + 1
            if r.status_code == 404:
                crashes.unreadable.append(i)


def _writer(base: list[str], w: int, crashes: Crashes, lock: threading.Lock,
            stop: threading.Event) -> None:
    n = 0
    with httpx.Client(timeout=30) as c:
        while not stop.is_set():
            ids = [f"w{w}-{n + i}" for i in range(BATCH)]
            docs = [{"id": i, "text": f"document {i} about dogs and parks"} for i in ids]
            try:
                r = c.post(f"{base[0]}/v1/collections/crash/documents",
                           json={"documents": docs})
            except httpx.TransportError:  # the server is down: not acknowledged
                time.sleep(0.2)
                continue
            with lock:
                crashes.statuses[r.status_code] = crashes.statuses.get(r.status_code, 0) + 1
                if r.status_code == 200:
                    now = time.monotonic()
                    crashes.acked.update((i, now) for i in ids)
                    crashes.order.extend(ids)
            n += BATCH


def _check(base: str, crashes: Crashes, killed_at: float, rnd: random.Random) -> None:
    acked = dict(crashes.acked)
    t0 = time.monotonic()
    r = httpx.get(f"{base}/v1/collections/crash", timeout=60)
    crashes.count_503 += r.status_code == 503
    while r.status_code == 503 and time.monotonic() - t0 < COUNT_RETRY_S:
        time.sleep(1.0)  # "store_unavailable": what a client does, retry (counted)
        r = httpx.get(f"{base}/v1/collections/crash", timeout=60)
    if time.monotonic() - t0 > 1.0:
        crashes.count_waits.append(round(time.monotonic() - t0, 1))
    if r.status_code != 200:
        raise RuntimeError(f"collection after restart: {r.status_code} {r.text}")
    count = r.json()["count"]
    if count < len(acked):
        crashes.short_counts.append((count, len(acked)))
    recent = [i for i, t in acked.items() if t >= killed_at - 1.0]
    others = rnd.sample(sorted(acked), min(CHECK_SAMPLE, len(acked)))
    with httpx.Client(base_url=base, timeout=60) as c:
        for i in {*recent, *others}:
            r = c.get(f"/v1/collections/crash/documents/{i}")
            if r.status_code != 200:
                time.sleep(1.0)
                if c.get(f"/v1/collections/crash/documents/{i}").status_code == 200:
                    crashes.transient.append(i)
                else:
                    crashes.lost.append(i)
                why = (f"{r.status_code} {r.json()['error']['code']}, acknowledged "
                       f"{killed_at - acked[i]:.1f} s before the kill")
                crashes.failed_reads[why] = crashes.failed_reads.get(why, 0) + 1
            crashes.checked += 1


def run(store: str, model: str, cycles: int, writers: int, log_dir: Path,
        seed: int = 0, verbose: bool = True) -> Crashes:
    sys.path.insert(0, str(ROOT / "tests/api"))
    sys.path.insert(0, str(ROOT / "tests"))
    from uvicorn_server import UvicornServer

    rnd = random.Random(seed)
    server = UvicornServer(log_dir / "crasher-serve.log", args=["--store", store, "--model",
                                                                 model],
                           env={"QKV_AUTO_TUNE": "false"})
    base = [server.start()]
    httpx.post(f"{base[0]}/v1/collections", json={"name": "crash"}, timeout=60)
    crashes, lock, stop = Crashes(), threading.Lock(), threading.Event()
    threads = [threading.Thread(target=_writer, args=(base, w, crashes, lock, stop))
               for w in range(writers)]
    threads.append(threading.Thread(target=_reader, args=(base, crashes, stop, seed)))
    for t in threads:
        t.start()
    try:
        for cycle in range(cycles):
            time.sleep(rnd.uniform(1.0, 3.0))
            assert server.proc is not None
            server.proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            server.proc.wait(30)
            server.proc = None
            base[0] = server.start()
            with lock:
                _check(base[0], crashes, killed_at, rnd)
            crashes.cycles = cycle + 1
            if verbose:
                print(f"cycle {cycle + 1}: {len(crashes.acked)} acknowledged, "
                      f"{len(crashes.lost)} lost, {len(crashes.transient)} transient, "
                      f"counts short {len(crashes.short_counts)}; reader: "
                      f"{crashes.reads} reads, {crashes.read_answers}",
                      crashes.failed_reads or "", flush=True)
    finally:
        stop.set()
        for t in threads:
            t.join()
        server.stop()
    return crashes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", choices=("lite", "faiss"), default="lite")
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--model", default="models/encoder-default")
    sys.path.insert(0, str(ROOT / "bench"))
    from machine import add_results_arg, record, stamp

    add_results_arg(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "lite.db") if args.store == "lite" else f"faiss://{tmp}/f"
        t0 = time.perf_counter()
        try:
            c = run(store, args.model, args.cycles, args.writers, Path(tmp))
        except BaseException:  # the server's log outlives the run, to see why
            kept = ROOT / "var/bench/crasher-serve.log"
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / "crasher-serve.log", kept)
            print(f"the server's log: {kept}", file=sys.stderr)
            raise
        seconds = time.perf_counter() - t0
    command = shlex.join(["python", *sys.argv])
    section = "\n".join([
        f"## Crasher: kill -9 under writers ({stamp()})", "", f"`{command}`", "",
        f"{args.store}: {c.cycles} kill -9 cycles in {seconds:.0f} s, {args.writers} writers, "
        f"{len(c.acked):,} documents acknowledged, {c.checked:,} read back after restarts: "
        f"**{len(c.lost)} lost**, {len(c.transient)} unreadable right after a restart and "
        f"readable 1 s later, {len(c.short_counts)} counts below the acknowledged total; "
        f"the count after a restart took over 1 s after {len(c.count_waits)} restarts "
        f"(up to {max(c.count_waits, default=0):.0f} s) and answered 503 (retried) after "
        f"{c.count_503}. "
        f"Answers: {dict(sorted(c.statuses.items()))}. A reader reading acknowledged "
        f"documents all the time, across the kills: {c.reads:,} reads, "
        f"**{len(c.unreadable)} answered 404**; answers "
        f"{dict(sorted(c.read_answers.items()))}."])
    print(section)
    record("crasher", command, {
        "store": args.store, "lost": len(c.lost), "transient": len(c.transient),
        "counts_short": len(c.short_counts), "cycles": c.cycles, "seconds": round(seconds),
        "count_slow_restarts": len(c.count_waits), "count_503_restarts": c.count_503,
        "count_longest_s": max(c.count_waits, default=0.0),
        "writers": args.writers, "acknowledged": len(c.acked), "read_back": c.checked,
        "reader_reads": c.reads, "reader_404": len(c.unreadable),
        "reader_answers": {str(k): v for k, v in sorted(c.read_answers.items())},
        "answers": {str(k): v for k, v in sorted(c.statuses.items())}},
        section=section, results=args.results)


if __name__ == "__main__":
    main()
