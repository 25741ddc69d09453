import json
from pathlib import Path

from typer.testing import CliRunner

from api.cli import app


def test_eval_encoder_reports_dense_bm25_and_sts(
    tiny_encoder_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    report = tmp_path / "eval.json"
    result = CliRunner().invoke(app, [
        "eval-encoder", "--model", str(tiny_encoder_dir), "--beir", str(data_dir / "beir/scifact"),
        "--split", "test", "--sts", str(data_dir / "sts/stsbenchmark/sts-dev.csv"),
        "--report", str(report), "--record",
    ])
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    beir = data["beir:scifact:test"]
    assert beir["queries"] == 40
    assert set(beir["dense"]) == {"ndcg@10", "recall@100"}
    assert beir["bm25"]["ndcg@10"] > beir["dense"]["ndcg@10"]  # untrained model vs BM25
    assert -1 <= data["sts:sts-dev.csv"]["spearman"] <= 1
    meta = json.loads((tiny_encoder_dir / "config.json").read_text())
    assert meta["fingerprint"] == data["fingerprint"]
    assert meta["metrics"]["beir:scifact:test"] == beir


def test_eval_encoder_needs_something_to_evaluate(tiny_encoder_dir: Path) -> None:
    result = CliRunner().invoke(app, ["eval-encoder", "--model", str(tiny_encoder_dir)])
    assert result.exit_code != 0
    assert "--beir" in result.output


def test_eval_encoder_unknown_split_is_a_clear_error(
    tiny_encoder_dir: Path, data_dir: Path
) -> None:
    result = CliRunner().invoke(app, ["eval-encoder", "--model", str(tiny_encoder_dir),
                                      "--beir", str(data_dir / "beir/scifact"), "--split", "dev"])
    assert result.exit_code != 0
    assert "valid: test, train" in str(result.exception) + result.output
