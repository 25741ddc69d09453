"""``qkv adapt``: adapt the encoder to a collection's documents and swap it in
(:mod:`wiring.adapting`), on a running service (``--server``) or on the store directly."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from cli.index import DEFAULT_MODEL
from index.store import explain


def adapt(
    collection: str = typer.Argument(..., help="Collection (or alias) to adapt to."),
    server: str | None = typer.Option(None, "--server", help="A running qkv service "
                                      "(http://host:port): the job runs there."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="QKV_API_KEY"),
    store: str = typer.Option("var/qkv.db", "--store", help="Without --server: the store "
                              "(Milvus Lite file, http://host:port, or faiss://DIR)."),
    token: str = typer.Option("", "--token", envvar="QKV_MILVUS_TOKEN"),
    model: Path = typer.Option(DEFAULT_MODEL, "--model", help="Without --server: the "
                               "service's encoder (QKV_MODEL)."),
    encoders: Path | None = typer.Option(None, "--encoders-dir", help="Without --server: "
                                         "where derived encoders live (QKV_ENCODERS_DIR)."),
    budget: float = typer.Option(
        540.0, "--budget", min=30, help="About how long the whole job may take, in seconds "
        "(re-index included); training gets what the rest is expected to leave."),
    force: bool = typer.Option(False, "--force", help="Adapt even where the check says it "
                               "would not help."),
) -> None:
    """Adapt the encoder to COLLECTION's documents (no labels), re-index them into a new
    collection, calibrate it and point COLLECTION at it; skipped where it would not help,
    not swapped in where it checks no better."""
    if server is not None:
        state = _remote(server.rstrip("/"), collection, api_key, budget, force)
    else:
        state = _local(collection, store, token, model, encoders, budget, force)
    typer.echo(json.dumps(state.get("report"), indent=1))
    typer.echo(f"{collection}: {state['phase']}: {state.get('reason', '')}")
    if state["phase"] == "failed":
        raise typer.Exit(1)


def _remote(server: str, collection: str, api_key: str | None, budget: float, force: bool
            ) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=server, headers=headers, timeout=60) as c:
        r = c.post(f"/v1/collections/{collection}/adapt",
                   json={"budget_s": budget, "force": force})
        if r.status_code != 202:
            typer.echo(f"error: {r.status_code} {r.text}", err=True)
            raise typer.Exit(1)
        state, said = r.json(), ""
        while state["phase"] not in ("done", "skipped", "rejected", "failed", "interrupted"):
            time.sleep(2)
            state = c.get(f"/v1/jobs/{state['id']}").json()
            line = f"{state['phase']} {state.get('step') or ''} {state['progress']:.0%}"
            if line != said:
                typer.echo(line, err=True)
                said = line
    return state


def _local(collection: str, store: str, token: str, model: Path, encoders: Path | None,
           budget: float, force: bool) -> dict:
    from wiring import runtime

    runtime.configure()
    from api.settings import Settings, encoders_dir
    from index import StoreError, collection_name, open_store
    from index.hybrid.calibration import model_mapping
    from index.hybrid.fusion import model_dense_weight
    from wiring import adapting
    from wiring.calibrating import calibrate
    from wiring.components import encoder_info, load_encoder

    root = encoders_dir(Settings(store=store, encoders_dir=encoders, model=model))
    vector_store = open_store(store, token=token)
    try:
        name = collection_name(collection)
        info = vector_store.describe(name)
        made_by = info.encoder.name if info.encoder is not None else None
        default = json.loads((model / "config.json").read_text())["architecture"]["name"]
        base = model if made_by in (None, default) \
            else root / str(made_by)

        def embed_with(encoder: str) -> tuple[adapting.Embed, object, list[int]]:
            enc = load_encoder(root / encoder)
            return (lambda texts: enc.encode(list(texts)), encoder_info(enc), list(enc.dims))

        journal = adapting.Journal.new(root, name, {"budget_s": budget, "force": force})
        return adapting.run(
            vector_store, journal, base, root, embed_with,  # type: ignore[arg-type]
            on_calibrate=lambda target, embed, held: calibrate(
                vector_store, target, embed, model_mapping(base), model_dense_weight(base),
                held=held))
    except (StoreError, ValueError, OSError) as e:
        typer.echo(f"error: {explain(e)}", err=True)
        raise typer.Exit(1) from e
    finally:
        vector_store.close()


def register(app: typer.Typer) -> None:
    app.command("adapt")(adapt)
