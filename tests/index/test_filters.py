"""The filter → Milvus expression function: exact output, quoting, and refusals."""

from __future__ import annotations

import json

import pytest

from index import And, Condition, Or, matches, parse_filter, to_milvus_expr
from index.filters import quote


def test_expressions_are_exact() -> None:
    assert to_milvus_expr(Condition("lang", "eq", "en")) == '(metadata["lang"] == "en")'
    assert to_milvus_expr(Condition("n", "gte", 3)) == '(metadata["n"] >= 3)'
    assert to_milvus_expr(Condition("x", "lt", 0.5)) == '(metadata["x"] < 0.5)'
    assert to_milvus_expr(Condition("ok", "eq", False)) == '(metadata["ok"] == false)'
    assert to_milvus_expr(Condition("n", "in", [1, "a"])) == (
        '(metadata["n"] == 1 or metadata["n"] == "a")')
    f = Or((And((Condition("a", "eq", 1), Condition("b", "gt", 2))), Condition("c", "eq", "z")))
    assert to_milvus_expr(f) == (
        '(((metadata["a"] == 1) and (metadata["b"] > 2)) or (metadata["c"] == "z"))')


@pytest.mark.parametrize("value", ['" or 1==1 or "', "a\\", '\\"', "x\ny\r\t\x00z", "ü🚀'",
                                   "\x19\x08\x0c\x7f", "\\u0019"])
def test_quote_round_trips_and_cannot_close_the_string(value: str) -> None:
    q = quote(value)
    assert q.startswith('"') and q.endswith('"')
    assert json.loads(q, strict=False) == value  # raw control characters are allowed
    inner = q[1:-1]
    # every quote inside is escaped: the literal cannot end early
    for i, ch in enumerate(inner):
        if ch == '"':
            backslashes = len(inner[:i]) - len(inner[:i].rstrip("\\"))
            assert backslashes % 2 == 1
    assert "\n" not in q and "\r" not in q  # a raw line break would end a Milvus literal
    # only the escapes both Milvus parsers read (Lite has no \u, \x, \b, \f)
    assert all(inner[i + 1] in '"\\nrt' for i in range(len(inner) - 1)
               if inner[i] == "\\" and (len(inner[:i]) - len(inner[:i].rstrip("\\"))) % 2 == 0)


def test_hostile_key_is_quoted_too() -> None:
    expr = to_milvus_expr(Condition('a"] == 1 or metadata["b', "eq", 1))
    assert expr == '(metadata["a\\"] == 1 or metadata[\\"b"] == 1)'


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"key": "a", "op": "regex", "value": "x"}, "op must be one of"),
        ({"key": "a", "op": "like", "value": "x"}, "prefix pattern ending in '%'"),
        ({"key": "a", "op": "like", "value": "a_b%"}, "prefixes only"),
        ({"key": "a", "op": "exists", "value": "yes"}, "true or false"),
        ({"key": "a", "op": "nin", "value": "abc"}, "list"),
        ({"key": "a", "op": "ne", "value": [1]}, "string, number or boolean"),
        ({"key": "a", "op": "gt", "value": "x"}, "takes a number"),
        ({"key": "a", "op": "eq", "value": float("nan")}, "finite"),
        ({"key": "a", "op": "eq", "value": 2**64}, "64-bit"),
        ({"key": "a", "op": "eq", "value": None}, "string, number or boolean"),
        ({"key": "a", "op": "eq", "value": {"$ne": 1}}, "string, number or boolean"),
        ({"key": "a", "op": "in", "value": "abc"}, "list"),
        ({"key": "a", "op": "in", "value": []}, "1..1024"),
        ({"key": "", "op": "eq", "value": 1}, "key"),
        ({"and": []}, "non-empty"),
        ({"expr": "1 == 1"}, "a filter is"),
        ("lang == 'en'", "JSON object"),
    ],
)
def test_bad_filters_are_refused(obj: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_filter(obj)


def test_parse_filter_builds_the_tree() -> None:
    f = parse_filter({"or": [{"key": "lang", "op": "in", "value": ["en", "fr"]},
                             {"and": [{"key": "n", "op": "gt", "value": 1}]}]})
    assert f == Or((Condition("lang", "in", ("en", "fr")), And((Condition("n", "gt", 1),))))
    assert parse_filter({"key": "k", "op": "exists"}) == Condition("k", "exists", True)


def test_matches_uses_strict_json_typing() -> None:
    meta = {"n": 1, "s": "1", "b": True, "f": 2.5}
    assert matches(Condition("n", "eq", 1), meta)
    assert matches(Condition("n", "eq", 1.0), meta)
    assert not matches(Condition("n", "eq", True), meta)
    assert not matches(Condition("s", "eq", 1), meta)
    assert not matches(Condition("b", "eq", 1), meta)
    assert not matches(Condition("s", "gt", 0), meta)
    assert matches(Condition("f", "lte", 2.5), meta)
    assert not matches(Condition("f", "lt", 2.5), meta)
    assert not matches(Condition("missing", "in", [1, "1"]), meta)


def test_a_filter_has_a_size_limit() -> None:
    from index.filters import MAX_FILTER_DEPTH, MAX_FILTER_TERMS

    eq = {"key": "k", "op": "eq", "value": 1}
    deep: dict = eq  # type: ignore[type-arg]
    for _ in range(MAX_FILTER_DEPTH):
        deep = {"or": [deep]}
    parse_filter(deep)  # MAX_FILTER_DEPTH levels: taken
    with pytest.raises(ValueError, match=f"at most {MAX_FILTER_DEPTH} deep"):
        parse_filter({"and": [deep]})
    values = list(range(MAX_FILTER_TERMS // 2))
    full = {"and": [{"key": "a", "op": "in", "value": values},
                    {"key": "b", "op": "nin", "value": values}]}
    parse_filter(full)  # exactly MAX_FILTER_TERMS comparisons
    with pytest.raises(ValueError, match=f"at most {MAX_FILTER_TERMS} comparisons"):
        parse_filter({"and": [*full["and"], eq]})
