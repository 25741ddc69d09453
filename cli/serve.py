"""``qkv serve``: the HTTP service under uvicorn."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from api.settings import Settings


# The options `qkv serve` and `qkv stack up` share: what the API serves.
MODEL = typer.Option(None, "--model", help="Encoder checkpoint (default: QKV_MODEL or "
                     "models/encoder-default).")
DEMO = typer.Option(None, "--demo", help="JSONL(.gz) corpus loaded into the `docs` collection "
                    "on first start (QKV_DEMO_CORPUS).")
DEMO_TM = typer.Option(None, "--demo-tm", help="JSONL(.gz) translation pairs (text: source, "
                       "value: target) loaded into the `tm-en-fr` collection on first start "
                       "(QKV_DEMO_TM).")
DEMO_TOKEN_MEMORY = typer.Option(
    None, "--demo-token-memory", file_okay=False, help="Directory of the demo translation "
    "memory's token memory: read, or built in the background from the filled collection "
    "(QKV_DEMO_TOKEN_MEMORY).")
DECODER = typer.Option(None, "--decoder", metavar="COLLECTION=DIR", help="Decoder checkpoint "
                       "for a collection's generate; repeatable (QKV_DECODERS).")
TOKEN_MEMORY = typer.Option(None, "--token-memory", metavar="COLLECTION=DIR", help="Token "
                            "memory (kNN-MT, qkv build-token-memory) of a collection with a "
                            "decoder; repeatable (QKV_TOKEN_MEMORIES).")


def serve_settings(store: str | None = None, model: Path | None = None,
                   demo: Path | None = None, demo_tm: Path | None = None,
                   decoders: list[str] | None = None,
                   token_memories: list[str] | None = None,
                   demo_token_memory: Path | None = None) -> Settings:
    """The settings of ``qkv serve``: ``QKV_*`` variables, with the options given winning
    (``--decoder`` entries replace ``QKV_DECODERS`` as a whole, ``--token-memory`` ones
    ``QKV_TOKEN_MEMORIES``)."""
    from api.settings import Settings, decoder_entry

    overrides: dict[str, object] = {k: v for k, v in {
        "store": store, "model": model, "demo_corpus": demo, "demo_tm": demo_tm,
        "demo_token_memory": demo_token_memory}.items()
        if v is not None}
    if decoders:
        overrides["decoders"] = dict(decoder_entry(d) for d in decoders)
    if token_memories:
        overrides["token_memories"] = dict(
            decoder_entry(m, "a token memory is COLLECTION=DIR") for m in token_memories)
    return Settings(**overrides)  # type: ignore[arg-type]


def curl_examples(settings: Settings, base: str) -> list[str]:
    """A curl line per demo collection the settings seed: a search of the docs, a
    translation by the translation memory's decoder."""
    lines = []
    if settings.demo_corpus is not None:
        lines.append(f"try: curl -s {base}/v1/collections/{settings.demo_collection}/search "
                     "-H 'Content-Type: application/json' -d '{\"query\": \"how do I read a "
                     "JSON file\", \"top_k\": 3}'")
    if settings.demo_tm is not None:
        lines.append(f"translate: curl -s {base}/v1/collections/{settings.demo_tm_collection}"
                     "/generate -H 'Content-Type: application/json' -d '{\"query\": \"A man is "
                     "riding a bike.\", \"top_k\": 4}'")
    return lines


def banner(settings: Settings, base: str) -> str:
    """What ``qkv serve`` prints once ready: where, and the curl lines."""
    return "\n".join([f"qkv: ready on {base} (web page: {base}/ui, OpenAPI: {base}/docs), "
                      f"store {settings.store}, encoder {settings.model}",
                      *curl_examples(settings, base)])


def serve(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port", min=0, max=65535),
    store: str | None = typer.Option(None, "--store", help="Milvus Lite file, http://host:port "
                                     "or faiss://DIR (default: QKV_STORE or var/qkv.db)."),
    model: Path | None = MODEL,
    demo: Path | None = DEMO,
    demo_tm: Path | None = DEMO_TM,
    decoder: list[str] | None = DECODER,
    token_memory: list[str] | None = TOKEN_MEMORY,
    demo_token_memory: Path | None = DEMO_TOKEN_MEMORY,
    log_level: str = typer.Option("info", "--log-level"),
) -> None:
    """Serve the API (OpenAPI at /docs). Settings come from QKV_* variables; options win."""
    from wiring import runtime

    runtime.configure(serving=True)
    import uvicorn

    from api.app import create_app

    try:
        settings = serve_settings(store, model, demo, demo_tm, decoder, token_memory,
                                  demo_token_memory)
    except ValueError as e:  # pydantic's ValidationError is one
        raise typer.BadParameter(str(e)) from e
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
    from api.keys import KeyFileError

    try:
        app = create_app(settings, banner=banner(settings, f"http://{shown}:{port}"))
    except KeyFileError as e:  # refuse to start on a malformed keys file, naming the line
        typer.echo(f"error: keys file: {e}", err=True)
        raise typer.Exit(2) from e
    if app.state.keys.open and host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(f"warning: no API keys (QKV_API_KEY, qkv keys create) and listening on "
                   f"{host}: anyone who reaches this port may read, write and drop every "
                   "collection", err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


def demo_vectors(
    corpora: list[Path] = typer.Argument(..., help="Demo JSONL(.gz) corpora, e.g. "
                                         "data/demo/*.jsonl.gz."),
    model: Path | None = MODEL,
) -> None:
    """Encode demo corpora and write each one's vectors beside it (<name>.vectors.npz,
    float16, tied to the encoder's fingerprint and the corpus file): a first start then
    loads them instead of encoding. Run it again after changing the encoder or a corpus."""
    from wiring import runtime

    runtime.configure()
    from api.settings import Settings
    from wiring.components import encoder_info, load_encoder
    from wiring.demo import write_vectors

    for corpus in corpora:
        if not corpus.is_file():
            raise typer.BadParameter(f"{corpus} is not a file", param_hint="CORPORA")
    text_encoder = load_encoder(model or Settings().model)
    info = encoder_info(text_encoder)
    for corpus in corpora:
        out = write_vectors(text_encoder, info, corpus)
        typer.echo(f"{out}: {corpus} by {info.name} ({info.fingerprint})")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("demo-vectors")(demo_vectors)
