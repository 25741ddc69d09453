"""Loading what a process serves once: the encoder (and how many CPU threads it uses), the
store, and the decoders that collections generate with."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from index import EncoderInfo, VectorStore, collection_name, open_store
from index.guarded import guarded

if TYPE_CHECKING:
    from encoder import TextEncoder

log = logging.getLogger(__name__)
CARD = "qkv-encoder.json"  # beside a derived encoder (wiring.encoders): name, fingerprint, dim


def load_encoder(path: str | Path, device: str | None = None, cpu_threads: int | None = None,
                 backend: str | None = None) -> TextEncoder:
    """The encoder checkpoint at ``path``, encoding on ``backend`` (``torch`` or ``onnx``;
    by default as :func:`encoder.load` picks); on the CPU, torch's intra-op threads (which
    the onnx backend follows too) set to ``cpu_threads`` when given (a process-wide
    setting)."""
    import encoder  # torch loads here, after wiring.runtime.configure()

    text_encoder = encoder.load(path, device=device, backend=backend)
    if cpu_threads and text_encoder.device.type == "cpu":
        import torch

        torch.set_num_threads(cpu_threads)
    return text_encoder


def load_reranker(path: str | Path, device: str | None = None,
                  backend: str | None = None) -> Any:
    """The reranker checkpoint at ``path`` (:mod:`encoder.reranker`), its network on
    ``backend`` as the encoder's is."""
    from encoder import reranker

    loaded = reranker.load(path, device=device, backend=backend)
    log.info("reranker %s runs on %s (%s backend)", path, loaded.encoder.device,
             loaded.backend)
    return loaded


def encoder_info(text_encoder: TextEncoder) -> EncoderInfo:
    """What a collection records of the encoder that made its vectors."""
    return EncoderInfo(text_encoder.name, text_encoder.fingerprint, text_encoder.dim)


def load_decoders(paths: Mapping[str, Path], device: str | None = None) -> dict[str, Any]:
    """Collection → decoder, for each collection → checkpoint directory of ``paths``."""
    decoders: dict[str, Any] = {}
    for collection, path in paths.items():
        import decoder

        decoders[collection] = decoder.load(path, device=device)
        log.info("collection %s generates with decoder %s", collection, path)
    return decoders


def read_card(path: Path) -> dict[str, Any] | None:
    """A derived checkpoint's card, or None where ``path`` holds no complete one."""
    try:
        card = json.loads((path / CARD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(card, dict) or not (path / "model.safetensors").is_file():
        return None
    return card


def write_card(path: Path, card: dict[str, Any]) -> None:
    """Written last (atomically): a checkpoint without its card is not listed."""
    tmp = path / (CARD + ".tmp")
    tmp.write_text(json.dumps(card, indent=1))
    tmp.replace(path / CARD)


@dataclass
class Components:
    """The encoder, its :class:`EncoderInfo`, the store and the collections' decoders."""

    encoder: TextEncoder
    info: EncoderInfo
    store: VectorStore
    decoders: dict[str, Any] = field(default_factory=dict)
    decoder_paths: dict[str, Path] = field(default_factory=dict)  # stored collection name → dir
    token_memories: dict[str, Any] = field(default_factory=dict)  # → decoder.knn.TokenMemory

    def close(self) -> None:
        self.store.close()


def load_components(model: Path, store: str, *, token: str = "", timeout: float = 10.0,
                    ef: int | None = None, device: str | None = None,
                    cpu_threads: int | None = None,
                    backend: str | None = None,
                    decoders: Mapping[str, Path] | None = None,
                    token_memories: Mapping[str, Path] | None = None) -> Components:
    """Load the encoder, the decoders and their token memories, and open the store (a store
    that is down does not fail here: its calls raise ``StoreUnavailableError`` until it is
    back). A token memory of a collection without a decoder, or built with another decoder,
    is a ``ValueError`` (``decoder.knn.MemoryMismatchError``)."""
    text_encoder = load_encoder(model, device, cpu_threads, backend)
    log.info("encoder %s runs on %s (%s backend)", model, text_encoder.device,
             text_encoder.backend)
    # keyed by the stored collection name (``tm-en-fr`` → ``tm_en_fr``), as routes look them up
    paths = {collection_name(c): Path(p) for c, p in (decoders or {}).items()}
    loaded = load_decoders(paths, device)
    memories: dict[str, Any] = {}
    for c, path in (token_memories or {}).items():
        from decoder.knn import TokenMemory

        stored = collection_name(c)
        if stored not in loaded:
            raise ValueError(f"token memory {path} for collection {c!r}, which has no decoder "
                             "(give it one in decoders)")
        memories[stored] = TokenMemory.load(path, loaded[stored].fingerprint)
        log.info("collection %s generates with token memory %s (%d tokens)", stored, path,
                 memories[stored].size)
    opened = open_store(store, token=token, timeout=timeout, ef=ef)
    return Components(encoder=text_encoder, info=encoder_info(text_encoder),
                      store=guarded(opened),
                      decoders=loaded, decoder_paths=paths, token_memories=memories)
