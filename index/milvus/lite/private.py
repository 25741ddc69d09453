"""Milvus Lite's port for this process only (issue 68, finding 6).

pymilvus opens a Lite file by starting Lite's gRPC server in this process on a free port of
127.0.0.1 (``milvus_lite.server_manager``) and connecting to it. That port has no
authentication: any local user who found it could read and write every collection, past
the service's keys and tenants. :func:`install` makes the servers this process starts
refuse every call that does not carry :data:`TOKEN`, a secret drawn at import and never
written anywhere; :func:`index.milvus.conn.connect` sends it (as pymilvus sends any
``token``: base64 in the ``authorization`` metadata). A call without it is refused with
``UNAUTHENTICATED`` before Lite sees it.
"""

from __future__ import annotations

import base64
import secrets
import threading
from collections.abc import Callable
from typing import Any

import grpc

TOKEN = "qkv-lite-" + secrets.token_urlsafe(32)
_EXPECTED = {TOKEN, base64.b64encode(TOKEN.encode()).decode()}
_lock = threading.Lock()
_state = {"installed": False}


class TokenCheck(grpc.ServerInterceptor):  # type: ignore[misc]
    """Refuses a call whose ``authorization`` metadata is not this process's token."""

    def __init__(self) -> None:
        def refuse(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "this Milvus Lite server serves "
                          "its own process only")

        self._refused = grpc.unary_unary_rpc_method_handler(refuse)

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: Any) -> Any:
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                got = value.decode() if isinstance(value, bytes) else str(value)
                if got in _EXPECTED:
                    return continuation(handler_call_details)
        return self._refused


def install() -> None:
    """Make the Lite servers this process starts from now on refuse calls without
    :data:`TOKEN` (idempotent)."""
    with _lock:
        if _state["installed"]:
            return
        from milvus_lite.adapter.grpc import server as lite_server

        original = lite_server.grpc.server

        def guarded_server(*args: Any, **kwargs: Any) -> Any:
            kwargs["interceptors"] = [TokenCheck(), *(kwargs.get("interceptors") or ())]
            return original(*args, **kwargs)

        class _Grpc:  # Lite's module sees grpc with a guarded server(); nothing else changes
            def __getattr__(self, name: str) -> Any:
                return getattr(grpc, name)

            server = staticmethod(guarded_server)

        lite_server.grpc = _Grpc()
        _state["installed"] = True
