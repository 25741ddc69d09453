"""``qkv alias list|set|drop``: a store's collection aliases (:mod:`index.aliases`)."""

from __future__ import annotations

import typer

from index.store import explain

alias_app = typer.Typer(help="Collection aliases: names that can be moved to another "
                        "collection in one step.", no_args_is_help=True)
STORE = typer.Option("var/qkv.db", "--store", help="Milvus Lite file, http://host:port, or "
                     "faiss://DIR.")
TOKEN = typer.Option("", "--token", envvar="QKV_MILVUS_TOKEN", help="Milvus token.")


def _run(store: str, token: str, what: str, *args: str) -> object:
    from index import StoreError, collection_name, open_store

    try:
        names = [collection_name(a) for a in args]
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    s = open_store(store, token=token)
    try:
        return getattr(s, what)(*names)
    except StoreError as e:
        typer.echo(f"error: {explain(e)}", err=True)
        raise typer.Exit(1) from e
    finally:
        s.close()


@alias_app.command("list")
def list_(store: str = STORE, token: str = TOKEN) -> None:
    """Every alias and the collection it points at."""
    aliases = _run(store, token, "list_aliases")
    assert isinstance(aliases, dict)
    for alias, collection in aliases.items():
        typer.echo(f"{alias} -> {collection}")


@alias_app.command("set")
def set_(alias: str, collection: str, store: str = STORE, token: str = TOKEN) -> None:
    """Point ALIAS at COLLECTION (creating it, or moving it in one step)."""
    before = _run(store, token, "set_alias", alias, collection)
    typer.echo(f"{alias} -> {collection} (before: {before or 'none'})")


@alias_app.command("drop")
def drop(alias: str, store: str = STORE, token: str = TOKEN) -> None:
    """Delete ALIAS (the collection stays)."""
    _run(store, token, "drop_alias", alias)
    typer.echo(f"dropped alias {alias}")


def register(app: typer.Typer) -> None:
    app.add_typer(alias_app, name="alias")
