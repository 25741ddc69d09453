"""Fixtures of the decoder tests: a toy English–French task in the Multi30k task1 layout
and a tiny random decoder checkpoint."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from decoder.testing import tiny_decoder, toy_pairs


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Tiny models run as fast on one thread; and on a shared, oversubscribed CPU, OpenMP
    workers spinning at every barrier made these tests 20x slower (200 s against 9 s
    here). The qkv commands avoid that with OMP_WAIT_POLICY=PASSIVE (wiring.runtime), which
    a test cannot set once torch is loaded."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def write_task1(root: Path, n_train: int = 60, n_val: int = 12) -> Path:
    """train.{en,fr}.gz, val.{en,fr} (plain) and test_2016_flickr.{en,fr}.gz of toy pairs."""
    root.mkdir(parents=True, exist_ok=True)
    pairs = toy_pairs(n_train + 2 * n_val, seed=1)
    splits = {"train": pairs[:n_train], "val": pairs[n_train : n_train + n_val],
              "test_2016_flickr": pairs[n_train + n_val :]}
    for split, rows in splits.items():
        for lang, col in (("en", 0), ("fr", 1)):
            text = "".join(p[col] + "\n" for p in rows)
            if split == "val":
                (root / f"{split}.{lang}").write_text(text)
            else:
                with gzip.open(root / f"{split}.{lang}.gz", "wt") as f:
                    f.write(text)
    return root


@pytest.fixture(scope="session")
def task1_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_task1(tmp_path_factory.mktemp("multi30k") / "task1")


@pytest.fixture(scope="session")
def tiny_decoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_decoder(tmp_path_factory.mktemp("tiny-decoder"))
