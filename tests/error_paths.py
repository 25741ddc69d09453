"""Every error answer the test suite provokes is read for a path of the server's file
system (issue 44: "no error body contains a path"). ``tests/conftest.py`` wraps httpx's
``send`` (httpx's and httpx2's: the TestClient, the OpenAI SDK, every client of a ``qkv serve``) for
the whole session: an error answer (4xx/5xx) naming a path fails the test that provoked it,
and the session too (a client in a thread would swallow the failure)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

# An absolute path under a directory a server's files live in (not a URL path such as
# /v1/collections: those are the API's own, and carry no file system detail).
_ROOTS = ("tmp", "work", "home", "root", "var", "srv", "opt", "usr", "etc", "mnt", "data",
          "private")
PATH = re.compile(r"(?<![\w.:/-])/(?:{})/[\w.-]+".format("|".join(_ROOTS)))
REPO = str(Path(__file__).resolve().parents[1])
checked = {"errors": 0}
leaks: list[str] = []


def leaked_path(body: str) -> str | None:
    """The first file-system path in an answer's body, or None."""
    m = PATH.search(body)
    if m:
        return m.group(0)
    return REPO if REPO in body else None


def _inspect(response: Any) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.text
    except Exception:  # ResponseNotRead: a streamed answer its caller reads itself
        return
    checked["errors"] += 1
    found = leaked_path(body)
    if found is not None:
        what = (f"{response.request.method} {response.request.url.path} answered "
                f"{response.status_code} naming {found!r}: {body[:300]}")
        leaks.append(what)
        raise AssertionError(f"an error answer names a server path: {what}")


def _wrap(module: Any) -> Callable[[], None]:
    sync_send, async_send = module.Client.send, module.AsyncClient.send

    def send(self: Any, request: Any, **kwargs: Any) -> Any:
        response = sync_send(self, request, **kwargs)
        _inspect(response)
        return response

    async def asend(self: Any, request: Any, **kwargs: Any) -> Any:
        response = await async_send(self, request, **kwargs)
        _inspect(response)
        return response

    module.Client.send, module.AsyncClient.send = send, asend

    def undo() -> None:
        module.Client.send, module.AsyncClient.send = sync_send, async_send

    return undo


def install() -> Callable[[], None]:
    """Wrap ``send`` of httpx's clients and of httpx2's (Starlette's TestClient, the openai
    SDK); returns the undo."""
    undos = [_wrap(httpx)]
    try:
        import httpx2
    except ImportError:
        pass
    else:
        undos.append(_wrap(httpx2))

    def undo() -> None:
        for u in undos:
            u()

    return undo
