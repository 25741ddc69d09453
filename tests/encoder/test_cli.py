import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app


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


def test_eval_encoder_modes_search_through_milvus_lite(
    tiny_encoder_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    report = tmp_path / "eval.json"
    result = CliRunner().invoke(app, [
        "eval-encoder", "--model", str(tiny_encoder_dir), "--beir", str(data_dir / "beir/scifact"),
        "--mode", "dense", "--mode", "bm25", "--mode", "hybrid", "--report", str(report),
    ])
    assert result.exit_code == 0, result.output
    beir = json.loads(report.read_text())["beir:scifact:test"]
    milvus = beir["milvus"]
    assert milvus["store"] == "milvus-lite" and milvus["queries"] == beir["queries"]
    assert set(milvus) >= {"milvus_dense", "milvus_bm25", "milvus_hybrid"}
    # the same exact dense search as FAISS flat, so the same figures
    assert milvus["milvus_dense"]["ndcg@10"] == pytest.approx(beir["dense"]["ndcg@10"], abs=0.02)
    # keywords carry this synthetic set: Milvus' BM25 beats the untrained model, and hybrid
    # keeps most of it
    assert milvus["milvus_bm25"]["ndcg@10"] > milvus["milvus_dense"]["ndcg@10"]
    assert milvus["milvus_hybrid"]["ndcg@10"] > milvus["milvus_dense"]["ndcg@10"]
    bad = CliRunner().invoke(app, ["eval-encoder", "--model", str(tiny_encoder_dir), "--beir",
                                   str(data_dir / "beir/scifact"), "--mode", "sparse"])
    assert bad.exit_code != 0 and "dense, bm25, hybrid" in bad.output


def test_train_encoder_refuses_a_source_the_bundle_lacks_before_loading_it(
        tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"  # only sources.json: the refusal must come before the load
    bundle.mkdir()
    (bundle / "sources.json").write_text(json.dumps(
        [{"name": "sts-b", "weight": 1.0, "retrieval": False, "pairs": 3},
         {"name": "lex-reuters", "weight": 1.0, "retrieval": True, "pairs": 3}]))
    for drop, says in (("sts-b,nope", "no such source to drop: nope"),
                       ("sts-b,lex-reuters", "every source dropped")):
        result = CliRunner().invoke(app, ["train-encoder", "--data", str(bundle), "--out",
                                          str(tmp_path / "run"), "--drop-sources", drop])
        assert result.exit_code == 2, result.output
        assert says in " ".join(result.output.replace("│", " ").split())  # rich may wrap
    assert not (tmp_path / "run").exists()
