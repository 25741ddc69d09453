"""Token memories (:mod:`decoder.knn`) wired to translation pairs: built from a split of a
parallel corpus with a decoder (a retrieval-augmented one reads each pair's neighbours as
in training: the nearest other pairs), and used by ``qkv eval-decoder --knn``."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from decoder.data import read_pairs
from decoder.knn import TokenMemory, collect_keys

log = logging.getLogger(__name__)


def pair_neighbours(dec: Any, sources: list[str], targets: list[str], encoder_dir: Path,
                    cache: str, device: str | None) -> list[list[tuple[str, float]]] | None:
    """What the decoder reads for each pair when teacher-forced over them: None for a
    baseline (k = 0); else its training k nearest *other* pairs (value, weight), as it
    was trained."""
    from wiring.translation import memory_for

    k, _ = trained_retrieval(dec)
    if k == 0:
        return None
    tm, t = memory_for(dec, sources, targets, None, encoder_dir, cache, device)
    found = tm.search(sources, k, list(range(len(sources))), t, xq=tm.xb)
    return [[(targets[j], w) for j, w in row] for row in found]


def build_token_memory(model: Path, data: Path | None, out: Path, split: str = "train",
                       src_lang: str = "en", tgt_lang: str = "fr",
                       encoder_dir: Path = Path("models/encoder-default"),
                       memory_cache: str = "var/tm-cache", device: str | None = None,
                       batch_size: int = 64, progress: bool = True,
                       pairs_jsonl: Path | None = None) -> dict[str, Any]:
    """Build the token memory of ``split``'s pairs of ``data`` (or of the rows of
    ``pairs_jsonl``, whose ids it keeps: votes name them) with the decoder ``model`` into
    ``out``; returns what was built (keys, bytes, seconds)."""
    import decoder
    from wiring.translation import read_memory_rows

    dec = decoder.load(model, device=device)
    ids: list[str] | None = None
    if pairs_jsonl is not None:
        ids, sources, targets = read_memory_rows(pairs_jsonl)
        source = str(pairs_jsonl)
    else:
        assert data is not None, "give data (and split) or pairs_jsonl"
        pairs = read_pairs(data, split, src_lang, tgt_lang)
        sources, targets = [p[0] for p in pairs], [p[1] for p in pairs]
        source = f"{data} {split}"
    t0 = time.perf_counter()
    nbrs = pair_neighbours(dec, sources, targets, encoder_dir, memory_cache, device)
    keys, values, rows = collect_keys(dec, sources, targets, nbrs, batch_size, progress)
    t1 = time.perf_counter()
    memory = TokenMemory.build(keys, values, rows, dec.name, dec.fingerprint)
    memory.meta.update({"pairs": len(sources), "source": source,
                        "neighbours": nbrs is not None})
    if ids is not None:
        memory.meta["ids"] = ids
    memory.save(out)
    t2 = time.perf_counter()
    size = sum(f.stat().st_size for f in out.iterdir())
    return {"pairs": len(sources), "keys": memory.size, "layout": memory.meta["layout"],
            "bytes": size, "bytes_per_pair": round(size / max(1, len(sources))),
            "keys_s": round(t1 - t0, 1), "index_s": round(t2 - t1, 1)}


def trained_retrieval(dec: Any) -> tuple[int, float]:
    """(k, temperature) the decoder was trained with: the neighbours it reads."""
    from index.attend import DEFAULT_TEMPERATURE

    training = dec.meta.get("training") or {}
    t = (training.get("retrieval") or {}).get("temperature") or DEFAULT_TEMPERATURE
    return int(training.get("k", 0)), float(t)


def remember(dec: Any, memory: TokenMemory, pairs: list[tuple[str, str, str]],
             neighbours: list[list[tuple[str, float]]] | None, removed: list[str]) -> int:
    """Pairs (id, source, target) upserted into a translation memory, and ids deleted from
    it: their tokens join the token memory (replacing an id's old ones) or stop voting,
    durably (:meth:`TokenMemory.append_change`), without rebuilding it. Returns the tokens
    added."""
    keys, values, rows = collect_keys(dec, [p[1] for p in pairs], [p[2] for p in pairs],
                                      neighbours)  # empty arrays for no pairs
    memory.append_change(keys, values, rows, [p[0] for p in pairs], removed)
    return int(len(values))
