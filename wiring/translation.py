"""Translation wired together: the decoder, the qkv encoder and an in-process FAISS
translation memory, for ``qkv train-decoder`` (each training pair's neighbours), ``qkv
translate`` and ``qkv eval-decoder`` (sacreBLEU per split).

FAISS and the index package are imported only where a memory is built: a baseline (k = 0)
trains and translates on a machine without them (the lent GPUs have no FAISS)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decoder.data import read_lines, read_pairs

if TYPE_CHECKING:
    from decoder.knn import KnnOptions
    from wiring.translation_memory import TranslationMemory

log = logging.getLogger(__name__)

DEFAULT_ENCODER = Path("models/encoder-default")


def training_retriever(data: Path, src_lang: str, tgt_lang: str, encoder_dir: Path, k: int,
                        temperature: float, device: str | None,
                        cache_dir: Path | None) -> tuple[Any, dict[str, Any]]:
    """A retrieve function over the training pairs, built lazily: when neighbours.json
    already holds this retrieval, the encoder never encodes anything."""
    from wiring.components import load_encoder

    text_encoder = load_encoder(encoder_dir, device)
    record = {"encoder": str(encoder_dir), "encoder_name": text_encoder.name,
              "encoder_fingerprint": text_encoder.fingerprint, "temperature": temperature,
              "k": k, "memory": "train pairs, each pair's own entry left out"}

    memory: list[TranslationMemory] = []  # built on the first call, kept for the next

    def retrieve(queries: Any, exclude: Any) -> list[list[tuple[int, float]]]:
        if not memory:
            from wiring.translation_memory import TranslationMemory

            pairs = read_pairs(data, "train", src_lang, tgt_lang)
            memory.append(TranslationMemory.build(text_encoder, [s for s, _ in pairs],
                                                  [t for _, t in pairs], cache_dir=cache_dir))
        tm = memory[0]
        xq = tm.xb if list(queries) == tm.sources else None  # the train pairs themselves
        return tm.search(queries, k, exclude, temperature, xq=xq)

    return retrieve, record


def read_memory_jsonl(path: Path) -> tuple[list[str], list[str]]:
    """(sources, targets) of JSONL rows ``{"text": source, "value": target}``; a bad row is a
    ``ValueError`` naming its line."""
    _, sources, targets = read_memory_rows(path)
    return sources, targets


def read_memory_rows(path: Path) -> tuple[list[str], list[str], list[str]]:
    """(ids, sources, targets) of JSONL rows ``{"id", "text": source, "value": target}``
    (a row without an id gets its line number); a bad row is a ``ValueError`` naming its
    line."""
    ids, sources, targets = [], [], []
    for n, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            source, target = row["text"], row["value"]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{n}: not a JSON object with 'text' and 'value' ({e})"
                             ) from e
        if not isinstance(source, str) or not isinstance(target, str):
            raise ValueError(f"{path}:{n}: 'text' and 'value' must be strings")
        ids.append(str(row.get("id", n)))
        sources.append(source)
        targets.append(target)
    return ids, sources, targets


def memory_for(dec: Any, sources: list[str], targets: list[str], temperature: float | None,
               encoder_dir: Path, cache: str, device: str | None
               ) -> tuple[TranslationMemory, float]:
    """The memory keyed by the encoder at ``encoder_dir``, and the retrieval temperature:
    the one given, else the one the decoder was trained with."""
    from index.attend import DEFAULT_TEMPERATURE
    from wiring.components import load_encoder
    from wiring.translation_memory import TranslationMemory

    trained = (dec.meta.get("training") or {}).get("retrieval") or {}
    t = temperature or trained.get("temperature") or DEFAULT_TEMPERATURE
    text_encoder = load_encoder(encoder_dir, device)
    # ``encoder_fingerprint_served``: the same encoder stored at another precision
    keyed_by = {trained.get("encoder_fingerprint"), trained.get("encoder_fingerprint_served")}
    if trained.get("encoder_fingerprint") and text_encoder.fingerprint not in keyed_by:
        log.warning("the decoder was trained with neighbours from encoder %s, not %s (%s)",
                    trained.get("encoder_fingerprint"), text_encoder.fingerprint, encoder_dir)
    tm = TranslationMemory.build(text_encoder, sources, targets,
                                 cache_dir=Path(cache) if cache else None)
    return tm, t


def neighbours_for(dec: Any, lines: list[str], memory_src: Path | None,
                   memory_tgt: Path | None, memory_jsonl: Path | None, k: int,
                   temperature: float | None, encoder_dir: Path, cache: str,
                   device: str | None) -> list[list[tuple[str, float]]]:
    """Per line, its ``k`` nearest memory entries' (target, weight); the memory is
    ``memory_jsonl`` or the aligned ``memory_src``/``memory_tgt`` files."""
    if memory_jsonl is not None:
        sources, targets = read_memory_jsonl(memory_jsonl)
    else:
        assert memory_src is not None and memory_tgt is not None
        sources, targets = read_lines(memory_src), read_lines(memory_tgt)
    tm, t = memory_for(dec, sources, targets, temperature, encoder_dir, cache, device)
    return tm.neighbours(lines, k, t)


def evaluate_translation(
    model: Path, data: Path, splits: list[str], k: int | None = None, beam: int = 4,
    batch_size: int = 32, encoder_dir: Path = DEFAULT_ENCODER, memory_cache: str = "var/tm-cache",
    device: str | None = None, src_lang: str = "en", tgt_lang: str = "fr",
    hypotheses: Path | None = None, temperature: float | None = None,
    knn_memory: Path | None = None, knn: KnnOptions | None = None,
) -> list[dict[str, Any]]:
    """sacreBLEU of ``model`` on each split of ``data``, the memory being the train split.
    With ``knn_memory`` (a token memory built with this decoder: :mod:`decoder.knn`) each
    step's distribution is mixed with its neighbours' votes (``knn`` options).

    ``k`` defaults to the model's training k (0 for a baseline). Per split: BLEU, its
    signature, the retrieval temperature (None without neighbours), and the seconds taken
    by retrieval (encoding the sources, searching the memory; the memory itself is built
    once, before, its vectors from ``memory_cache``) and by decoding.
    """
    import sacrebleu

    import decoder

    dec = decoder.load(model, device=device)
    trained_k = int((dec.meta.get("training") or {}).get("k", 0))
    k = trained_k if k is None else k
    tm: TranslationMemory | None = None
    t: float | None = None
    if k > 0:  # one memory, keyed once, for every split
        memory = read_pairs(data, "train", src_lang, tgt_lang)
        tm, t = memory_for(dec, [p[0] for p in memory], [p[1] for p in memory], temperature,
                           encoder_dir, memory_cache, device)
    tokens = None
    if knn_memory is not None:
        from decoder.knn import KnnOptions, TokenMemory

        tokens = TokenMemory.load(knn_memory, dec.fingerprint)
        knn = knn or KnnOptions()
    rows: list[dict[str, Any]] = []
    for split in splits:
        pairs = read_pairs(data, split, src_lang, tgt_lang)
        sources, refs = [p[0] for p in pairs], [p[1] for p in pairs]
        t0 = time.perf_counter()
        neighbours = tm.neighbours(sources, k, t) if tm is not None and t is not None else None
        t1 = time.perf_counter()
        mix = None
        if tokens is not None and knn is not None:
            from decoder.knn import KnnMixer

            mix = KnnMixer(tokens, knn)
        hyps = dec.translate(sources, neighbours, beam=beam, batch_size=batch_size, mix=mix)
        t2 = time.perf_counter()
        bleu = sacrebleu.metrics.BLEU()
        score = bleu.corpus_score(hyps, [refs])
        if hypotheses is not None:
            hypotheses.mkdir(parents=True, exist_ok=True)
            (hypotheses / f"{split}.{tgt_lang}").write_text("".join(h + "\n" for h in hyps),
                                                          encoding="utf-8")
        rows.append({"model": str(model), "name": dec.name, "split": split, "k": k,
                     "temperature": t, "beam": beam, "sentences": len(pairs),
                     "bleu": round(score.score, 2), "signature": str(bleu.get_signature()),
                     "retrieve_s": round(t1 - t0, 2), "decode_s": round(t2 - t1, 2)})
        if mix is not None and knn is not None:
            rows[-1]["knn"] = {"memory": str(knn_memory), "keys": mix.memory.size,
                               "k": knn.k, "temperature": knn.temperature, "lambda": knn.lam,
                               "adaptive": knn.adaptive, "reach": knn.reach,
                               "nprobe": knn.nprobe,
                               "mean_lambda": round(mix.lam_sum / max(1, mix.steps), 4)}
    return rows
