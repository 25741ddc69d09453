"""An adapt job killed at any point (wiring.adapting.recover, issue 38): one killed during
its swap is finished on the next start; one killed before it leaves the old collection
serving and its half-built copy is dropped; the journal says which."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from index import MilvusStore
from index.store import Item
from wiring import adapting


def _fill(store: MilvusStore, name: str, n: int = 5) -> None:
    store.create(name, 4, None)
    x = np.eye(4, dtype=np.float32)[np.arange(n) % 4]
    store.upsert(name, [Item(str(i), v, f"text {i}") for i, v in enumerate(x)])


def _journal(root: Path, **state: object) -> adapting.Journal:
    j = adapting.Journal.new(root, str(state["collection"]), {})
    j.update(**state)
    return j


@pytest.fixture
def store(tmp_path: Path) -> MilvusStore:
    return MilvusStore(str(tmp_path / "m.db"))


def test_a_swap_under_way_is_finished(store: MilvusStore, tmp_path: Path) -> None:
    _fill(store, "rc")
    _fill(store, "rc_a1", 7)
    j = _journal(tmp_path, collection="rc", physical="rc", target="rc_a1", phase="swapping")
    said = adapting.recover(store, tmp_path)
    assert said == [f"{j.state['id']}: done"]
    assert store.list_aliases() == {"rc": "rc_a1"}
    assert "rc" not in store.list_collections()
    assert store.count("rc") == 7  # the new copy answers under the old name
    assert adapting.Journal.load(j.path).state["phase"] == "done"
    assert adapting.recover(store, tmp_path) == []  # finished jobs are left alone


def test_an_alias_and_its_other_aliases_follow_and_the_old_one_goes(
        store: MilvusStore, tmp_path: Path) -> None:
    _fill(store, "re_v1")
    _fill(store, "re_a1", 6)
    store.set_alias("re", "re_v1")
    store.set_alias("re_also", "re_v1")
    _journal(tmp_path, collection="re", physical="re_v1", target="re_a1", phase="swapping")
    t0 = time.monotonic()
    adapting.recover(store, tmp_path)
    assert store.list_aliases() == {"re": "re_a1", "re_also": "re_a1"}
    assert "re_v1" not in store.list_collections()
    assert time.monotonic() - t0 >= adapting.DROP_GRACE_S  # readers had time to move


@pytest.mark.parametrize("phase", ["reading", "training", "re-indexing", "calibrating"])
def test_a_job_killed_before_its_swap_leaves_the_old_collection_serving(
        store: MilvusStore, tmp_path: Path, phase: str) -> None:
    _fill(store, "rd")
    _fill(store, "rd_a1", 2)
    (tmp_path / "enc+rd").mkdir()
    j = _journal(tmp_path, collection="rd", physical="rd", target="rd_a1", phase=phase,
                 encoder="enc+rd")
    adapting.recover(store, tmp_path)
    assert sorted(store.list_collections()) == ["rd"] and store.list_aliases() == {}
    assert store.count("rd") == 5
    state = adapting.Journal.load(j.path).state
    assert state["phase"] == "interrupted" and phase in state["reason"]
    # an encoder half-trained is removed; one trained (re-indexing on) is kept, listed
    assert (tmp_path / "enc+rd").exists() == (phase not in ("reading", "training"))


def test_a_job_another_live_replica_runs_is_left_to_it(store: MilvusStore, tmp_path: Path
                                                       ) -> None:
    """Replicas share the encoders directory: one that starts while another adapts must not
    undo that job. A live process on this host, or a recent journal from another host, owns
    it; a dead process or a journal quiet for OWNER_STALE_S owns nothing, and the job is
    recovered as before."""
    import socket
    import subprocess
    import sys

    _fill(store, "rl")
    _fill(store, "rl_a1", 3)
    host = socket.gethostname()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        mine = _journal(tmp_path, collection="rl", physical="rl", target="rl_a1",
                        phase="re-indexing", owner=f"{host}:{alive.pid}")
        there = _journal(tmp_path, collection="rl", physical="rl", target="rl_a1",
                         phase="training", owner="another-host:7")
        said = adapting.recover(store, tmp_path)
        assert sorted(said) == sorted([
            f"{mine.state['id']}: re-indexing on {host}:{alive.pid}, left to it",
            f"{there.state['id']}: training on another-host:7, left to it"])
        assert "rl_a1" in store.list_collections()  # its half-built copy stays
        assert adapting.Journal.load(mine.path).state["phase"] == "re-indexing"
    finally:
        alive.kill()
        alive.wait()
    stale = adapting.Journal.load(there.path)
    stale.state["updated_at"] = time.time() - adapting.OWNER_STALE_S - 1
    stale.save()
    said = adapting.recover(store, tmp_path)  # the process is gone, the host is quiet
    assert sorted(said) == sorted([f"{mine.state['id']}: interrupted",
                                   f"{there.state['id']}: interrupted"])
    assert "rl_a1" not in store.list_collections()
