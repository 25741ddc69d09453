"""The shipped default model: present, within its size budget, and it has learned something."""

import json
from pathlib import Path

import numpy as np
import pytest

import encoder

MODEL = Path(__file__).resolve().parents[2] / "models/encoder-default"


@pytest.fixture(scope="module")
def enc() -> encoder.TextEncoder:
    return encoder.load(MODEL)


def test_checkpoint_layout_and_size() -> None:
    files = {p.name for p in MODEL.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= files
    size = sum(p.stat().st_size for p in MODEL.iterdir())
    assert size <= 50 * 1024 * 1024
    meta = json.loads((MODEL / "config.json").read_text())
    assert "architecture" in meta and "training" in meta and "metrics" in meta


def test_recorded_fingerprint_matches_the_weights(enc: encoder.TextEncoder) -> None:
    meta = json.loads((MODEL / "config.json").read_text())
    assert meta["fingerprint"] == enc.fingerprint


def test_paraphrases_are_closer_than_unrelated_texts(enc: encoder.TextEncoder) -> None:
    texts = [
        "A man is playing a flute.",
        "A man plays a wind instrument.",
        "The central bank raised interest rates by half a point.",
        "How do I open a file for reading in Python?",
        "Use the built-in open() function with mode 'r' to read a file.",
        "Stock markets fell sharply after the announcement.",
    ]
    x = enc.encode(texts)
    sims = x @ x.T
    assert sims[0, 1] > sims[0, 2] and sims[0, 1] > sims[0, 5]
    assert sims[3, 4] > sims[3, 2] and sims[3, 4] > sims[3, 0]
    assert sims[2, 5] > sims[2, 0]


def test_retrieves_the_matching_abstract(enc: encoder.TextEncoder) -> None:
    docs = [
        "Aspirin inhibits platelet aggregation and lowers the risk of heart attack.",
        "The airfoil's lift coefficient rises with angle of attack until stall.",
        "Quarterly earnings of the company exceeded analysts' expectations.",
        "Mutations in the BRCA1 gene raise the risk of breast cancer.",
    ]
    queries = ["aspirin reduces myocardial infarction risk", "wing lift and stall angle",
               "profits beat forecasts", "BRCA1 variants and breast cancer"]
    top = (enc.encode(queries) @ enc.encode(docs).T).argmax(axis=1)
    assert (top == np.arange(4)).sum() >= 3
