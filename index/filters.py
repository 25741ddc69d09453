"""Structured metadata filters and the one function that turns them into Milvus expressions.

A filter is a tree: a :class:`Condition` ``(key, op, value)`` on a metadata key, or
:class:`And` / :class:`Or` of filters. Ops: ``eq``, ``ne``, ``in``, ``nin``, ``lt``,
``lte``, ``gt``, ``gte``, ``exists`` (true/false) and ``like`` (a prefix pattern
``"abc%"``). No caller string reaches Milvus unparsed: keys and string values are written
as JSON string literals (quotes, backslashes and control characters escaped), numbers are
checked finite and in range, booleans become ``true``/``false``. :func:`matches` evaluates
the same tree in Python (for :class:`index.faiss.store.FaissStore`) with the Milvus
server's typing: a boolean never equals a number, a number never equals a string, a missing
key matches nothing but ``ne``, ``nin`` and ``exists: false`` (which are the negations of
``eq``, ``in`` and ``exists``).

The Milvus parsers differ (probed on Milvus Lite 3.2 and the 2.3.5 server): ``!=`` and
``not`` are false on a missing key in Lite but true on the server, and ``like`` has no
escape in either while ``_`` is a wildcard only in Lite. So ``ne``/``nin`` are written
``not exists or ...``, and ``like`` as the string range ``[prefix, next prefix)``, which
means the same on both. (Milvus Lite alone reads ``true`` as 1 when the stored value is a
number; don't mix the two types under one key. A key holding JSON ``null`` counts as
missing, except to ``exists`` on a 2.3 server, which counts it present.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Scalar = str | int | float | bool
Op = Literal["eq", "ne", "in", "nin", "lt", "lte", "gt", "gte", "exists", "like"]
OPS: tuple[str, ...] = ("eq", "ne", "in", "nin", "lt", "lte", "gt", "gte", "exists", "like")
_RANGE_SYMBOL = {"lt": "<", "lte": "<=", "gt": ">", "gte": ">="}
MAX_IN_VALUES = 1024
MAX_KEY_CHARS = 256
# A filter's size: "and"/"or" nested at most this deep, and at most this many comparisons
# in all (an "in" or "nin" counts its values: each is one comparison in the store's
# expression). Larger filters kept a store busy for seconds and ended in 5xx for everyone
# (issue 68); the limits are checked before a store sees the filter.
MAX_FILTER_DEPTH = 8
MAX_FILTER_TERMS = 1024
_INT64 = 2**63


@dataclass(frozen=True)
class Condition:
    """``metadata[key] <op> value``: ``in``/``nin`` take a non-empty list, ranges a number,
    ``exists`` a boolean, ``like`` a prefix pattern (:func:`like_prefix`)."""

    key: str
    op: Op
    value: Scalar | tuple[Scalar, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key or len(self.key) > MAX_KEY_CHARS:
            raise ValueError(f"filter key must be a string of 1..{MAX_KEY_CHARS} characters")
        if self.op not in OPS:
            raise ValueError(f"filter op must be one of {OPS}, got {self.op!r}")
        if self.op in ("in", "nin"):
            if isinstance(self.value, str | bytes) or not isinstance(self.value, list | tuple):
                raise ValueError(f"filter op {self.op!r} takes a list of values")
            if not 1 <= len(self.value) <= MAX_IN_VALUES:
                raise ValueError(f"filter op {self.op!r} takes 1..{MAX_IN_VALUES} values")
            object.__setattr__(self, "value", tuple(self.value))
            for v in self.value:
                _check_scalar(v)
        elif self.op in ("eq", "ne"):
            _check_scalar(self.value)
        elif self.op == "exists":
            if not isinstance(self.value, bool):
                raise ValueError(f"filter op 'exists' takes true or false, got {self.value!r}")
        elif self.op == "like":
            like_prefix(self.value)
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


def like_prefix(pattern: Any) -> str:
    """The prefix a ``like`` pattern asks for: ``"ab%"`` is every string that starts with
    ``ab``. Only prefix patterns: one ``%`` at the end; ``\\%``, ``\\_`` and ``\\\\`` are a
    literal ``%``, ``_`` and backslash; any other ``%`` or ``_`` is refused."""
    if not isinstance(pattern, str) or not pattern.endswith("%"):
        raise ValueError("filter op 'like' takes a prefix pattern ending in '%', e.g. "
                         f"'doc_%' is refused but 'doc\\_%' is fine; got {pattern!r}")
    out, i, body = [], 0, pattern[:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] in "%_\\":
            out.append(body[i + 1])
            i += 2
            continue
        if ch in "%_\\":
            raise ValueError(
                f"filter op 'like' matches prefixes only: {ch!r} at {i} of {pattern!r} must be "
                f"written '\\{ch}' to mean itself (no wildcards but the final '%')")
        out.append(ch)
        i += 1
    return "".join(out)


def _next_prefix(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (code point order,
    which is UTF-8 byte order); None when there is none (the prefix is all U+10FFFF)."""
    chars = list(prefix)
    while chars:
        c = ord(chars[-1]) + 1
        c = 0xE000 if 0xD800 <= c <= 0xDFFF else c  # surrogates are not in valid text
        if c <= 0x10FFFF:
            chars[-1] = chr(c)
            return "".join(chars)
        chars.pop()
    return None


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

    ``{"key": "lang", "op": "eq", "value": "en"}``, ``{"and": [...]}``, ``{"or": [...]}``;
    ``{"key": "lang", "op": "exists"}`` means ``"value": true``. At most
    :data:`MAX_FILTER_DEPTH` levels of ``and``/``or`` and :data:`MAX_FILTER_TERMS`
    comparisons (``ValueError`` naming the limit otherwise).
    """
    terms = [0]
    return _parse(obj, 0, terms)


def _parse(obj: Any, depth: int, terms: list[int]) -> Filter:
    if not isinstance(obj, dict):
        raise ValueError(f"a filter is a JSON object, got {type(obj).__name__}")
    if set(obj) in ({"and"}, {"or"}):
        (name,) = obj
        if depth >= MAX_FILTER_DEPTH:
            raise ValueError(f"a filter nests 'and' and 'or' at most {MAX_FILTER_DEPTH} deep")
        clauses = tuple(_parse(c, depth + 1, terms) for c in _as_list(obj[name], name))
        return And(clauses) if name == "and" else Or(clauses)
    if set(obj) == {"key", "op", "value"}:
        cond = Condition(obj["key"], obj["op"], obj["value"])
    elif set(obj) == {"key", "op"} and obj["op"] == "exists":
        cond = Condition(obj["key"], "exists", True)
    else:
        raise ValueError(
            "a filter is {'key', 'op', 'value'} (op one of " + ", ".join(OPS) + "), "
            f"{{'and': [...]}} or {{'or': [...]}}; got keys {sorted(obj)}"
        )
    terms[0] += len(cond.value) if cond.op in ("in", "nin") else 1  # type: ignore[arg-type]
    if terms[0] > MAX_FILTER_TERMS:
        raise ValueError(f"a filter makes at most {MAX_FILTER_TERMS} comparisons (an 'in' or "
                         "'nin' counts each of its values)")
    return cond


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
    ``in`` on a JSON path; ``ne``, ``nin`` and ``like`` as the module docstring says.
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
    if f.op == "ne":
        assert not isinstance(f.value, tuple)
        return f"((not (exists {path})) or ({path} != {_literal(f.value)}))"
    if f.op == "nin":
        assert isinstance(f.value, tuple)
        either = " or ".join(f"{path} == {_literal(v)}" for v in f.value)
        return f"((not (exists {path})) or (not ({either})))"
    if f.op == "exists":
        return f"(exists {path})" if f.value else f"(not (exists {path}))"
    if f.op == "like":
        prefix = like_prefix(f.value)
        upper = _next_prefix(prefix)
        if upper is None:
            return f"({path} >= {quote(prefix)})"
        return f"({path} >= {quote(prefix)} and {path} < {quote(upper)})"
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
    if f.op in ("ne", "nin", "exists"):
        present = metadata.get(f.key) is not None
        if f.op == "exists":
            return present == f.value
        return not (present and matches(Condition(f.key, "eq" if f.op == "ne" else "in",
                                                  f.value), metadata))
    if f.key not in metadata:
        return False
    a = metadata[f.key]
    if f.op == "like":
        return isinstance(a, str) and a.startswith(like_prefix(f.value))
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
