"""Tracing's switch, endpoint and failure handling, and the controller's span per reconcile."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.testing import capture_logs

from llmaz.gateway.__main__ import main as gateway_main
from llmaz.gateway.__main__ import parse_args as gateway_args
from llmaz.manager.__main__ import main as manager_main
from llmaz.manager.__main__ import parse_args as manager_args
from llmaz.runtime import log, tracing
from llmaz.runtime.controller import Request, Result, TerminalError
from llmaz_dev.testing import FakeClock
from llmaz_dev.testing.runnables import started
from llmaz_dev.testing.tracing import recorded_spans
from llmaz_dev.testing.waiting import eventually, eventually_sync

from .test_controller import ScriptedReconciler, build, model


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recorded_spans() as exporter:
        yield exporter


@pytest.mark.parametrize("parse", [gateway_args, manager_args])
@pytest.mark.parametrize("bad", ["jaeger:4318", "grpc://jaeger:4317", "http://", "http://c:99999"])
def test_an_endpoint_flag_that_is_not_an_http_url_stops_the_start_naming_the_flag(
    parse: object, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse([tracing.ENDPOINT_FLAG, bad])  # type: ignore[operator]
    assert stopped.value.code == 2
    assert "argument --otlp-endpoint:" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["-0.1", "1.5", "half"])
def test_a_sample_ratio_outside_zero_to_one_stops_the_start_naming_the_flag(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        gateway_args([tracing.RATIO_FLAG, bad])
    assert "argument --trace-sample-ratio:" in capsys.readouterr().err


def test_the_flag_names_a_collector_whose_traces_path_is_added_once() -> None:
    assert gateway_args([]).otlp_endpoint == ""
    assert gateway_args([]).trace_sample_ratio == 1.0
    assert gateway_args(["--otlp-endpoint", "http://tempo:4318"]).otlp_endpoint == "http://tempo:4318/v1/traces"
    assert manager_args(["--otlp-endpoint", "https://c/v1/traces/"]).otlp_endpoint == "https://c/v1/traces"


def test_without_the_flag_the_environment_names_the_endpoint_the_traces_variable_first() -> None:
    base = {tracing.BASE_ENDPOINT_ENV: "http://base:4318"}
    both = {**base, tracing.TRACES_ENDPOINT_ENV: "http://traces:4318/custom"}
    assert tracing.endpoint_of("", {}) is None
    assert tracing.endpoint_of("", base) == "http://base:4318/v1/traces"
    assert tracing.endpoint_of("", both) == "http://traces:4318/custom"  # the signal's own variable, as it is
    assert tracing.endpoint_of("http://flag:4318/v1/traces", both) == "http://flag:4318/v1/traces"


def test_an_environment_endpoint_that_is_not_a_url_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match=f"^{tracing.BASE_ENDPOINT_ENV} must be an http"):
        tracing.endpoint_of("", {tracing.BASE_ENDPOINT_ENV: "collector:4318"})


def test_with_tracing_off_the_sdk_and_the_exporter_are_never_imported() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    code = (
        "import sys\n"
        "from llmaz.gateway.__main__ import parse_args\n"
        "from llmaz.runtime import tracing\n"
        "assert not tracing.start_from(parse_args([]), 'llmaz-gateway')\n"
        "assert type(tracing.tracer('x')).__name__ == 'NoOpTracer'\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class Refusing(SpanExporter):
    """A collector that is down: every export fails."""

    def __init__(self) -> None:
        self.batches = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batches += 1
        return SpanExportResult.FAILURE


def test_failing_exports_are_logged_once_not_per_batch() -> None:
    collector = Refusing()
    tracing.start("http://down:4318/v1/traces", 1.0, "test", exporter=collector)
    try:
        processor, _ = tracing._shutdown[-1]
        with capture_logs() as logs:
            for _ in range(3):
                tracing.tracer("test").start_span("s").end()
                processor.force_flush()
    finally:
        tracing.shutdown(1.0)
    assert collector.batches == 3
    failed = [log for log in logs if log["event"].startswith("trace export failed")]
    assert len(failed) == 1
    assert failed[0]["failed_batches"] == 1
    assert failed[0]["endpoint"] == "http://down:4318/v1/traces"


def test_a_collector_that_takes_no_connection_is_reported_at_start_naming_the_endpoint_and_the_fix() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        endpoint = f"http://127.0.0.1:{port}/v1/traces"
        with capture_logs() as logs:
            assert tracing.warn_if_unreachable(endpoint, timeout=2.0) is False
    (warning,) = [entry for entry in logs if entry["event"].startswith("trace collector unreachable")]
    assert warning["endpoint"] == endpoint
    assert warning["error"] == "ConnectionRefusedError"
    assert "--otlp-endpoint" in warning["fix"]
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in warning["fix"]


def test_a_collector_that_listens_is_not_reported() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listening, capture_logs() as logs:
        endpoint = f"http://127.0.0.1:{listening.getsockname()[1]}/v1/traces"
        assert tracing.warn_if_unreachable(endpoint, timeout=2.0) is True
    assert logs == []


def test_starting_from_the_flags_reports_a_down_collector_without_waiting_for_it() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        args = gateway_args(["--otlp-endpoint", f"http://127.0.0.1:{closed.getsockname()[1]}"])
        try:
            with capture_logs() as logs:
                assert tracing.start_from(args, "test") is True
                eventually_sync(
                    lambda: any(e["event"].startswith("trace collector unreachable") for e in logs),
                    5.0,
                    "the start-up warning",
                )
        finally:
            tracing.shutdown(1.0)


async def test_each_reconcile_is_a_span_named_after_the_controller_with_the_object_and_its_result(
    spans: InMemorySpanExporter,
) -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock, [TerminalError("bad spec"), Result()])
    controller, informer = build("openmodel", reconciler, clock)
    async with started(controller):
        informer.add(model("a"))
        informer.add(model("b"))
        await eventually(lambda: len(spans.get_finished_spans()) == 2)
    first, second = sorted(spans.get_finished_spans(), key=lambda s: str((s.attributes or {})["k8s.object.name"]))
    assert [first.name, second.name] == ["openmodel", "openmodel"]
    assert (
        dict(first.attributes or {}).items()
        >= {
            "k8s.object.kind": "OpenModel",
            "k8s.object.namespace": "ns",
            "k8s.object.name": "a",
            "llmaz.reconcile.result": "error",
        }.items()
    )
    assert first.status.status_code is trace.StatusCode.ERROR
    assert dict(second.attributes or {})["llmaz.reconcile.result"] == "success"
    ids = {(s.attributes or {})["llmaz.reconcile.reconcile_id"] for s in (first, second)}
    assert len(ids) == 2
    assert [c.request for c in reconciler.calls] == [Request("ns", "a"), Request("ns", "b")]


@pytest.mark.parametrize("main", [gateway_main, manager_main])
def test_a_bad_environment_endpoint_stops_the_start_naming_the_variable(
    main: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tracing.BASE_ENDPOINT_ENV, "collector:4318")
    monkeypatch.setattr(log, "configure", lambda *_: None)  # the process's logging setup would outlive the test
    with capture_logs() as logs:
        assert main([]) == 2  # type: ignore[operator]
    assert not tracing.enabled()
    (line,) = [entry for entry in logs if entry["event"] == "cannot start tracing"]
    assert line["error"].startswith(f"{tracing.BASE_ENDPOINT_ENV} must be an http")
