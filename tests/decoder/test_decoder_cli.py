import gzip
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import encoder
from cli.app import app
from decoder.data import read_lines, read_pairs
from wiring.translation_memory import TranslationMemory


def _memory_files(task1_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    pairs = read_pairs(task1_dir, "train")
    src, tgt = tmp_path / "mem.en.gz", tmp_path / "mem.fr"
    with gzip.open(src, "wt") as f:
        f.writelines(s + "\n" for s, _ in pairs)
    tgt.write_text("".join(t + "\n" for _, t in pairs))
    return src, tgt


def _translate(tiny_decoder_dir: Path, tiny_encoder_dir: Path, tmp_path: Path, lines: list[str],
               *extra: str) -> tuple[object, Path]:
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("".join(ln + "\n" for ln in lines))
    result = CliRunner().invoke(app, [
        "translate", "--model", str(tiny_decoder_dir), "--encoder", str(tiny_encoder_dir),
        "--input", str(inp), "--output", str(out), "--beam", "2", "--max-tokens", "6",
        "--memory-cache", str(tmp_path / "cache"), "--no-progress", *extra])
    return result, out


def test_translate_writes_one_line_per_input_line(
    tiny_decoder_dir: Path, tiny_encoder_dir: Path, task1_dir: Path, tmp_path: Path
) -> None:
    src, tgt = _memory_files(task1_dir, tmp_path)
    lines = ["A small dog runs in the park.", "", "A cat " + "very " * 3000 + "big.", "  ",
             "A fox."]
    result, out = _translate(tiny_decoder_dir, tiny_encoder_dir, tmp_path, lines,
                             "--memory-src", str(src), "--memory-tgt", str(tgt), "--k", "3")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    got = read_lines(out)
    assert len(got) == 5 and got[1] == "" and got[3] == ""
    assert all(got[i] for i in (0, 2, 4))  # an untrained model still writes something
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 1  # memory vectors cached


def test_translate_k0_needs_no_memory_and_k_needs_one(
    tiny_decoder_dir: Path, tiny_encoder_dir: Path, tmp_path: Path
) -> None:
    result, out = _translate(tiny_decoder_dir, tiny_encoder_dir, tmp_path, ["A dog.", ""],
                             "--k", "0")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert len(read_lines(out)) == 2
    result, _ = _translate(tiny_decoder_dir, tiny_encoder_dir, tmp_path, ["A dog."], "--k", "3")
    assert result.exit_code != 0 and "--memory-src" in result.output  # type: ignore[attr-defined]
    # the tiny decoder was trained with no neighbours: by default it reads none, and a
    # sentence memory given to it is named as of no use
    result, out = _translate(tiny_decoder_dir, tiny_encoder_dir, tmp_path, ["A dog."])
    assert result.exit_code == 0 and len(read_lines(out)) == 1  # type: ignore[attr-defined]
    result, _ = _translate(tiny_decoder_dir, tiny_encoder_dir, tmp_path, ["A dog."],
                           "--memory", str(tmp_path / "in.txt"))
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())  # type: ignore[attr-defined]
    assert result.exit_code == 2 and "trained without neighbours (k = 0)" in said, said  # type: ignore[attr-defined]


def test_translate_plot_draws_the_attention_map(
    tiny_decoder_dir: Path, tiny_encoder_dir: Path, task1_dir: Path, tmp_path: Path
) -> None:
    src, tgt = _memory_files(task1_dir, tmp_path)
    png = tmp_path / "att.png"
    result, out = _translate(tiny_decoder_dir, tiny_encoder_dir, tmp_path,
                             ["", "A small dog runs in the park."], "--memory-src", str(src),
                             "--memory-tgt", str(tgt), "--plot", str(png), "--k", "4")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert read_lines(out)[0] == ""
    result, _ = _translate(tiny_decoder_dir, tiny_encoder_dir, tmp_path, ["A dog.", "A cat."],
                           "--k", "0", "--plot", str(tmp_path / "two.png"))
    assert result.exit_code != 0 and "one sentence" in result.output  # type: ignore[attr-defined]


def test_translate_plot_with_a_token_memory_draws_its_votes(
    tiny_decoder_dir: Path, tiny_encoder_dir: Path, tmp_path: Path
) -> None:
    import decoder
    from decoder.knn import KnnOptions, TokenMemory, collect_keys, votes
    from decoder.plot import plot_votes
    from decoder.testing import toy_pairs

    dec = decoder.load(tiny_decoder_dir, device="cpu")
    pairs = toy_pairs(20, seed=2)
    keys, values, rows = collect_keys(dec, [s for s, _ in pairs], [t for _, t in pairs])
    memory = TokenMemory.build(keys, values, rows, dec.name, dec.fingerprint)
    memory.save(tmp_path / "tokens")
    png = tmp_path / "att.png"
    result, out = _translate(tiny_decoder_dir, tiny_encoder_dir, tmp_path, [pairs[3][0]],
                             "--k", "0", "--plot", str(png), "--knn-memory",
                             str(tmp_path / "tokens"), "--knn-k", "3")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    drawn = tmp_path / "att-votes.png"
    assert drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and drawn.stat().st_size > 5000
    # what it draws: per output token its 3 voters, each the token, its pair and weight
    gen = dec.generate(pairs[3][0], beam=2)
    tokens = votes(dec, pairs[3][0], [], gen.ids, memory, KnnOptions(k=3))
    cells = plot_votes(tokens, tmp_path / "again.png")
    assert len(cells) == len(gen.ids) + 1 and all(len(r) == 3 for r in cells)
    first = tokens[0]["votes"][0]
    assert cells[0][0] == f"{first['token']}\n{first['id']}  {first['weight']:.2f}"
    assert first["id"] in {str(i) for i in range(len(pairs))}


def test_translation_memory_leaves_the_pair_itself_out(
    tiny_encoder_dir: Path, tmp_path: Path
) -> None:
    enc = encoder.load(tiny_encoder_dir, device="cpu")
    sources = ["a dog runs", "a dog runs", "a cat sleeps", "a dog runs", "", "a bird"]
    targets = ["un chien court", "un chien court", "un chat dort", "le chien court", "vide", ""]
    tm = TranslationMemory.build(enc, sources, targets, cache_dir=tmp_path)
    hits = tm.search(["a dog runs", "a dog runs", ""], k=3, exclude=[0, None, None])
    assert [j for j, _ in hits[0]][:1] == [3]  # 0 itself and 1 (the same pair) left out
    assert 0 not in [j for j, _ in hits[0]] and 1 not in [j for j, _ in hits[0]]
    assert {j for j, _ in hits[1]} == {0, 1, 3}  # identical sources score highest
    assert hits[2] == []
    assert all(j not in (4, 5) for row in hits for j, _ in row)  # empty source or target
    assert sum(w for _, w in hits[1]) == pytest.approx(1.0, abs=1e-5)
    assert tm.neighbours(["a cat sleeps"], k=1)[0][0] == ("un chat dort", pytest.approx(1.0))
    own = tm.search(sources, k=2, exclude=list(range(6)))
    assert own == tm.search(sources, k=2, exclude=list(range(6)), xq=tm.xb)  # vectors reused
    with pytest.raises(ValueError, match="differ in length"):
        TranslationMemory.build(enc, sources, targets[:-1])


@pytest.mark.parametrize("k", [0, 2])
def test_train_decoder_command(tiny_encoder_dir: Path, task1_dir: Path, tmp_path: Path,
                               k: int) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train-decoder", "--data", str(task1_dir),
        "--out", str(out), "--encoder", str(tiny_encoder_dir), "--k", str(k), "--steps", "4",
        "--batch-size", "8", "--warmup-steps", "1", "--vocab-size", "400", "--d-model", "16",
        "--encoder-layers", "1", "--decoder-layers", "1", "--n-heads", "2", "--d-ff", "32",
        "--max-tokens", "24", "--device", "cpu", "--name", "tm-test",
        "--memory-cache", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "config.json").read_text())
    assert meta["architecture"]["name"] == "tm-test" and meta["training"]["k"] == k
    if k:
        retrieval = meta["training"]["retrieval"]
        assert retrieval["encoder_fingerprint"] == encoder.load(tiny_encoder_dir).fingerprint
        nbrs = json.loads((out / "neighbours.json").read_text())["train"]
        assert all(len(r) == k and i not in [j for j, _ in r] for i, r in enumerate(nbrs))
        assert len(list((tmp_path / "cache").glob("*.npy"))) == 1
    else:
        assert meta["training"]["retrieval"] == {}
