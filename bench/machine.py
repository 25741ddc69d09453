"""What a benchmark ran on, and where its figures go (issue 42: benchmark results as data).

Each bench script calls :func:`record` after a run (once per model or configuration it
measured): one JSON line appended to ``DIR/NAME.jsonl`` with the date, the machine (CPU
model, cores and vector flags), the command, the commit, the figures (a dict of the numbers
it prints, units in the keys) and the markdown section it printed. ``DIR`` is the script's
``--results DIR`` when given, else ``$QKV_BENCH_RESULTS``, else ``bench/results``. Then
``bench/report.py`` regenerates the pages beside ``DIR``: ``DIR/../RESULTS.md`` (the newest
run of each benchmark) and ``DIR/../history/NAME.md`` (every run), so with the default
``bench/RESULTS.md`` and ``bench/history/``. Nothing writes into ``RESULTS.md`` by hand.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENV = "QKV_BENCH_RESULTS"
# This process's run: rows recorded by one run of a script carry the same stamp, so two
# runs of one command at one commit on one day stay two runs (bench/report.py's runs())
RUN = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# A bench script is a process's edge, as the service and the qkv command are: QKV_NO_BF16,
# QKV_ONNX_ACTIVATIONS, QKV_DEVICE ... apply to what it loads (api.settings.Runtime)
from api.settings import Runtime  # noqa: E402
from encoder.cpu import cpu_flags as all_cpu_flags  # noqa: E402
from encoder.cpu import cpu_model  # noqa: E402

Runtime().use()

OUTPUTS = ("bench/results/", "bench/history/", "bench/RESULTS.md", "docs/benchmarks")


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout

    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    # the results and the pages made from them are outputs: a run's first record must not
    # mark the run's later rows as made from other code
    changed = [line[3:] for line in git("status", "--porcelain", "-uno").splitlines()
               if not line[3:].startswith(OUTPUTS)]
    return head + (" + uncommitted changes" if changed else "")


def stamp() -> str:
    """``CPU model, N cores, commit abc1234``."""
    return f"{cpu_model()}, {os.cpu_count()} cores, commit {commit()}"


def cpu_flags() -> list[str]:
    """The vector-instruction flags that decide kernel choice (AVX2, AVX-512 parts, AMX)."""
    keep = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_int8", "fma")
    return sorted(all_cpu_flags() & set(keep))


def results_dir(results: Path | None = None) -> Path:
    """Where ``NAME.jsonl`` files go: ``results``, else ``$QKV_BENCH_RESULTS``, else
    ``bench/results``."""
    if results is None:
        results = Path(os.environ[ENV]) if os.environ.get(ENV) else ROOT / "bench/results"
    if results.suffix == ".md":  # --results used to name a markdown file to append to
        raise SystemExit(f"--results is a directory of NAME.jsonl files now, not {results}")
    return results


def add_results_arg(ap: argparse.ArgumentParser) -> None:
    """The ``--results DIR`` option every bench script takes."""
    ap.add_argument("--results", type=Path, default=None, metavar="DIR",
                    help=f"where NAME.jsonl goes (default ${ENV} or bench/results); "
                    "RESULTS.md and history/ are regenerated beside it, in DIR/..")


def _append(path: Path, row: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def record(name: str, command: str, figures: dict[str, Any],
           machine: dict[str, Any] | str | None = None, when: str | None = None,
           at: str | None = None, section: str | None = None, results: Path | None = None,
           regenerate: bool = True) -> Path:
    """Append one JSON line to ``NAME.jsonl`` in :func:`results_dir` (``results``): the
    date (``when``, default today), the machine (this one's CPU model, cores and flags, or
    ``machine`` for another one, e.g. a lent GPU), the command, the commit (``at`` for a run
    made from an earlier one), the figures and, when given, the markdown ``section`` the
    script printed, and this process's :data:`RUN`. Then, unless ``regenerate`` is false,
    rewrite the pages beside that directory (:func:`regenerate_pages`). Returns the
    ``.jsonl`` path."""
    row: dict[str, Any] = {
        "date": when or time.strftime("%Y-%m-%d"),
        "machine": machine or {"cpu": cpu_model(), "cores": os.cpu_count(),
                               "flags": cpu_flags()},
        "command": command, "commit": at or commit(), "figures": figures, "run": RUN}
    if section is not None:
        row["section"] = section.strip("\n")
    where = results_dir(results)
    path = _append(where / f"{name}.jsonl", row)
    if regenerate:
        regenerate_pages(where)
    return path


def backfill(name: str, command: str, figures: dict[str, Any], *,
             machine: dict[str, Any] | None, when: str | None, at: str | None, source: str,
             results: Path | None = None) -> Path:
    """A row for a run recorded only in prose (``bench/history/RESULTS-narrative.md``):
    every field as the prose states it, ``None`` (JSON null) where it does not; marked
    ``"backfilled": true`` with its ``source``. Pages are not regenerated."""
    row = {"date": when, "machine": machine, "command": command, "commit": at,
           "figures": figures, "backfilled": True, "source": source}
    return _append(results_dir(results) / f"{name}.jsonl", row)


def regenerate_pages(results: Path | None = None) -> list[Path]:
    """Rewrite ``RESULTS.md`` and ``history/`` beside the results directory (bench/report.py,
    loaded by path: it has no import-time side effects)."""
    spec = importlib.util.spec_from_file_location("qkv_bench_report",
                                                  Path(__file__).with_name("report.py"))
    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    written: list[Path] = report.write(results_dir(results))
    return written
