"""The qkv encoder: a from-scratch transformer with attention pooling."""

from encoder.checkpoint import save_checkpoint
from encoder.config import EncoderConfig
from encoder.model import TransformerEncoder
from encoder.text_encoder import TextEncoder, TokenWeights, load

__all__ = ["EncoderConfig", "TextEncoder", "TokenWeights", "TransformerEncoder", "load",
           "save_checkpoint"]
