"""FastAPI's own OpenTelemetry instrumentation: on where OpenTelemetry is configured from the
environment, off (no per-request check of the global providers) where it is not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from api.app import create_app
from api.settings import Settings


def _tracing(tmp_path: Path, tiny_encoder_dir: Path) -> bool:
    app = create_app(Settings(store=str(tmp_path / "t.db"), model=tiny_encoder_dir))
    if not hasattr(app, "_telemetry"):
        pytest.skip("this FastAPI has no OpenTelemetry of its own")
    return bool(app._telemetry["tracing"] and app._telemetry["metrics"])  # FastAPI's config


def test_telemetry_follows_the_opentelemetry_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_encoder_dir: Path) -> None:
    for key in [k for k in os.environ if k.startswith(("OTEL_", "FASTAPI_OTEL_"))]:
        monkeypatch.delenv(key)
    assert _tracing(tmp_path, tiny_encoder_dir) is False
    monkeypatch.setenv("FASTAPI_OTEL_AUTO_CONFIGURE", "true")
    assert _tracing(tmp_path, tiny_encoder_dir) is True
    monkeypatch.delenv("FASTAPI_OTEL_AUTO_CONFIGURE")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "qkv")
    assert _tracing(tmp_path, tiny_encoder_dir) is True
