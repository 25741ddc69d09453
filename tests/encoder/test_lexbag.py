"""bench/lexbag.py: the untrained lexical part bench/encoder_dev.py scores beside an encoder."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from lexbag import LexBag  # noqa: E402

TEXTS = ["the wing flutter at supersonic speed", "a dog runs in the park",
         "the the the of a", "supersonic flutter of a thin wing", "children play in a park"]


@pytest.fixture()
def idf_texts(tmp_path: Path) -> Path:
    path = tmp_path / "texts.jsonl"
    lines = [json.dumps(t) for t in TEXTS * 3] + [json.dumps({"text": "the the a of"})] * 20
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rare_shared_words_make_bags_close(tiny_encoder_dir: Path, idf_texts: Path) -> None:
    lex = LexBag(f"lex:concat:rand4096:1.0:{tiny_encoder_dir}", "torch", idf_texts)
    bags = lex.bags(TEXTS)
    assert np.allclose(np.linalg.norm(bags, axis=1), 1.0, atol=1e-5)
    cos = bags @ bags.T
    # "wing flutter supersonic" shared, against a text sharing only frequent words
    assert cos[0, 3] > 0.5 and cos[0, 3] > cos[0, 1] + 0.3, cos
    assert lex.idf[lex.encoder.tokenizer.token_to_id("<s>")] == 0.0


def test_concat_and_sum_scores(tiny_encoder_dir: Path, idf_texts: Path) -> None:
    cat = LexBag(f"lex:concat:rand64:0.5:{tiny_encoder_dir}", "torch", idf_texts)
    raw = cat.encode(TEXTS)
    d = cat.encoder.dim
    assert raw.shape == (len(TEXTS), d + 64) and cat.width(None) == d + 64
    assert cat.width(16) == cat.combine(raw, 16).shape[1] == 16 + 64
    v, bag = raw[:, :d], raw[:, d:]
    x = cat.combine(raw, None)
    assert np.allclose(x @ x.T, v @ v.T + 0.25 * (bag @ bag.T), atol=1e-5)
    summed = LexBag(f"lex:sum:emb:0.5:{tiny_encoder_dir}", "torch", idf_texts)
    for dim in (None, 16):
        y = summed.combine(summed.encode(TEXTS), dim)
        assert y.shape == (len(TEXTS), dim or d)
        assert np.allclose(np.linalg.norm(y, axis=1), 1.0, atol=1e-5)
    with pytest.raises(SystemExit, match="table of"):
        LexBag(f"lex:sum:rand64:0.5:{tiny_encoder_dir}", "torch", idf_texts)
