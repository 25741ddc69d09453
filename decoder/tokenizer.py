"""Joint byte-level BPE over source and target languages (HF ``tokenizers``).

The text rule is the encoder's (:func:`encoder.tokenizer.clean_text`), then NFKC, but no
lower-casing: the decoder writes cased text. Byte-level BPE covers any Unicode without an
unknown token. No post-processor: the model code adds the special tokens itself:
source ``<s> x </s>``, each neighbour's value ``<sep> v </s>``, target ``<s> y </s>``.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from encoder.tokenizer import clean_text, load_tokenizer, train_bpe

__all__ = ["load_tokenizer"]  # re-exported: one reader for every checkpoint's tokenizer

PAD, BOS, EOS, SEP, UNK = "<pad>", "<s>", "</s>", "<sep>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, SEP, UNK]  # ids 0..4, matching DecoderConfig's defaults


def build_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE tokenizer with an NFKC normaliser (case kept)."""
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_joint_tokenizer(
    texts: Iterable[str], vocab_size: int, min_frequency: int = 2
) -> Tokenizer:
    """Train one BPE over both languages' ``texts``. Ids: <pad>=0 <s>=1 </s>=2 <sep>=3."""
    tok = train_bpe(build_tokenizer(), texts, vocab_size, min_frequency, SPECIAL_TOKENS)
    for i, name in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(name) == i, name
    return tok


def encode(tok: Tokenizer, texts: list[str], max_tokens: int) -> tuple[list[list[int]], list[bool]]:
    """Ids per text without special tokens, cut at ``max_tokens``; and which were cut.

    A text is first cut to 16 characters per allowed token, so a pathological line costs
    no more than a long one to tokenize.
    """
    cleaned = [clean_text(t[: 16 * max_tokens + 16]) for t in texts]
    ids = [e.ids for e in tok.encode_batch(cleaned, add_special_tokens=False)]
    cut = [len(x) > max_tokens or len(t) > 16 * max_tokens + 16 for x, t in zip(ids, texts,
                                                                               strict=True)]
    return [x[:max_tokens] for x in ids], cut


def decode(tok: Tokenizer, ids: list[int]) -> str:
    """Text of ``ids`` (special tokens dropped), on one line."""
    return clean_text(tok.decode(ids, skip_special_tokens=True))


def token_strings(tok: Tokenizer, ids: list[int]) -> list[str]:
    """A readable string per id (a byte-level piece decoded on its own; specials as named)."""
    return [(tok.id_to_token(i) or "") if i < len(SPECIAL_TOKENS)
            else tok.decode([i]).strip() or (tok.id_to_token(i) or "") for i in ids]
