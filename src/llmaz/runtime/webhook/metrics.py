"""Webhook metrics with controller-runtime's names, labels and buckets, in the shared registry.

`webhook` is the path; `code` is the HTTP status of the response, 200 for denials too (the verdict travels in
the body). The 200 and 500 series exist from registration, so rates start at zero instead of absent.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from llmaz.runtime.metrics import REGISTRY

# ExponentialBuckets(10e-9, 10, 12): 10 ns ... 1000 s.
_BUCKETS = tuple(1e-8 * 10**i for i in range(12))

REQUESTS = Counter(
    "controller_runtime_webhook_requests_total",
    "Total number of admission requests by HTTP status code.",
    ["webhook", "code"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "controller_runtime_webhook_latency_seconds",
    "Histogram of the latency of processing admission requests",
    ["webhook"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "controller_runtime_webhook_requests_in_flight",
    "Current number of admission requests being served.",
    ["webhook"],
    registry=REGISTRY,
)
PANICS = Counter(
    "controller_runtime_webhook_panics_total",
    "Total number of webhook panics",
    registry=REGISTRY,
)


def register_path(path: str) -> None:
    """Create the zero-valued series of a webhook path."""
    for code in ("200", "500"):
        REQUESTS.labels(webhook=path, code=code)
    IN_FLIGHT.labels(webhook=path)
