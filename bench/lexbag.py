"""An untrained lexical part beside an encoder's vectors, for bench/encoder_dev.py (issue 15,
item 1: "a lexical model beside the semantic one whose vectors are concatenated or summed").

Model argument ``lex:MODE:TABLE:WEIGHT:DIR``. A text's *bag* (``encoder.token_bag``) is the
sum, over its tokens (the encoder's own tokenizer; special tokens weigh 0), of a table row
weighted as BM25 weighs a document term without length normalisation, idf × tf·(k1 + 1)/(tf
+ k1), then normalised.
TABLE ``emb``: the encoder's input embedding matrix (d coordinates, learnt: related tokens
lie near each other); ``randN``: a fixed random ±1 table of N coordinates (a sketch of exact
matches: the inner product of two bags estimates their sparse dot product, with a collision
noise that shrinks as N grows). MODE ``sum``: normalise(v + WEIGHT·bag), d coordinates (the
table must have d); ``concat``: [v; WEIGHT·bag], whose inner product is v's cosine plus
WEIGHT² times the bags' cosine. The idf comes from ``--idf-texts``, a training bundle's
texts (``qkv build-pairs``), never from the collection searched.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from encoder.token_bag import bags, idf_over, read_texts


class LexBag:
    """``lex:MODE:TABLE:WEIGHT:DIR`` (see the module doc): the encoder's normalised vectors
    and the bags, side by side from :meth:`encode`; :meth:`combine` makes the vectors scored."""

    def __init__(self, spec: str, backend: str | None, idf_texts: Path | None,
                 idf_limit: int = 300_000) -> None:
        from wiring.components import load_encoder

        _, self.mode, table, weight, path = spec.split(":", 4)
        if self.mode not in ("sum", "concat"):
            raise SystemExit(f"lex:MODE must be sum or concat, not {self.mode!r}")
        if idf_texts is None:
            raise SystemExit("a lex: model needs --idf-texts (a training bundle's texts)")
        self.weight = float(weight)
        self.encoder = load_encoder(path, backend=backend)
        self.backend = self.encoder.backend
        emb = self.encoder.model.embed.weight.detach().float().cpu().numpy()
        if table == "emb":
            self.table = emb
        elif table.startswith("rand"):
            n = int(table[4:])  # RandomState: a stream NumPy keeps fixed across versions
            self.table = np.random.RandomState(0).choice(
                np.array([-1.0, 1.0], np.float32), size=(emb.shape[0], n))
        else:
            raise SystemExit(f"lex: TABLE must be emb or randN, not {table!r}")
        d = self.encoder.dim
        if self.mode == "sum" and self.table.shape[1] != d:
            raise SystemExit(f"lex:sum needs a table of {d} coordinates, not {self.table.shape[1]}")
        self.idf = idf_over(self.encoder.tokenizer, read_texts(idf_texts, idf_limit),
                            emb.shape[0])  # as `qkv token-bag` takes it
        self.name = f"lex {self.mode} {table} ×{weight} ({Path(path).name})"

    def width(self, dim: int | None) -> int:
        """Coordinates of :meth:`combine`'s vectors."""
        d = min(dim or self.encoder.dim, self.encoder.dim)
        return d if self.mode == "sum" else d + self.table.shape[1]

    def bags(self, texts: list[str]) -> np.ndarray:
        return bags(self.encoder.tokenize(texts)[0], self.idf, self.table)

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return np.concatenate([self.encoder.encode(texts, batch_size=batch_size),
                               self.bags(texts)], 1)

    def combine(self, x: np.ndarray, dim: int | None) -> np.ndarray:
        """The scored vectors from :meth:`encode`'s; ``dim`` cuts the encoder's part (and in
        ``sum``, the bag with it) to its first ``dim`` coordinates."""
        d = self.encoder.dim
        v, bag = x[:, :d], x[:, d:]
        if dim:
            v = v[:, :dim]
            if self.mode == "sum":
                bag = bag[:, :dim]
        if self.mode == "concat":
            v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
            return np.concatenate([v, self.weight * bag], 1)
        s = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        s = s + self.weight * bag / np.maximum(np.linalg.norm(bag, axis=1, keepdims=True), 1e-12)
        return s / np.maximum(np.linalg.norm(s, axis=1, keepdims=True), 1e-12)
