"""The HTTP reference: the app's own OpenAPI document rendered as Markdown, one page per tag
(each operation's parameters, request body fields and answers, and the schemas they name),
so the reference cannot disagree with the routes."""

from __future__ import annotations

import json
from typing import Any

METHODS = ("get", "post", "put", "patch", "delete")


def prose(text: Any) -> str:
    """Text from docstrings as Markdown: ``<`` and ``>`` outside code spans escaped, so
    ``<name>`` shows instead of vanishing as an HTML tag."""
    parts = str(text).split("`")
    for i in range(0, len(parts), 2):  # even parts are outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def cell(text: Any) -> str:
    """One table cell: a single line of prose, pipes escaped."""
    return prose(" ".join(str(text).split())).replace("|", "\\|")


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


LINK = {"page": ""}  # where schema links point: "" (this page) or the tag's schemas page


def type_of(schema: dict[str, Any], named: set[str]) -> str:
    """A short type for a JSON schema; every schema it names by ``$ref`` is added to
    ``named`` (rendered below the operations, or on the tag's schemas page)."""
    if "$ref" in schema:
        name = ref_name(schema["$ref"])
        named.add(name)
        return f"[{name}]({LINK['page']}#{slug(name)})"
    if "anyOf" in schema or "oneOf" in schema:
        parts = [type_of(s, named) for s in schema.get("anyOf", schema.get("oneOf", []))]
        return " or ".join(dict.fromkeys(parts))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return type_of(schema["allOf"][0], named)
    if "enum" in schema:
        return " / ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type")
    if kind == "array":
        return f"list of {type_of(schema.get('items', {}), named)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {type_of(schema['additionalProperties'], named)}"
    if kind == "null":
        return "null"
    return str(kind or "any")


def default_of(schema: dict[str, Any]) -> str:
    return f"`{json.dumps(schema['default'])}`" if "default" in schema else ""


def fields_table(schema: dict[str, Any], named: set[str]) -> list[str]:
    props = schema.get("properties") or {}
    if not props:
        return [f"Type: {type_of(schema, named)}."]
    required = set(schema.get("required", []))
    rows = ["| field | type | required | default | description |", "|---|---|---|---|---|"]
    for name, prop in props.items():
        rows.append(f"| `{name}` | {cell(type_of(prop, named))} | "
                    f"{'yes' if name in required else ''} | {cell(default_of(prop))} | "
                    f"{cell(prop.get('description', ''))} |")
    return rows


def body_schema(content: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    for media, spec in content.items():
        return media, spec.get("schema", {})
    return None


def operation(method: str, path: str, op: dict[str, Any], named: set[str]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if op.get("summary"):
        out += [f"**{op['summary']}**", ""]
    if op.get("description"):
        out += [prose(op["description"].strip()), ""]
    params = op.get("parameters") or []
    if params:
        out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        out += [f"| `{p['name']}` | {p['in']} | {cell(type_of(p.get('schema', {}), named))} | "
                f"{'yes' if p.get('required') else ''} | {cell(p.get('description', ''))} |"
                for p in params]
        out.append("")
    body = op.get("requestBody")
    if body:
        found = body_schema(body.get("content", {}))
        if found:
            media, schema = found
            required = " (required)" if body.get("required") else ""
            out += [f"Request body `{media}`{required}: {type_of(schema, named)}", ""]
    answers = op.get("responses") or {}
    if answers:
        out += ["| status | answer |", "|---|---|"]
        errors: dict[str, list[str]] = {}
        for status, spec in answers.items():
            found = body_schema(spec.get("content", {}))
            shape = type_of(found[1], named) if found and found[1] else ""
            if status.startswith(("4", "5")):
                errors.setdefault(shape, []).append(status)
                continue
            out.append(f"| {status} | {cell(spec.get('description', ''))}"
                       f"{': ' + cell(shape) if shape else ''} |")
        for shape, statuses in errors.items():
            out.append(f"| {', '.join(statuses)} | an error{': ' + cell(shape) if shape else ''}"
                       f" ([what each status means](../errors.md)) |")
        out.append("")
    return out


def schema_section(name: str, schema: dict[str, Any], named: set[str]) -> list[str]:
    out = [f"### {name}", ""]
    if schema.get("description"):
        out += [prose(" ".join(schema["description"].split())), ""]
    return out + fields_table(schema, named) + [""]


def tags(doc: dict[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for ops in doc["paths"].values():
        for method, op in ops.items():
            if method in METHODS:
                for tag in op.get("tags") or ["other"]:
                    seen[tag] = None
    return list(seen)


def schemas_page(tag: str) -> str:
    return f"{slug(tag)}-schemas.md"


def tag_pages(doc: dict[str, Any], tag: str, limit: int = 15_000) -> dict[str, str]:
    """The tag's page, with its schemas below; or, past ``limit`` characters, the
    operations on one page and the schemas on ``TAG-schemas.md``."""
    page = tag_page(doc, tag)
    if len(page) <= limit:
        return {f"{slug(tag)}.md": page}
    LINK["page"] = f"{slug(tag)}-schemas.md"
    try:
        ops = tag_page(doc, tag)
    finally:
        LINK["page"] = ""
    head, _, schemas = ops.partition("\n## Schemas\n")
    own = schemas_page(tag)
    return {f"{slug(tag)}.md": head.rstrip() + f"\n\nSchemas: [{tag} schemas]({own}).\n",
            own: f"# HTTP API: {tag} schemas\n\nThe request and answer bodies of "
            f"[{tag}]({slug(tag)}.md), from the app's OpenAPI document; do not edit.\n"
            + schemas.replace(f"]({own}#", "](#")}


def tag_page(doc: dict[str, Any], tag: str) -> str:
    """Markdown of every operation tagged ``tag``, then the schemas they use (those schemas
    name, transitively)."""
    schemas = doc.get("components", {}).get("schemas", {})
    named: set[str] = set()
    out = [f"# HTTP API: {tag}", "",
           "Generated from the app's OpenAPI document (`GET /openapi.json` of a running "
           "server, interactive at `/docs`); do not edit.", ""]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if method in METHODS and tag in (op.get("tags") or ["other"]):
                out += operation(method, path, op, named)
    done: set[str] = set()
    section: list[str] = []
    while named - done:
        for name in sorted(named - done):
            done.add(name)
            if name in schemas:
                section += schema_section(name, schemas[name], named)
    if section:
        out += ["## Schemas", "", *section]
    return "\n".join(out).rstrip() + "\n"


def index_page(doc: dict[str, Any]) -> str:
    out = ["# HTTP API", "",
           f"{doc['info'].get('title', '')} {doc['info'].get('version', '')}: every route of "
           "the app, generated from its OpenAPI document; do not edit. A running server "
           "serves the same document at `/openapi.json` and an interactive page at `/docs`.",
           "", "| route | what | page |", "|---|---|---|"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if method in METHODS:
                tag = (op.get("tags") or ["other"])[0]
                out.append(f"| `{method.upper()} {path}` | {cell(op.get('summary', ''))} | "
                           f"[{tag}]({slug(tag)}.md) |")
    return "\n".join(out) + "\n"


def pages(doc: dict[str, Any]) -> dict[str, str]:
    """``{file name: markdown}`` for ``reference/http/``: an index and one page per tag."""
    out = {"index.md": index_page(doc)}
    for tag in tags(doc):
        out.update(tag_pages(doc, tag))
    return out
