"""The qkv decoder: a retrieval-augmented transformer that writes text from a source and
softmax-weighted neighbours."""

from decoder.config import DecoderConfig
from decoder.model import Memory, RetrievalAugmentedTransformer
from decoder.text_decoder import Decoder, Generation, load
from encoder.checkpoint import save_checkpoint

__all__ = ["Decoder", "DecoderConfig", "Generation", "Memory", "RetrievalAugmentedTransformer",
           "load", "save_checkpoint"]
