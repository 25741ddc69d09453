"""The command-line and settings references, generated from the typer app and from the
``Settings`` class: every command with its options, and every ``QKV_*`` variable with its
type, default and description."""

from __future__ import annotations

import json
from typing import Any

from docsite.openapi_md import cell, prose, slug


def walk(command: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    """Every command under ``command`` (groups first, then their commands), sorted. Duck-typed:
    typer ships its own copy of click."""
    found = [(path, command)]
    if hasattr(command, "commands"):
        for name in sorted(command.commands):
            found += walk(command.commands[name], [*path, name])
    return found


def param_row(param: Any, ctx: Any) -> str:
    if param.param_type_name == "option":
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    else:
        names = f"`{(param.name or '').upper()}`"
    kind = "flag" if getattr(param, "is_flag", False) else param.display_type(ctx).strip("<>")
    default = param.default
    shown = ("" if default is None or callable(default) or default in ((), "")
             else f"`{default}`")
    env = getattr(param, "envvar", None)
    note = f" (env `{env}`)" if isinstance(env, str) else ""
    help_text = getattr(param, "help", "") or ""
    return (f"| {names} | {cell(kind)} | {'yes' if param.required else ''} | {cell(shown)} | "
            f"{cell(help_text + note)} |")


def group_of(command: Any) -> str:
    """The ``cli`` module that registers a command: ``cli.encoder`` -> ``encoder``."""
    module = getattr(getattr(command, "callback", None), "__module__", "") or ""
    return module.rsplit(".", 1)[-1] or "other"


def cli_pages(root: Any, prog: str = "qkv") -> dict[str, str]:
    """``{file name: markdown}`` for ``reference/cli/``: an index of every command, and one
    page per module of ``cli/`` with its commands' options."""
    commands = [(p, c) for p, c in walk(root, []) if p and not hasattr(c, "commands")]
    groups: dict[str, list[tuple[list[str], Any]]] = {}
    for path, command in commands:
        groups.setdefault(group_of(command), []).append((path, command))
    index = ["# Command line", "",
             f"Generated from the `{prog}` typer app; do not edit. `{prog} COMMAND --help` "
             "prints the same.", "", "| command | what |", "|---|---|"]
    for path, command in commands:
        name = " ".join([prog, *path])
        first = (command.short_help or command.help or "").strip().split("\n\n")[0]
        target = f"{group_of(command)}-commands.md"
        index.append(f"| [`{name}`]({target}#{slug(name)}) | {cell(first)} |")
    out = {"index.md": "\n".join(index) + "\n"}
    for group, members in sorted(groups.items()):
        page = [f"# Command line: {group}", "",
                f"Generated from the `{prog}` typer app (`cli/{group}.py`); do not edit.", ""]
        for path, command in members:
            name = " ".join([prog, *path])
            page += [f"## {name}", "", prose((command.help or "").strip().replace("\b\n", "")), ""]
            params = [p for p in command.params if not getattr(p, "hidden", False)]
            if params:
                ctx = command.context_class(command)
                page += ["| option | type | required | default | description |",
                         "|---|---|---|---|---|", *[param_row(p, ctx) for p in params], ""]
        out[f"{group}-commands.md"] = "\n".join(page).rstrip() + "\n"
    return out


def settings_page(settings_cls: Any, prefix: str = "QKV_") -> str:
    """Every field of a pydantic-settings class as its environment variable."""
    out = ["# Settings", "",
           f"Generated from `{settings_cls.__module__}.{settings_cls.__name__}`; do not edit. "
           f"Each setting is an environment variable with the `{prefix}` prefix (also read "
           "from `.env` by docker compose); `qkv serve` options win over them.", "",
           "| variable | type | default | description |", "|---|---|---|---|"]
    for name, field in settings_cls.model_fields.items():
        annotation = field.annotation
        kind = (annotation.__name__ if isinstance(annotation, type) else str(annotation))
        kind = kind.replace("typing.", "").replace("pathlib.", "")
        if field.default_factory is not None:
            default = json.dumps(field.default_factory())
        else:
            default = json.dumps(field.default, default=str)
        out.append(f"| `{prefix}{name.upper()}` | {cell(kind)} | `{cell(default)}` | "
                   f"{cell(field.description or '')} |")
    return "\n".join(out) + "\n"
