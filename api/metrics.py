"""Prometheus metrics of one app (its own registry, so several apps can live in a process).

- ``qkv_request_seconds{method,route,status}``: latency histogram per route template;
- ``qkv_encoder_batch_texts`` / ``qkv_encoder_batch_tokens`` / ``qkv_encoder_batch_seconds``:
  sizes and encoder time of the encoder's batches;
- ``qkv_encoder_queue_depth``: texts waiting for the encoder; ``qkv_encoder_rejected_total``:
  texts refused with 429 because the queue was full;
- ``qkv_store_errors_total{kind}``: store calls that failed (``unavailable`` or ``error``).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TOKEN_BUCKETS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_seconds = Histogram(
            "qkv_request_seconds", "HTTP request latency by route template",
            ["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_texts = Histogram("qkv_encoder_batch_texts", "Texts per encoder batch",
                                     buckets=SIZE_BUCKETS, registry=r)
        self.batch_tokens = Histogram("qkv_encoder_batch_tokens",
                                      "Padded tokens per encoder batch", buckets=TOKEN_BUCKETS,
                                      registry=r)
        self.batch_seconds = Histogram("qkv_encoder_batch_seconds",
                                       "Encoder time per batch", buckets=LATENCY_BUCKETS,
                                       registry=r)
        self.queue_depth = Gauge("qkv_encoder_queue_depth", "Texts waiting for the encoder",
                                 registry=r)
        self.rejected = Counter("qkv_encoder_rejected_total",
                                "Texts refused with 429 (encoder queue full)", registry=r)
        self.store_errors = Counter("qkv_store_errors_total", "Failed store calls", ["kind"],
                                    registry=r)
        self.store_free_bytes = Gauge("qkv_store_free_bytes", "Free bytes on the file system "
                                      "of the store's data (Milvus Lite, FAISS)", registry=r)
        self.key_requests = Counter("qkv_key_requests_total", "Requests by API key id and "
                                    "outcome (ok, unauthorized, forbidden, limited)",
                                    ["key", "outcome"], registry=r)
        self.writes_refused = Counter("qkv_writes_refused_total",
                                      "Writes refused with 507 (store's disk under the flood "
                                      "mark)", registry=r)

    def observe_request(self, scope: Any, status: int, seconds: float) -> None:
        """One HTTP request's latency under its route template
        (``/v1/collections/{name}/search``, not the raw path, so label cardinality stays
        small; ``unmatched`` where no route saw it)."""
        route = scope.get("route")
        path = (getattr(route, "path_format", None) or getattr(route, "path", None)
                or "unmatched")
        self.request_seconds.labels(scope["method"], path, str(status)).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
