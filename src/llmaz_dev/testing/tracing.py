"""Spans recorded in memory for a test: the runtime's tracer provider set to one that keeps every finished span,
and put back when the test ends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmaz.runtime import tracing


@contextlib.contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
        provider.shutdown()
