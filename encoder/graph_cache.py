"""The onnx backend's built graphs kept on disk, so that a process loading an encoder it has
loaded before skips building them.

Loading the shipped encoder on the onnx backend took 2.3 s, nearly all of it the graph
(:mod:`encoder.onnx_graph`): importing ``onnx`` (1.2 s), building the graph that measures the
activation ranges, running it over the calibration texts, and building the final graph
(``encoder/load`` timed with cProfile, AMD EPYC, AVX2 only). Every ``qkv`` command that
encodes, every ``qkv serve`` start and every Ray worker paid it, and ``qkv index`` twice
(the job, then its calibration).

The serialised final graph and its activation ranges are written to ``<dir>/<key>.onnx``
and ``<dir>/<key>.json``, where the key is a hash of everything the graph is made from:
the weights as they are now (not the checkpoint's recorded fingerprint: training changes
them in place), the architecture, whether it is int8, the calibration's token ids, this
module's and :mod:`encoder.onnx_graph`'s source, the ``onnx`` and ``onnxruntime`` versions
and the CPU's model and flags (the ranges are measured on it). A file that does not match
the hash recorded beside it is ignored and rebuilt; at most :data:`KEEP` graphs stay, the
least recently used removed first. The directory is ``QKV_GRAPH_CACHE``
(``api.settings.Runtime``; empty: no cache), handed here once at the process's edge
(:func:`use`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

KEEP = 8  # graphs kept (the shipped encoder's is about 19 MB)
SOURCES = ("onnx_graph.py", "graph_cache.py")


class Defaults:
    """The process's cache directory (None: no cache), set at its edge (:func:`use`)."""

    directory: Path | None = None


def use(directory: Path | str | None) -> None:
    """Keep built graphs in ``directory`` (None or empty: build them every time)."""
    Defaults.directory = Path(directory).expanduser() if directory else None


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


def key(model: Any, int8: bool, calibration: Sequence[Sequence[int]] | None) -> str:
    """The hash of everything ``model``'s graph is made from (module docstring)."""
    from encoder.checkpoint import hash_weights
    from encoder.cpu import cpu_flags, cpu_model

    h = hashlib.blake2b(digest_size=20)
    here = Path(__file__).parent
    for name in SOURCES:
        h.update((here / name).read_bytes())
    cpu = [cpu_model(), *sorted(cpu_flags())]  # one model name covers CPUs of other kernels
    h.update(json.dumps({"config": model.config.to_dict(), "int8": int8, "cpu": cpu,
                         "onnx": _version("onnx"), "onnxruntime": _version("onnxruntime")},
                        sort_keys=True, default=str).encode())
    hash_weights(h, model)
    h.update(json.dumps([list(s) for s in calibration or []]).encode())
    return h.hexdigest()


def load(directory: Path, k: str) -> tuple[bytes, dict[str, float] | None] | None:
    """The graph and activation ranges cached under ``k``, or None (absent or damaged)."""
    graph, meta = directory / f"{k}.onnx", directory / f"{k}.json"
    try:
        info = json.loads(meta.read_text())
        data = graph.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or hashlib.sha256(data).hexdigest() != info.get("sha256"):
        log.warning("ignoring the damaged cached encoder graph %s", graph)
        return None
    try:  # recently used: kept longest
        os.utime(graph)
    except OSError:
        pass
    ranges = info.get("ranges")
    return data, ({str(n): float(v) for n, v in ranges.items()} if ranges else None)


def save(directory: Path, k: str, data: bytes, ranges: dict[str, float] | None) -> None:
    """Cache ``data`` and ``ranges`` under ``k`` (each file written whole, then renamed),
    then drop the least recently used beyond :data:`KEEP`. A directory that cannot be
    written to only costs the next process the build."""
    tmp = f".{uuid.uuid4().hex}.tmp"  # two threads or processes may write one key at once
    try:
        directory.mkdir(parents=True, exist_ok=True)
        graph, meta = directory / f"{k}.onnx", directory / f"{k}.json"
        (directory / (graph.name + tmp)).write_bytes(data)
        os.replace(directory / (graph.name + tmp), graph)
        (directory / (meta.name + tmp)).write_text(json.dumps(
            {"sha256": hashlib.sha256(data).hexdigest(), "ranges": ranges}))
        os.replace(directory / (meta.name + tmp), meta)
    except OSError as e:
        log.warning("could not cache the encoder graph in %s: %s", directory, e)
        return
    used: list[tuple[float, Path]] = []
    for path in directory.glob("*.onnx"):
        try:
            used.append((path.stat().st_mtime, path))
        except OSError:  # removed meanwhile by another process
            pass
    for _, old in sorted(used, reverse=True)[KEEP:]:
        try:
            old.unlink(missing_ok=True)
            old.with_suffix(".json").unlink(missing_ok=True)
        except OSError:
            pass
