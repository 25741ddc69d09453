"""Structured metadata filters and the one function that turns them into Milvus expressions.

A filter is a tree: a :class:`Condition` ``(key, op, value)`` on a metadata key, or
:class:`And` / :class:`Or` of filters. No caller string reaches Milvus unparsed: keys and
string values are written as JSON string literals (quotes, backslashes and control
characters escaped), numbers are checked finite and in range, booleans become
``true``/``false``. :func:`matches` evaluates the same tree in Python (for
:class:`index.faiss_store.FaissStore`) with the Milvus server's typing: a boolean never
equals a number, a number never equals a string, a missing key matches nothing. (Milvus
Lite alone reads ``true`` as 1 when the stored value is a number; don't mix the two types
under one key.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Scalar = str | int | float | bool
Op = Literal["eq", "in", "lt", "lte", "gt", "gte"]
OPS: tuple[str, ...] = ("eq", "in", "lt", "lte", "gt", "gte")
_RANGE_SYMBOL = {"lt": "<", "lte": "<=", "gt": ">", "gte": ">="}
MAX_IN_VALUES = 1024
MAX_KEY_CHARS = 256
_INT64 = 2**63


@dataclass(frozen=True)
class Condition:
    """``metadata[key] <op> value``; ``in`` takes a non-empty list, ranges a number."""

    key: str
    op: Op
    value: Scalar | tuple[Scalar, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key or len(self.key) > MAX_KEY_CHARS:
            raise ValueError(f"filter key must be a string of 1..{MAX_KEY_CHARS} characters")
        if self.op not in OPS:
            raise ValueError(f"filter op must be one of {OPS}, got {self.op!r}")
        if self.op == "in":
            if isinstance(self.value, str | bytes) or not isinstance(self.value, list | tuple):
                raise ValueError("filter op 'in' takes a list of values")
            if not 1 <= len(self.value) <= MAX_IN_VALUES:
                raise ValueError(f"filter op 'in' takes 1..{MAX_IN_VALUES} values")
            object.__setattr__(self, "value", tuple(self.value))
            for v in self.value:
                _check_scalar(v)
        elif self.op == "eq":
            _check_scalar(self.value)
        else:
            if not _is_number(self.value):
                raise ValueError(f"filter op {self.op!r} takes a number, got {self.value!r}")
            _check_scalar(self.value)


@dataclass(frozen=True)
class And:
    clauses: tuple[Filter, ...]

    def __post_init__(self) -> None:
        _check_clauses("and", self.clauses)
        object.__setattr__(self, "clauses", tuple(self.clauses))


@dataclass(frozen=True)
class Or:
    clauses: tuple[Filter, ...]

    def __post_init__(self) -> None:
        _check_clauses("or", self.clauses)
        object.__setattr__(self, "clauses", tuple(self.clauses))


Filter = Condition | And | Or


def _check_clauses(name: str, clauses: Any) -> None:
    if not isinstance(clauses, list | tuple) or not clauses:
        raise ValueError(f"filter '{name}' takes a non-empty list of filters")
    for c in clauses:
        if not isinstance(c, Condition | And | Or):
            raise ValueError(f"filter '{name}' clause is {type(c).__name__}, expected a filter")


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _check_scalar(v: Any) -> None:
    if isinstance(v, bool | str):
        return
    if isinstance(v, int):
        if not -_INT64 <= v < _INT64:
            raise ValueError(f"filter integer {v} is outside the 64-bit range")
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"filter number must be finite, got {v}")
        return
    raise ValueError(f"filter value must be a string, number or boolean, got {type(v).__name__}")


def parse_filter(obj: Any) -> Filter:
    """Build a filter from its JSON form.

    ``{"key": "lang", "op": "eq", "value": "en"}``, ``{"and": [...]}``, ``{"or": [...]}``.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"a filter is a JSON object, got {type(obj).__name__}")
    if set(obj) == {"and"}:
        return And(tuple(parse_filter(c) for c in _as_list(obj["and"], "and")))
    if set(obj) == {"or"}:
        return Or(tuple(parse_filter(c) for c in _as_list(obj["or"], "or")))
    if set(obj) == {"key", "op", "value"}:
        return Condition(obj["key"], obj["op"], obj["value"])
    raise ValueError(
        "a filter is {'key', 'op', 'value'} (op one of " + ", ".join(OPS) + "), "
        f"{{'and': [...]}} or {{'or': [...]}}; got keys {sorted(obj)}"
    )


def _as_list(v: Any, name: str) -> list[Any]:
    if not isinstance(v, list):
        raise ValueError(f"filter '{name}' takes a list")
    return v


# The escapes both Milvus parsers read (Milvus Lite's and the 2.x server's): Lite refuses
# \u, \x, octal, \b and \f ("unknown escape sequence"), so the other control characters go
# in raw, which both read verbatim (only a raw CR or LF would end the literal).
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(s: str) -> str:
    """A Milvus string literal that means exactly ``s``: ``"`` and ``\\`` escaped, line
    breaks and tabs as ``\\n``, ``\\r``, ``\\t``, every other character as itself."""
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in s) + '"'


def _literal(v: Scalar) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, int):
        return str(int(v))
    return repr(float(v))


def to_milvus_expr(f: Filter, field: str = "metadata") -> str:
    """The Milvus boolean expression for ``f`` over the JSON field ``field``.

    ``in`` is written as an ``or`` of equalities because Milvus Lite does not accept
    ``in`` on a JSON path.
    """
    if isinstance(f, And):
        return "(" + " and ".join(to_milvus_expr(c, field) for c in f.clauses) + ")"
    if isinstance(f, Or):
        return "(" + " or ".join(to_milvus_expr(c, field) for c in f.clauses) + ")"
    path = f"{field}[{quote(f.key)}]"
    if f.op == "eq":
        assert not isinstance(f.value, tuple)
        return f"({path} == {_literal(f.value)})"
    if f.op == "in":
        assert isinstance(f.value, tuple)
        return "(" + " or ".join(f"{path} == {_literal(v)}" for v in f.value) + ")"
    assert not isinstance(f.value, tuple)
    return f"({path} {_RANGE_SYMBOL[f.op]} {_literal(f.value)})"


def _equal(a: Any, b: Scalar) -> bool:
    if isinstance(b, bool) or isinstance(a, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(b, str) or isinstance(a, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return _is_number(a) and a == b


def matches(f: Filter, metadata: dict[str, Any]) -> bool:
    """Whether ``metadata`` satisfies ``f``, with the same typing as Milvus."""
    if isinstance(f, And):
        return all(matches(c, metadata) for c in f.clauses)
    if isinstance(f, Or):
        return any(matches(c, metadata) for c in f.clauses)
    if f.key not in metadata:
        return False
    a = metadata[f.key]
    if f.op == "eq":
        assert not isinstance(f.value, tuple)
        return _equal(a, f.value)
    if f.op == "in":
        assert isinstance(f.value, tuple)
        return any(_equal(a, v) for v in f.value)
    if not _is_number(a):
        return False
    v = float(f.value)  # type: ignore[arg-type]
    if f.op == "lt":
        return bool(a < v)
    if f.op == "lte":
        return bool(a <= v)
    if f.op == "gt":
        return bool(a > v)
    if f.op == "gte":
        return bool(a >= v)
    raise AssertionError(f"unreachable op {f.op}")
