"""``qkv serve``: the HTTP service under uvicorn."""

from __future__ import annotations

from pathlib import Path

import typer


def serve(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port", min=0, max=65535),
    store: str | None = typer.Option(None, "--store", help="Milvus Lite file, http://host:port "
                                     "or faiss://DIR (default: QKV_STORE or var/qkv.db)."),
    model: Path | None = typer.Option(None, "--model", help="Encoder checkpoint (default: "
                                      "QKV_MODEL or models/encoder-default)."),
    demo: Path | None = typer.Option(None, "--demo", help="JSONL(.gz) corpus loaded into the "
                                     "`docs` collection on first start (QKV_DEMO_CORPUS)."),
    log_level: str = typer.Option("info", "--log-level"),
) -> None:
    """Serve the API (OpenAPI at /docs). Settings come from QKV_* variables; options win."""
    from api import runtime

    runtime.configure(serving=True)
    import uvicorn

    from api.app import create_app
    from api.settings import Settings

    overrides = {k: v for k, v in {"store": store, "model": model, "demo_corpus": demo}.items()
                 if v is not None}
    settings = Settings(**overrides)  # type: ignore[arg-type]
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
    base = f"http://{shown}:{port}"
    banner = (f"qkv: ready on {base} (OpenAPI: {base}/docs), store {settings.store}, encoder "
              f"{settings.model}\ntry: curl -s {base}/v1/collections/{settings.demo_collection}"
              "/search -H 'Content-Type: application/json' -d '{\"query\": \"how do I read a "
              "JSON file\", \"top_k\": 3}'")
    app = create_app(settings, banner=banner)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
