"""``collection_name``: the one mapping of a caller's collection name to the stored one."""

from __future__ import annotations

import pytest

from index import collection_name
from index.store import check_collection_name


@pytest.mark.parametrize(("given", "stored"), [
    ("tm-en-fr", "tm_en_fr"), ("tm_en_fr", "tm_en_fr"), ("docs", "docs"), ("_x-1", "_x_1"),
    ("a--b", "a__b"), ("A" * 255, "A" * 255)])
def test_dashes_become_underscores(given: str, stored: str) -> None:
    assert collection_name(given) == stored
    check_collection_name(stored)  # what Milvus accepts


@pytest.mark.parametrize("bad", ["", "-x", "-", "1abc", "a b", "a.b", "a/b", "é", "a\n",
                                 "A" * 256])
def test_other_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="collection name must start with a letter or '_'"):
        collection_name(bad)
