"""A backup job's state while it runs (issue 72): written again every ``BEAT_S``, so a
replica on another host, which reads a job silent for 10 minutes as interrupted, sees a long
one as running; its end is written once, never overwritten by a late beat."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from wiring import backups as backups_module
from wiring.adapting import held_elsewhere
from wiring.backups import Backups


def test_a_long_job_keeps_its_state_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.setattr(backups_module, "BEAT_S", 0.05)

    async def call(work: Any) -> Any:  # the store's worker: a job that takes 0.6 s
        await asyncio.sleep(0.6)
        return work()

    jobs = Backups(None, tmp_path, call, None, None, lambda: None)  # type: ignore[arg-type]

    async def scenario() -> tuple[dict[str, Any], list[float], dict[str, Any]]:
        state = await jobs._job("backup", "long", lambda: {"rows": 3}, wait=False)
        path = tmp_path / ".jobs" / f"{state['id']}.json"
        seen = []
        for _ in range(5):
            await asyncio.sleep(0.1)
            seen.append(json.loads(path.read_text())["updated_at"])
        while state["id"] in jobs._live:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # a beat after the end would write "running" again
        return state, seen, json.loads(path.read_text())

    state, seen, end = asyncio.run(scenario())
    assert seen == sorted(seen) and seen[-1] > seen[0] > state["created_at"]
    elsewhere = dict(json.loads(json.dumps(state)), owner="another-host:1",
                     updated_at=seen[-1])
    assert held_elsewhere(elsewhere, now=seen[-1] + 599)  # fresh: another host's, alive
    assert not held_elsewhere(elsewhere, now=seen[-1] + 601)
    assert end["state"] == "done" and end["result"] == {"rows": 3}
    assert end["updated_at"] >= seen[-1] and time.time() >= end["updated_at"]


def test_a_job_that_ends_while_its_state_is_read_is_not_interrupted(tmp_path: Path) -> None:
    """The CI failure of stop 81: a poll read "running" from the file, the job then wrote
    its end and left ``_live``, and the poll called it interrupted."""
    release = asyncio.Event()

    async def call(work: Any) -> Any:
        await release.wait()
        return work()

    jobs = Backups(None, tmp_path, call, None, None, lambda: None)  # type: ignore[arg-type]
    load = jobs._load

    async def scenario() -> dict[str, Any]:
        state = await jobs._job("restore", "x", lambda: {"rows": 1}, wait=False)
        loop = asyncio.get_running_loop()

        def slow_load(job_id: str) -> dict[str, Any] | None:
            seen = load(job_id)  # "running"; the job ends before this read returns
            asyncio.run_coroutine_threadsafe(finish(state["id"]), loop).result(timeout=10)
            return seen

        async def finish(job_id: str) -> None:
            release.set()
            while job_id in jobs._live:
                await asyncio.sleep(0.01)

        jobs._load = slow_load  # type: ignore[method-assign]
        return await jobs.state(state["id"])

    seen = asyncio.run(scenario())
    assert seen["state"] == "running", seen  # stale but true: the next poll reads "done"
    state = json.loads(next((tmp_path / ".jobs").glob("*.json")).read_text())
    assert state["state"] == "done"
