import json
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import decoder
from decoder.testing import tiny_decoder
from decoder.tokenizer import SPECIAL_TOKENS, decode, encode

NEIGHBOURS = [("Un petit chien court dans le parc.", 0.7), ("Un chat dort.", 0.3)]


def test_tiny_decoder_is_fast_and_deterministic(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    a = decoder.load(tiny_decoder(tmp_path / "a"), device="cpu")
    a.generate("A dog runs.", NEIGHBOURS)
    assert time.perf_counter() - t0 < 2.0
    b = decoder.load(tiny_decoder(tmp_path / "b"), device="cpu")
    assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 16
    c = decoder.load(tiny_decoder(tmp_path / "c", seed=1), device="cpu")
    assert c.fingerprint != a.fingerprint
    assert a.generate("A dog runs.", NEIGHBOURS) == b.generate("A dog runs.", NEIGHBOURS)


def test_checkpoint_round_trip_keeps_weights_outputs_and_fingerprint(
    tiny_decoder_dir: Path, tmp_path: Path
) -> None:
    dec = decoder.load(tiny_decoder_dir, device="cpu")
    assert dec.name == "tiny-decoder" and dec.max_tokens == 32
    dec.save(tmp_path / "copy", {"metrics": {"bleu": 1.0}})
    again = decoder.load(tmp_path / "copy", device="cpu")
    assert again.fingerprint == dec.fingerprint
    a, b = (load_file(str(p / "model.safetensors")) for p in (tiny_decoder_dir, tmp_path / "copy"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    meta = json.loads((tmp_path / "copy/config.json").read_text())
    assert meta["architecture"]["d_model"] == 32 and meta["metrics"] == {"bleu": 1.0}
    assert again.generate("A cat sleeps.", NEIGHBOURS).text == dec.generate(
        "A cat sleeps.", NEIGHBOURS).text
    assert not (tmp_path / "copy" / "model.safetensors.tmp").exists()


def test_load_names_the_missing_file(tiny_decoder_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="model.safetensors missing"):
        decoder.load(tmp_path)
    (tmp_path / "model.safetensors").write_bytes((tiny_decoder_dir / "model.safetensors")
                                                 .read_bytes())
    with pytest.raises(FileNotFoundError, match="config.json missing"):
        decoder.load(tmp_path)


def test_generation_with_attention_lines_up_tokens_and_memory(tiny_decoder_dir: Path) -> None:
    dec = decoder.load(tiny_decoder_dir, device="cpu")
    g = dec.generate("A small dog runs in the park.", NEIGHBOURS, beam=2, max_tokens=6,
                     return_attention=True)
    assert g.attention is not None and g.memory_tokens and g.memory_segments
    assert len(g.tokens) <= 6 and len(g.attention) == len(g.tokens)
    assert all(len(row) == len(g.memory_tokens) for row in g.attention)
    assert all(abs(sum(row) - 1.0) < 1e-4 for row in g.attention)  # float32 maps under bf16
    assert g.memory_tokens[0] == "<s>" and "<sep>" in g.memory_tokens
    assert sorted(set(g.memory_segments)) == [-1, 0, 1]
    first = g.memory_segments.index(0)
    value = "".join(g.memory_tokens[first + 1 : g.memory_segments.index(1) - 1])
    assert g.memory_tokens[first] == "<sep>" and value == "Unpetitchiencourtdansleparc."
    assert dec.generate("A dog.", beam=1, return_attention=False).attention is None


def test_empty_source_gives_empty_output_and_long_source_is_marked_truncated(
    tiny_decoder_dir: Path,
) -> None:
    dec = decoder.load(tiny_decoder_dir, device="cpu")
    assert dec.generate("   ").text == "" and dec.generate("").tokens == []
    g = dec.generate("dog " * 500, max_tokens=3)
    assert g.truncated and len(g.tokens) <= 3
    assert not dec.generate("A dog.", max_tokens=3).truncated
    assert dec.generate("A dog.", [("chien " * 500, 1.0)], max_tokens=3).truncated


def test_translate_matches_generate_and_keeps_order(tiny_decoder_dir: Path) -> None:
    dec = decoder.load(tiny_decoder_dir, device="cpu")
    sources = ["A dog runs.", "", "A big white horse jumps near the river.", "A cat."]
    nbrs = [NEIGHBOURS, [], [NEIGHBOURS[0]], []]
    texts = dec.translate(sources, nbrs, beam=3, max_tokens=8, batch_size=2)
    assert len(texts) == 4 and texts[1] == ""
    for s, n, t in zip(sources, nbrs, texts, strict=True):
        assert dec.generate(s, n, beam=3, max_tokens=8).text == t


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"beam": 0}, ValueError, "beam"),
    ({"max_tokens": 0}, ValueError, "max_tokens"),
    ({"neighbours": [("x", -0.1)]}, ValueError, "weights"),
    ({"neighbours": [("x", float("nan"))]}, ValueError, "weights"),
    ({"neighbours": [(3, 0.5)]}, TypeError, "value"),
])
def test_bad_arguments_are_clear_errors(tiny_decoder_dir: Path, kwargs: dict, error: type,
                                        match: str) -> None:
    dec = decoder.load(tiny_decoder_dir, device="cpu")
    with pytest.raises(error, match=match):
        dec.generate("A dog.", **kwargs)


def test_translate_rejects_mismatched_neighbour_lists(tiny_decoder_dir: Path) -> None:
    dec = decoder.load(tiny_decoder_dir, device="cpu")
    with pytest.raises(ValueError, match="2 neighbour lists for 1 sources"):
        dec.translate(["A dog."], [[], []])
    with pytest.raises(TypeError, match="list of strings"):
        dec.translate("A dog.")  # type: ignore[arg-type]


def test_tokenizer_keeps_case_and_round_trips(tiny_decoder_dir: Path) -> None:
    dec = decoder.load(tiny_decoder_dir, device="cpu")
    tok = dec.tokenizer
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    ids, cut = encode(tok, ["Un Chien près de la rivière.\n", "a b c d e"], max_tokens=3)
    assert cut == [True, True] and all(len(x) <= 3 for x in ids)
    full, _ = encode(tok, ["Un Chien près de la rivière."], max_tokens=32)
    assert decode(tok, full[0]) == "Un Chien près de la rivière."
