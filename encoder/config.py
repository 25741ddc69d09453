"""Configuration of the encoder: the frozen architecture saved with the weights."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class EncoderConfig:
    """Architecture of :class:`encoder.model.TransformerEncoder`; saved in config.json."""

    vocab_size: int = 16384
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    max_tokens: int = 256
    dropout: float = 0.0
    pooling: str = "dot"
    pad_id: int = 0
    name: str = "qkv-encoder"
    # prefix sizes the vectors were trained to be cut to (Matryoshka), besides d_model
    matryoshka: tuple[int, ...] = ()
    # weight of the idf-weighted token bag added to the vectors (encoder.token_bag); 0: none
    lexical_weight: float = 0.0
    # the bag has its own table (``lexical``, trained by encoder.bag_train, the network
    # frozen) instead of the network's input embeddings
    lexical_table: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncoderConfig:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        if "matryoshka" in kw:
            kw["matryoshka"] = tuple(kw["matryoshka"])
        return cls(**kw)
