"""Reading an error body in the shape its route promises: OpenAI's under ``/v1/``
(``{"error": {"message", "type", "param", "code"}}``), TEI's elsewhere
(``{"error", "error_type"}``)."""

from __future__ import annotations

from typing import Any

OPENAI_TYPES = {"invalid_request_error", "authentication_error", "rate_limit_error",
                "server_error"}


def error_of(r: Any) -> dict[str, Any]:
    """``{"error": message, "error_type": qkv's type, "param": field or None}`` of the
    response ``r`` (httpx or TestClient), after checking the body's shape fits its path."""
    body = r.json()
    if r.request.url.path.startswith("/v1/"):
        assert set(body) == {"error"}, body
        err = body["error"]
        assert set(err) == {"message", "type", "param", "code"}, body
        assert err["type"] in OPENAI_TYPES and err["message"], body
        assert (err["type"] == "authentication_error") == (r.status_code == 401), body
        return {"error": err["message"], "error_type": err["code"], "param": err["param"]}
    assert set(body) == {"error", "error_type"} and body["error"], body
    return {**body, "param": None}
