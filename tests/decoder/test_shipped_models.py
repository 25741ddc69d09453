"""The shipped English→French decoder (k = 0, with a token memory: issue 16): its record,
and ``qkv translate`` / ``qkv eval-decoder`` / ``qkv build-token-memory`` as a user runs
them."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from decoder.data import read_lines

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models/decoder-en-fr"

# A small hand-written memory: English captions and French translations.
MEMORY = [
    ("A man is riding a bicycle down the street.", "Un homme fait du vélo dans la rue."),
    ("A dog is running on the grass.", "Un chien court sur l'herbe."),
    ("Two children are playing in the water.", "Deux enfants jouent dans l'eau."),
    ("A woman in a red dress is singing.", "Une femme en robe rouge chante."),
    ("A man in a blue shirt is cooking.", "Un homme en chemise bleue fait la cuisine."),
]


def _config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def test_the_shipped_decoder_is_small_and_reads_no_neighbours() -> None:
    size = sum(f.stat().st_size for f in MODEL.iterdir())
    assert size <= 100 * 2**20, f"{MODEL} is {size / 2**20:.0f} MiB"
    # each file small enough to come back from a remote GPU run (16 MiB a file)
    assert all(f.stat().st_size <= 16 * 2**20 for f in MODEL.iterdir())
    training = _config(MODEL)["training"]
    assert training["k"] == 0 and training["steps"] == 4000 and training["batch_size"] == 256
    assert _config(MODEL)["architecture"]["name"] == "qkv-decoder-en-fr"


@pytest.fixture()
def memory(tmp_path: Path) -> tuple[Path, Path]:
    src, tgt = tmp_path / "mem.en", tmp_path / "mem.fr"
    src.write_text("".join(s + "\n" for s, _ in MEMORY))
    tgt.write_text("".join(t + "\n" for _, t in MEMORY))
    return src, tgt


def _translate(model: Path, tmp_path: Path, lines: list[str], *extra: str) -> list[str]:
    inp, out = tmp_path / "in.en", tmp_path / "out.fr"
    inp.write_text("".join(ln + "\n" for ln in lines))
    result = CliRunner().invoke(app, [
        "translate", "--model", str(model), "--input", str(inp), "--output", str(out),
        "--memory-cache", "", "--no-progress", *extra])
    assert result.exit_code == 0, result.output
    return read_lines(out)


def test_shipped_model_translates_without_a_memory(tmp_path: Path) -> None:
    lines = ["Two children are playing in the water.", "", "A dog runs " + "and " * 400 + "."]
    got = _translate(MODEL, tmp_path, lines, "--k", "0", "--beam", "4")
    assert len(got) == 3 and got[1] == ""
    assert "enfants" in got[0] and "eau" in got[0]
    assert "chien" in got[2]  # the over-long line was cut, not dropped


def test_its_token_memory_of_a_few_pairs_steers_it_to_their_words(tmp_path: Path) -> None:
    jsonl = tmp_path / "tm.jsonl"
    jsonl.write_text("".join(json.dumps({"id": f"m{i}", "text": s, "value": t}) + "\n"
                             for i, (s, t) in enumerate(MEMORY)))
    result = CliRunner().invoke(app, [
        "build-token-memory", "--model", str(MODEL), "--pairs", str(jsonl),
        "--out", str(tmp_path / "tokens")])
    assert result.exit_code == 0, result.output
    line = [MEMORY[4][0]]
    plain = _translate(MODEL, tmp_path, line, "--k", "0")
    # the memory alone (λ = 1, nearest token): the memory's own target, word for word
    exact = _translate(MODEL, tmp_path, line, "--k", "0", "--knn-memory", str(tmp_path / "tokens"),
                       "--knn-k", "1", "--knn-lambda", "1", "--knn-fixed")
    assert exact == [MEMORY[4][1]], (plain, exact)
    off = _translate(MODEL, tmp_path, line, "--k", "0", "--knn-memory",
                     str(tmp_path / "tokens"), "--no-knn")
    assert off == plain


def test_eval_decoder_prints_bleu_with_its_signature(tiny_decoder_dir: Path,
                                                    tiny_encoder_dir: Path, task1_dir: Path,
                                                    tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "eval-decoder", "--model", str(tiny_decoder_dir), "--data", str(task1_dir),
        "--split", "val", "--k", "2", "--beam", "2", "--encoder", str(tiny_encoder_dir),
        "--memory-cache", "", "--hypotheses", str(tmp_path / "hyp")])
    assert result.exit_code == 0, result.output
    rows = [json.loads(ln) for ln in result.output.splitlines() if ln.startswith("{")]
    assert [r["split"] for r in rows] == ["val"] and rows[0]["k"] == 2
    assert 0.0 <= rows[0]["bleu"] <= 100.0
    assert rows[0]["signature"].startswith("nrefs:1|case:mixed")
    hyps = read_lines(tmp_path / "hyp" / "val.fr")
    assert len(hyps) == rows[0]["sentences"]


def test_memory_can_be_the_services_jsonl(memory: tuple[Path, Path], tmp_path: Path) -> None:
    import gzip

    jsonl = tmp_path / "tm.jsonl.gz"
    with gzip.open(jsonl, "wt", encoding="utf-8") as f:
        for i, (s, t) in enumerate(MEMORY):
            f.write(json.dumps({"id": str(i), "text": s, "value": t}) + "\n")
    src, tgt = memory
    line = ["A woman in a red dress is dancing."]
    from_files = _translate(MODEL, tmp_path, line, "--memory-src", str(src), "--memory-tgt",
                            str(tgt), "--k", "2")
    assert _translate(MODEL, tmp_path, line, "--memory", str(jsonl), "--k", "2") == from_files
    assert "femme" in from_files[0]


def test_a_bad_memory_row_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    # relative paths: the error's box wraps a long one (a worker's tmp_path) mid-name
    monkeypatch.chdir(tmp_path)
    Path("tm.jsonl").write_text('{"text": "A dog.", "value": "Un chien."}\n{"text": "A cat."}\n')
    Path("in.en").write_text("A dog.\n")
    result = CliRunner().invoke(app, ["translate", "--model", str(MODEL), "--input", "in.en",
                                      "--output", "o", "--memory", "tm.jsonl", "--k", "2"])
    assert result.exit_code == 2 and "tm.jsonl:2" in result.output
    assert not (tmp_path / "o").exists()
