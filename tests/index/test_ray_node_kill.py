"""``qkv index --engine ray`` when a whole node dies mid-run: a simulated two-node cluster
(``ray.cluster_utils.Cluster``, one CPU a node, one encoder worker on each), the node that
holds one of the workers removed without grace (its raylet and every process on it
killed) while the job runs, and a replacement node added, as an autoscaler would. The job
completes by itself with exactly the input's distinct ids, the last occurrence winning."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_index_cli import write_corpus
from test_ray_index import check_job, check_store, markers

from index import Fields


def encoder_pids(psutil: Any, raylet: Any) -> list[int]:
    """The encoder workers among a raylet's processes."""
    pids = []
    for p in raylet.children(recursive=True):
        try:
            if "EncodeRanges" in " ".join(p.cmdline()):
                pids.append(p.pid)
        except psutil.NoSuchProcess:
            continue
    return pids


@pytest.mark.slow
@pytest.mark.long
def test_a_whole_node_killed_mid_run(tmp_path: Path, tiny_model_dir: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster
    psutil = pytest.importorskip("psutil")

    from index import JobConfig
    from wiring.index_job import IndexJob, RayOptions
    from wiring.ray_indexing import index_with_ray

    monkeypatch.setenv("RAY_DISABLE_USAGE_STATS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src, state, db = write_corpus(tmp_path / "c.jsonl"), tmp_path / "jobs", tmp_path / "q.db"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    doomed = cluster.add_node(num_cpus=1)
    result: dict[str, Any] = {}

    def job() -> None:
        try:
            config = JobConfig(state_path=state / "nodes.progress.json",
                               rejects_path=state / "nodes.rejects.jsonl",
                               fields=Fields(value="tgt"), batch_size=20, retries=5,
                               backoff_s=1.0, progress_bar=False)
            result["summary"] = index_with_ray(
                IndexJob(inputs=[src], store=str(db), model=tiny_model_dir, collection="docs",
                         timeout=30.0, device="cpu", engine="ray", ray=RayOptions(workers=2)),
                config)
        except BaseException as e:  # noqa: BLE001  (reported by the test below)
            result["error"] = e

    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        runner = threading.Thread(target=job, daemon=True)
        runner.start()
        deadline = time.monotonic() + 300
        raylet = psutil.Process(doomed.all_processes["raylet"][0].process.pid)
        on_doomed: list[int] = []  # the encoder worker that the second node's raylet runs
        while time.monotonic() < deadline and runner.is_alive() and not on_doomed:
            if markers(state) >= 5:
                on_doomed = encoder_pids(psutil, raylet)
            time.sleep(0.2)
        assert on_doomed, f"no worker ran on the second node: {result}"
        done_before = markers(state)
        cluster.remove_node(doomed, allow_graceful=False)
        cluster.add_node(num_cpus=1)  # the replacement
        runner.join(timeout=600)
        assert not runner.is_alive(), "the job did not finish after the node died"
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert "error" not in result, result.get("error")
    assert done_before < 91, "the job was over before the node died"
    figures = check_job(state)
    assert result["summary"].complete and figures["ranges_done"] == 91
    check_store(str(db), "docs")
    workers = {json.loads(p.read_text())["worker"] for p in (state / "nodes.done").glob("*")}
    assert any(w.endswith(f":{on_doomed[0]}") for w in workers)  # it did work, then died
    assert len(workers) >= 2
