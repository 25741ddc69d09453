"""A toy English–French parallel corpus and a tiny random decoder checkpoint, for tests
of this package and of the code that uses it (the API's ``generate``)."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from decoder.config import DecoderConfig
from decoder.model import RetrievalAugmentedTransformer
from decoder.tokenizer import train_joint_tokenizer
from encoder.checkpoint import save_checkpoint

ANIMALS = {"dog": "chien", "cat": "chat", "horse": "cheval", "bird": "oiseau",
           "fish": "poisson", "fox": "renard", "bear": "ours", "duck": "canard"}
BEFORE = {"small": "petit", "big": "grand"}  # French adjectives placed before the noun
AFTER = {"brown": "brun", "white": "blanc"}  # ... and after it
ACTIONS = {"runs": "court", "jumps": "saute", "sleeps": "dort", "eats": "mange",
           "swims": "nage", "plays": "joue"}
PLACES = {"in the park": "dans le parc", "on the beach": "sur la plage",
          "in the snow": "dans la neige", "near the river": "près de la rivière",
          "in the forest": "dans la forêt"}


def toy_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (English, French) caption pairs such as ("A small dog runs in the park.",
    "Un petit chien court dans le parc."), drawn with ``seed``."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        animal, adj = rng.choice(list(ANIMALS)), rng.choice([*BEFORE, *AFTER])
        action, place = rng.choice(list(ACTIONS)), rng.choice(list(PLACES))
        fr_np = (f"{BEFORE[adj]} {ANIMALS[animal]}" if adj in BEFORE
                 else f"{ANIMALS[animal]} {AFTER[adj]}")
        pairs.append((f"A {adj} {animal} {action} {place}.",
                      f"Un {fr_np} {ACTIONS[action]} {PLACES[place]}."))
    return pairs


TINY_ARCH = {"d_model": 32, "n_encoder_layers": 1, "n_decoder_layers": 1, "n_heads": 2,
             "d_ff": 64, "max_tokens": 32, "dropout": 0.0, "name": "tiny-decoder"}


def tiny_decoder(path: str | Path, seed: int = 0) -> Path:
    """Write an untrained tiny decoder checkpoint (random weights, a real joint BPE trained
    on :func:`toy_pairs`) to ``path`` and return it. Deterministic in ``seed``; well under
    a second on a CPU."""
    pairs = toy_pairs(200, seed)
    tok = train_joint_tokenizer([t for p in pairs for t in p], vocab_size=400, min_frequency=1)
    config = DecoderConfig(vocab_size=tok.get_vocab_size(), **TINY_ARCH)  # type: ignore[arg-type]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = RetrievalAugmentedTransformer(config)
    save_checkpoint(path, model, tok, {"training": None, "note": "untrained, for tests"})
    return Path(path)
