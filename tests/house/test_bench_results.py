"""Benchmark results are data (issue 42): every bench script records its figures as JSON lines
in ``bench/results/NAME.jsonl`` through ``bench/machine.py``'s ``record``, and
``bench/report.py`` makes ``bench/RESULTS.md`` and ``bench/history/`` from them. Checked
here: the committed lines are well formed, the scripts record and never append to a
markdown file, the committed pages are what the generator writes, and a record → generate
round trip in a scratch directory (never the repository's ``bench/results``)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
REQUIRED = ("date", "machine", "command", "commit", "figures")
# scripts with a __main__ that are not benchmarks: a data builder, and the generator itself
NOT_BENCHMARKS = {"devcollections.py", "report.py", "adapt_serve.py", "query_sides.py"}  # helpers


def by_path(name: str) -> ModuleType:
    """``bench/NAME.py`` as a module, the way the docs site loads ``report.py``."""
    spec = importlib.util.spec_from_file_location(f"qkv_test_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scripts() -> list[Path]:
    return [p for p in sorted(BENCH.glob("*.py")) if p.name not in NOT_BENCHMARKS
            and 'if __name__ == "__main__":' in p.read_text(encoding="utf-8")]


def test_every_result_line_is_a_record() -> None:
    files = sorted((BENCH / "results").glob("*.jsonl"))
    assert files, "no bench/results/*.jsonl"
    for path in files:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            row = json.loads(line)
            where = f"{path.name}:{i}"
            assert isinstance(row, dict), where
            assert all(k in row for k in REQUIRED), (where, sorted(row))
            assert isinstance(row["figures"], dict) and row["figures"], where
            assert isinstance(row["command"], str) and row["command"], where
            assert row["date"] is None or re.fullmatch(r"\d{4}-\d\d-\d\d", row["date"]), where
            if row.get("backfilled"):
                assert "bench/history/" in row["source"], where


def test_every_bench_script_records_and_none_appends_markdown() -> None:
    found = scripts()
    assert len(found) >= 20, [p.name for p in found]
    for path in found:
        assert "record(" in path.read_text(encoding="utf-8"), f"{path.name} does not record"
    for path in sorted(BENCH.glob("*.py")):  # only the generator writes the pages
        if path.name not in ("report.py", "machine.py"):
            text = path.read_text(encoding="utf-8")
            assert "RESULTS.md" not in text and "append_results" not in text, path.name


def test_committed_pages_are_what_the_generator_writes() -> None:
    env = {k: v for k, v in os.environ.items() if k != "QKV_BENCH_RESULTS"}
    done = subprocess.run([sys.executable, "bench/report.py", "--check"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    page = (BENCH / "RESULTS.md").read_text(encoding="utf-8")
    assert len(page.encode()) <= 15_500, "bench/RESULTS.md should stay slim"
    assert "history/RESULTS-narrative.md" in page
    assert (BENCH / "history/RESULTS-narrative.md").is_file()


def test_record_then_generate_newest_first(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    repo = {p: p.read_bytes() for p in (BENCH / "results").glob("*.jsonl")}
    machine, report = by_path("machine"), by_path("report")
    results = tmp_path / "results"
    machine.record("demo", "python bench/demo.py --n 1", {"sentences_per_s": 100.0},
                   when="2026-01-01", at="aaaaaaa", results=results,
                   section="## Demo (old)\n\nold run")
    monkeypatch.setenv("QKV_BENCH_RESULTS", str(results))  # the other way in: the variable
    machine.record("demo", "python bench/demo.py --n 2", {"sentences_per_s": 250.5,
                                                          "vs_minilm": 5.7},
                   when="2026-01-02", at="bbbbbbb", section="## Demo (new)\n\nnew run")
    assert {p: p.read_bytes() for p in (BENCH / "results").glob("*.jsonl")} == repo
    rows = [json.loads(x) for x in (results / "demo.jsonl").read_text().splitlines()]
    assert [r["commit"] for r in rows] == ["aaaaaaa", "bbbbbbb"]
    assert rows[0]["machine"]["cores"] == os.cpu_count() and rows[1]["section"]

    summary = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert summary == report.render_page(results, "history/")
    assert "250.5" in summary and "100.0" not in summary  # the newest run only
    assert "`python bench/demo.py --n 2`" in summary and "(history/demo.md)" in summary
    history = (tmp_path / "history/demo.md").read_text(encoding="utf-8")
    assert history.index("2026-01-02") < history.index("2026-01-01")  # newest first
    assert "#### Demo (old)" in history and "old run" in history
    assert report.check(results) == []

    with open(results / "demo.jsonl", "a", encoding="utf-8") as f:  # data edited by hand
        f.write(json.dumps({**rows[1], "date": "2026-01-03"}) + "\n")
    assert report.check(results)
    assert report.main(["--results", str(results)]) == 0 and report.check(results) == []


def test_two_runs_of_one_command_at_one_commit_stay_two_runs(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """Each process stamps its rows: a second run of the same command, at the same commit on
    the same day, is shown as the newest run, not merged into the first."""
    machine, report = by_path("machine"), by_path("report")
    results = tmp_path / "results"
    for run, rate in (("first", 1.0), ("second", 2.0)):
        monkeypatch.setattr(machine, "RUN", run)
        for store in ("faiss", "lite"):
            machine.record("demo", "python bench/demo.py", {"store": store, "rate": rate},
                           when="2026-01-01", at="aaaaaaa", results=results, regenerate=False)
    rows = [json.loads(x) for x in (results / "demo.jsonl").read_text().splitlines()]
    assert [r["run"] for r in rows] == ["first", "first", "second", "second"]
    assert [[r["figures"]["rate"] for r in run] for run in report.runs(rows)] == [
        [2.0, 2.0], [1.0, 1.0]]
    old = [{k: v for k, v in r.items() if k != "run"} for r in rows]  # rows from before
    assert len(report.runs(old)) == 1


def test_results_must_name_a_directory(tmp_path: Path) -> None:
    machine = by_path("machine")
    with pytest.raises(SystemExit, match="directory"):
        machine.record("demo", "x", {"a": 1}, results=tmp_path / "RESULTS.md")


def test_a_run_is_labelled_by_its_code_not_by_the_results_it_wrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run records a row per model: the first row's results (and pages) must not mark the
    later rows as made from uncommitted code (the report would split the run in two)."""
    machine = by_path("machine")
    repo = tmp_path / "repo"
    (repo / "bench/results").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "bench/results/demo.jsonl").write_text("")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t",
                                                "commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    monkeypatch.setattr(machine, "ROOT", repo)
    head = machine.commit()
    assert head and "uncommitted" not in head
    (repo / "bench/results/demo.jsonl").write_text("{}\n")  # an output: still clean
    assert machine.commit() == head
    (repo / "code.py").write_text("x = 2\n")  # the code: marked
    assert machine.commit() == head + " + uncommitted changes"


def test_the_summary_says_when_a_cpu_had_only_avx2() -> None:
    # one CPU model name ("AMD EPYC") covered AVX2-only and AVX-512 machines: the summary
    # line must tell them apart, the history line lists the flags themselves
    report = by_path("report")
    avx2 = {"cpu": "AMD EPYC", "cores": 2, "flags": ["avx2", "fma"]}
    avx512 = {"cpu": "AMD EPYC", "cores": 2, "flags": ["avx2", "avx512f", "fma"]}
    assert report.machine_text(avx2, flags=False) == "AMD EPYC, 2 cores, AVX2 only"
    assert report.machine_text(avx512, flags=False) == "AMD EPYC, 2 cores"
    assert report.machine_text(avx2) == "AMD EPYC, 2 cores (avx2, fma)"
