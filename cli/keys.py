"""``qkv keys create|list|revoke``: the service's API keys (:mod:`api.keys`), in the keys
file that running servers re-read within a second."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import typer

keys_app = typer.Typer(help="API keys: scopes (read < write < admin), tenants, collections, "
                       "limits. The secret is printed once.", no_args_is_help=True)
FILE = typer.Option(None, "--keys-file", envvar="QKV_KEYS_FILE",
                    help="The keys file (default: keys.jsonl beside --store).")
STORE = typer.Option("var/qkv.db", "--store", envvar="QKV_STORE",
                     help="The local store the keys file sits beside.")


def _path(keys_file: Path | None, store: str) -> Path:
    from api.keys import default_keys_file

    path = keys_file or default_keys_file(store)
    if path is None:
        raise typer.BadParameter("a Milvus server has no directory of its own here: give "
                                 "--keys-file (QKV_KEYS_FILE)")
    return path


def _read(path: Path) -> dict:  # type: ignore[type-arg]
    from api.keys import KeyFileError, read_keys

    try:
        return read_keys(path)
    except KeyFileError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e


@keys_app.command("create")
def create(
    scope: str = typer.Option("read", "--scope", help="read, write or admin."),
    tenant: list[str] = typer.Option([], "--tenant", help="Bind to this tenant (repeat)."),
    collection: list[str] = typer.Option([], "--collection",
                                         help="Bind to this collection (repeat)."),
    rps: float | None = typer.Option(None, "--rps", help="Requests per second."),
    tps: float | None = typer.Option(None, "--tps", help="Texts encoded per second."),
    name: str = typer.Option("", "--name", help="A note: whose key it is."),
    keys_file: Path | None = FILE, store: str = STORE,
) -> None:
    """A new key: prints its secret once (only its hash is kept)."""
    from api.keys import locked, new_key

    path = _path(keys_file, store)
    _read(path)  # a malformed file: its line, before anything
    try:
        key, secret = new_key(scope, tenant, collection, rps, tps, name)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    with locked(path) as keys:
        keys[key.id] = key
    typer.echo(secret)
    typer.echo(f"key {key.id} ({key.scope}) written to {path}; the secret above is not "
               "shown again", err=True)


@keys_app.command("list")
def list_(keys_file: Path | None = FILE, store: str = STORE) -> None:
    """Every key (id, scope, bindings, limits, revoked), one JSON object a line; no secrets."""
    for key in _read(_path(keys_file, store)).values():
        typer.echo(json.dumps(key.to_public()))


@keys_app.command("revoke")
def revoke(key_id: str, keys_file: Path | None = FILE, store: str = STORE) -> None:
    """Revoke KEY_ID: refused (401) by running servers within a second."""
    from dataclasses import replace

    from api.keys import locked

    path = _path(keys_file, store)
    _read(path)
    with locked(path) as keys:
        if key_id in keys and keys[key_id].revoked is None:
            keys[key_id] = replace(keys[key_id],
                                   revoked=datetime.now(UTC).isoformat(timespec="seconds"))
    if key_id not in keys:
        typer.echo(f"error: no key {key_id!r} in {path}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
