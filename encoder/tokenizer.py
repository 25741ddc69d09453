"""Byte-level BPE tokenizer (HF ``tokenizers``) and the one text-cleaning rule.

Text handling, the one documented way: every input is NFKC-normalised and lower-cased by
the tokenizer; control characters (Unicode category C*, except none) become spaces and
runs of whitespace collapse to one space. Byte-level BPE covers any Unicode without an
unknown token. Every sequence starts with ``<s>``, so an empty or whitespace-only text is
the one-token sequence ``<s>`` and encodes to a fixed, valid vector.
"""

from __future__ import annotations

import logging
import math
import re
import time
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

log = logging.getLogger(__name__)
PAD, BOS, UNK = "<pad>", "<s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, UNK]
_WS = re.compile(r"\s+")


def clean_text(text: str) -> str:
    """Replace control/format/unassigned characters with spaces and collapse whitespace."""
    if text.isascii() and text.isprintable():
        return _WS.sub(" ", text).strip()
    chars = (" " if unicodedata.category(ch)[0] == "C" else ch for ch in text)
    return _WS.sub(" ", "".join(chars)).strip()


def build_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE tokenizer with our normaliser and ``<s>`` prefix."""
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(
    tok: Tokenizer, texts: Iterable[str], vocab_size: int, min_frequency: int,
    special_tokens: list[str],
) -> Tokenizer:
    """Train ``tok``'s byte-level BPE on ``texts`` after :func:`clean_text`; the special
    tokens get the first ids, in order."""
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((clean_text(t) for t in texts), trainer=trainer)
    return tok


def train_tokenizer(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """Train byte-level BPE on ``texts``. Ids: <pad>=0, <s>=1, <unk>=2."""
    tok = train_bpe(build_tokenizer(), texts, vocab_size, min_frequency, SPECIAL_TOKENS)
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, bos)]
    )
    return tok


def load_tokenizer(path: str | Path) -> Tokenizer:
    return Tokenizer.from_file(str(path))


def bundle_tokenizer(out: Path, texts: list[str], vocab_size: int,
                     data_dir: str | Path | None = None) -> Tokenizer:
    """The run's tokenizer: ``out``'s (a resumed run), else the bundle folder's (``qkv
    build-pairs`` trains one), else a byte-level BPE trained on the texts, saved in ``out``."""
    path = out / "tokenizer.json"
    if path.is_file():
        return load_tokenizer(path)
    t0 = time.time()
    shipped = Path(data_dir) / "tokenizer.json" if data_dir else None
    if shipped is not None and shipped.is_file():
        tok = load_tokenizer(shipped)
        log.info("BPE tokenizer (%d tokens) of %s", tok.get_vocab_size(), shipped)
    else:
        tok = train_tokenizer(_corpus(texts), vocab_size)
        log.info("trained BPE tokenizer (%d tokens) in %.0fs", tok.get_vocab_size(),
                 time.time() - t0)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(path), pretty=False)
    return tok


def _corpus(texts: list[str], limit_chars: int = 60_000_000) -> list[str]:
    """Texts to train the BPE on: an even sample of the table up to ``limit_chars``."""
    total = sum(map(len, texts))
    step = max(1, math.ceil(total / limit_chars))
    return texts[::step]
