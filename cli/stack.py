"""``qkv stack up|down|status``: Milvus standalone (PyPI ``milvus==2.3.5``) and the API as
child processes, without Docker (the :mod:`stack` package)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from cli import serve

stack_app = typer.Typer(help="A local Milvus server and the API, without Docker.",
                        no_args_is_help=True)

VAR_DIR = typer.Option(Path("var/stack"), "--var-dir", help="State: Milvus' data and logs, "
                       "the API's log, pid files, stack.json.")


@stack_app.command("up")
def up(
    var_dir: Path = VAR_DIR,
    host: str = typer.Option("127.0.0.1", "--host", help="The API's interface."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="The API's port."),
    milvus_port: int = typer.Option(19530, "--milvus-port", min=1, max=65535),
    milvus_http_port: int = typer.Option(0, "--milvus-http-port", min=0, max=65535,
                                         help="Milvus' /healthz and /metrics (0: any free)."),
    model: Path | None = serve.MODEL,
    demo: Path | None = serve.DEMO,
    demo_tm: Path | None = serve.DEMO_TM,
    decoder: list[str] | None = serve.DECODER,
    demo_token_memory: Path | None = serve.DEMO_TOKEN_MEMORY,
    timeout: float = typer.Option(600.0, "--timeout", min=1, help="Seconds to wait for both "
                                  "servers to be ready."),
    stop_timeout: float = typer.Option(10.0, "--stop-timeout", min=0, help="Seconds Milvus "
                                       "gets after SIGTERM before it is killed."),
) -> None:
    """Start Milvus, then the API against it; wait until both are ready; keep them running
    until Ctrl-C or `qkv stack down`, then stop both."""
    from cli.serve import curl_examples, serve_settings
    from stack import StackConfig, StackError
    from stack import up as stack_up

    cfg = StackConfig(var_dir=var_dir, host=host, api_port=port, milvus_port=milvus_port,
                      milvus_http_port=milvus_http_port, model=model, demo=demo,
                      demo_tm=demo_tm, decoders=tuple(decoder or ()),
                      demo_token_memory=demo_token_memory,
                      start_timeout_s=timeout, stop_timeout_s=stop_timeout)
    try:  # the API's settings, as `qkv serve` will read them: refused here, not in its log
        settings = serve_settings(cfg.milvus_uri, model, demo, demo_tm, decoder,
                                  demo_token_memory=demo_token_memory)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e

    def ready(state: dict[str, Any]) -> None:
        url = state["api_url"]
        typer.echo(f"qkv stack: ready. API {url} (docs {url}/docs), Milvus "
                   f"{state['milvus_version']} {state['milvus_uri']}, state in {var_dir}")
        for line in curl_examples(settings, url):
            typer.echo(line)
        typer.echo(f"qkv stack: Ctrl-C or `qkv stack down --var-dir {var_dir}` stops both")

    try:
        stack_up(cfg, on_ready=ready)
    except StackError as e:
        typer.echo(f"qkv stack: {e}", err=True)
        raise typer.Exit(1) from e
    typer.echo("qkv stack: stopped")


@stack_app.command("down")
def down(var_dir: Path = VAR_DIR) -> None:
    """Stop the stack started from --var-dir (its data stays)."""
    from stack import down as stack_down

    stopped = stack_down(var_dir)
    typer.echo(f"qkv stack: stopped {', '.join(stopped)}" if stopped
               else f"qkv stack: nothing running from {var_dir}")


@stack_app.command("status")
def status(var_dir: Path = VAR_DIR) -> None:
    """Say whether the stack from --var-dir runs, and where. Exit status 0 when both servers
    run, 1 otherwise."""
    from stack import read_state, running

    state, live = read_state(var_dir), running(var_dir)
    if not live:
        typer.echo(f"qkv stack: nothing running from {var_dir}")
        raise typer.Exit(1)
    pids = ", ".join(f"{role} {p.pid}" for role, p in live.items())
    typer.echo(f"qkv stack: {state.get('status', '?')} ({pids}); API {state.get('api_url')}, "
               f"Milvus {state.get('milvus_uri')}")
    if not {"milvus", "api"} <= live.keys():
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(stack_app, name="stack")
