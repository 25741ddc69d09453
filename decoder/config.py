"""Configuration of the decoder: the frozen architecture saved with the weights."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class DecoderConfig:
    """Architecture of :class:`decoder.model.RetrievalAugmentedTransformer`; in config.json.

    ``max_tokens`` bounds every sequence without its special tokens: the source, each
    neighbour's value and the output. ``neighbour_layers``: how many of the encoder
    stack's blocks (the first ones, shared with the source) the neighbours' value tokens
    pass through; 0 = embeddings + positions only. Special ids are those of
    :mod:`decoder.tokenizer`.
    """

    vocab_size: int = 8000
    d_model: int = 256
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    n_heads: int = 4
    d_ff: int = 1024
    max_tokens: int = 128
    dropout: float = 0.1
    neighbour_layers: int = 1
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    sep_id: int = 3
    name: str = "qkv-decoder"

    def __post_init__(self) -> None:
        if not 0 <= self.neighbour_layers <= self.n_encoder_layers:
            raise ValueError(f"neighbour_layers must be in 0..n_encoder_layers "
                             f"({self.n_encoder_layers}), got {self.neighbour_layers}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecoderConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
