"""OpenTelemetry tracing for a process, off by default: spans exported over OTLP/HTTP when an endpoint is named.

- Off (no `--otlp-endpoint`, neither OTEL_EXPORTER_OTLP_TRACES_ENDPOINT nor OTEL_EXPORTER_OTLP_ENDPOINT set): every
  tracer is OpenTelemetry's no-op one, and the SDK and the exporter are never imported.
- On: a TracerProvider samples new traces at `--trace-sample-ratio` and follows an incoming trace's own decision
  (parent-based), and a BatchSpanProcessor exports from its own thread, its queue bounded (MAX_QUEUE_SPANS: beyond
  that spans are dropped), so a slow or unreachable collector never holds up or fails the work being traced. An
  export that fails is logged at most once per EXPORT_ERROR_LOG_SECONDS (with how many batches failed since), never
  once per span or batch. At start-up a collector that takes no connection is reported at once, with the fix.
- The endpoint: the flag's URL, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT;
  the flag's and OTEL_EXPORTER_OTLP_ENDPOINT's URL is a collector's base (`http://jaeger:4318`), to which
  TRACES_PATH is added unless it already ends so. Only http and https URLs with a host are accepted.
- Trace context crosses process boundaries as W3C `traceparent` (and `tracestate`) headers only (`extract`,
  `inject`); no other propagator (baggage) is used.

This module knows nothing of what is traced: callers name their spans and attributes.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from llmaz.runtime.log import get_logger

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

ENDPOINT_FLAG = "--otlp-endpoint"
RATIO_FLAG = "--trace-sample-ratio"
TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
BASE_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_PATH = "/v1/traces"
# Spans held for export; beyond that new spans are dropped (the BatchSpanProcessor's bound).
MAX_QUEUE_SPANS = 2048
# Seconds one export request may take, retries included (a down collector costs the export thread this, no more).
EXPORT_TIMEOUT_SECONDS = 5.0
# Seconds the spans still queued get to leave at shutdown.
SHUTDOWN_SECONDS = 3.0
# A failing export is logged at most once per this many seconds.
EXPORT_ERROR_LOG_SECONDS = 60.0
# How long the start-up check of the collector waits for a connection.
PROBE_TIMEOUT_SECONDS = 3.0
UNREACHABLE_FIX = (
    f"start the collector, or point {ENDPOINT_FLAG} (or ${BASE_ENDPOINT_ENV}) at one that runs, or leave them empty "
    "to turn tracing off"
)
# The exporter's own loggers, quietened: their failures are reported here, rate-limited.
_EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http", "opentelemetry.exporter.otlp.common")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_PROPAGATOR = TraceContextTextMapPropagator()
_NO_OP: trace.TracerProvider = trace.NoOpTracerProvider()
_provider: trace.TracerProvider = _NO_OP
_shutdown: list[tuple[Any, Any]] = []  # what `shutdown` stops: the SDK's span processor and its exporter
_log = get_logger("llmaz.runtime.tracing")


def enabled() -> bool:
    """Whether spans are recorded and exported (an SDK provider is installed)."""
    return _provider is not _NO_OP


def tracer(name: str) -> trace.Tracer:
    """The tracer called `name`: the no-op one while tracing is off."""
    return _provider.get_tracer(name)


def use(provider: trace.TracerProvider | None) -> None:
    """Record spans with `provider` from now on (tracers already handed out keep theirs); None: tracing off."""
    global _provider
    _provider = _NO_OP if provider is None else provider


def extract(headers: Mapping[str, str]) -> Context:
    """The trace context an incoming request carries in `traceparent`/`tracestate` (an empty one if none)."""
    return _PROPAGATOR.extract(headers)


def inject(headers: MutableMapping[str, str], span: trace.Span) -> None:
    """Set `headers`' `traceparent` (and `tracestate`) to `span`'s context, replacing what they carried."""
    headers.pop(TRACEPARENT, None)
    headers.pop(TRACESTATE, None)
    _PROPAGATOR.inject(headers, context=trace.set_span_in_context(span))


def end(span: trace.Span) -> None:
    """End `span` unless it has ended (or records nothing)."""
    if span.is_recording():
        span.end()


# Endpoints and flags


def traces_url(text: str) -> str:
    """The OTLP/HTTP traces URL for a collector's base URL `text` (TRACES_PATH added unless it ends so); raises
    ValueError saying what is wrong when `text` is not an http(s) URL with a host."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"must be an http:// or https:// URL of an OTLP collector (like http://jaeger:4318), got {text!r}"
        )
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise ValueError(f"has a port that is not a number from 0 to 65535: {text!r}") from None
    base = text.strip().rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def _endpoint_flag(text: str) -> str:
    if not text:
        return ""
    try:
        return traces_url(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _ratio_flag(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text}")
    return value


def add_tracing_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        ENDPOINT_FLAG,
        type=_endpoint_flag,
        default="",
        help=f"OTLP/HTTP collector to export traces to, like http://jaeger:4318 ({TRACES_PATH} is added); empty: "
        f"${TRACES_ENDPOINT_ENV} or ${BASE_ENDPOINT_ENV} if set, else tracing is off (default empty)",
    )
    add(
        RATIO_FLAG,
        type=_ratio_flag,
        default=1.0,
        help="share of new traces recorded, 0 to 1; a request that arrives in a trace follows its caller's choice "
        "(default 1)",
    )


def endpoint_of(flag: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The traces URL to export to, or None when tracing is off: the flag's, else the environment's. Raises
    ValueError naming the variable when an environment variable is not a URL."""
    if flag:
        return flag
    env = os.environ if environ is None else environ
    for name, whole in ((TRACES_ENDPOINT_ENV, True), (BASE_ENDPOINT_ENV, False)):
        value = env.get(name, "").strip()
        if not value:
            continue
        try:
            url = traces_url(value)
        except ValueError as err:
            raise ValueError(f"{name} {err}") from None
        return value if whole else url
    return None


# The SDK, imported only when tracing is on


def start(endpoint: str, sample_ratio: float, service: str, exporter: SpanExporter | None = None) -> None:
    """Record spans of `service` and export them to `endpoint` (or to `exporter`, for tests) from now on."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    for name in _EXPORTER_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
    provider = TracerProvider(
        resource=Resource.create(attributes),
        sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
        shutdown_on_exit=False,  # `shutdown`, bounded, does it
    )
    reporting = _reporting(exporter or OTLPSpanExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_SECONDS), endpoint)
    processor = BatchSpanProcessor(reporting, max_queue_size=MAX_QUEUE_SPANS)
    provider.add_span_processor(processor)
    _shutdown.append((processor, reporting))
    use(provider)
    _log.info("tracing on", endpoint=endpoint, sample_ratio=sample_ratio)


def start_from(args: argparse.Namespace, service: str) -> bool:
    """Tracing as `add_tracing_flags`' flags and the environment say; whether it is on. Raises ValueError naming
    the environment variable that is not a URL. A collector that cannot be reached is reported from a thread of
    its own (`warn_if_unreachable`): the start never waits for it."""
    endpoint = endpoint_of(args.otlp_endpoint)
    if endpoint is None:
        return False
    start(endpoint, args.trace_sample_ratio, service)
    threading.Thread(target=warn_if_unreachable, args=(endpoint,), name="tracing-probe", daemon=True).start()
    return True


def warn_if_unreachable(endpoint: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> bool:
    """Whether a TCP connection to the collector at `endpoint` opens within `timeout`; a warning naming the
    endpoint and the fix when it does not."""
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return True
    except OSError as err:
        _log.warning(
            "trace collector unreachable; spans are dropped until it answers",
            endpoint=endpoint,
            error=type(err).__name__,
            fix=UNREACHABLE_FIX,
        )
        return False


def shutdown(timeout: float = SHUTDOWN_SECONDS) -> None:
    """Export what is queued, for at most `timeout` seconds, and turn tracing off."""
    use(None)
    while _shutdown:
        processor, exporter = _shutdown.pop()
        # The processor exports what is queued before it stops, retrying a down collector: bounded here, then the
        # exporter is stopped, which ends its retries (its thread is a daemon: it never holds the process up).
        stopping = threading.Thread(target=processor.shutdown, name="tracing-shutdown", daemon=True)
        stopping.start()
        stopping.join(timeout)
        if stopping.is_alive():
            exporter.shutdown()


def _reporting(inner: SpanExporter, endpoint: str) -> SpanExporter:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Reporting(SpanExporter):
        """`inner`, its failures logged at most once per EXPORT_ERROR_LOG_SECONDS."""

        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._failed = 0
            self._logged_at: float | None = None

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            try:
                result = inner.export(spans)
                error = None
            except Exception as exc:  # an exporter's bug must not kill the export thread
                result, error = SpanExportResult.FAILURE, type(exc).__name__
            if result is not SpanExportResult.SUCCESS:
                self._failure(error)
            return result

        def _failure(self, error: str | None) -> None:
            now = time.monotonic()
            with self._lock:
                self._failed += 1
                if self._logged_at is not None and now - self._logged_at < EXPORT_ERROR_LOG_SECONDS:
                    return
                failed, self._failed, self._logged_at = self._failed, 0, now
            _log.warning(
                "trace export failed; spans are dropped until the collector answers",
                endpoint=endpoint,
                failed_batches=failed,
                error=error,
                fix=UNREACHABLE_FIX,
                next_report_seconds=EXPORT_ERROR_LOG_SECONDS,
            )

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return Reporting()


@contextlib.contextmanager
def span(tracer_name: str, name: str, attributes: Mapping[str, str | int] | None = None) -> Iterator[trace.Span]:
    """A span called `name`, current inside the block, from the tracer `tracer_name` (no-op while off)."""
    with tracer(tracer_name).start_as_current_span(name, attributes=attributes) as current:
        yield current
