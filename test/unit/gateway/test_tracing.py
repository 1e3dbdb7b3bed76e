"""Tracing through a real gateway to fake engines: the spans of one request, in one trace, continued by the engine.

Spans are recorded by OpenTelemetry's SDK into an InMemorySpanExporter (a SimpleSpanProcessor: each span is there
once it has ended); the gateway's tracer is taken when it is built, so each test installs the provider first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmaz.gateway.proxy.auth import ApiKeys
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.runtime import tracing
from llmaz_dev.testing.tracing import recorded_spans
from llmaz_dev.testing.waiting import eventually

from .support import WAIT, Cluster, endpoint_slice, engines, open_model, playground, refused_endpoint, running_gateway

CHAT = "/v1/chat/completions"
ROOT = f"POST {CHAT}"
STREAM_BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
KEY = "sk-trace-secret-0123"
MARKER = "header-marker-4d9a"
CLIENT_TRACE = 0x0AF7651916CD43DD8448EB211C80319C
CLIENT_SPAN = 0xB7AD6B7169203331


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recorded_spans() as exporter:
        yield exporter


def keys_file(tmp_path: Path) -> ApiKeys:
    path = tmp_path / "keys"
    path.write_text(KEY + "\n")
    keys = ApiKeys(path)
    keys.load()
    return keys


def by_name(finished: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    named = {span.name: span for span in finished}
    assert len(named) == len(finished), [span.name for span in finished]
    return named


def traceparent(trace_id: int, span_id: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def parent_of(header: str) -> tuple[int, int]:
    """The trace and parent span ids a `traceparent` header names."""
    version, trace_id, span_id, _ = header.split("-")
    assert version == "00"
    return int(trace_id, 16), int(span_id, 16)


async def test_a_streamed_request_is_one_trace_of_its_steps_and_the_engine_is_sent_the_upstream_call_as_parent(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    async with engines(1) as (engine,):
        engine.handler = engine.stream
        engine.release.set()
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, api_keys=keys_file(tmp_path)) as gw:
            headers = {"Authorization": f"Bearer {KEY}", "X-Marker": MARKER}
            async with gw.session.post(gw.url + CHAT, json=STREAM_BODY, headers=headers) as resp:
                assert resp.status == 200
                await resp.read()
            await eventually(lambda: any(span.name == ROOT for span in spans.get_finished_spans()), WAIT)
    named = by_name(spans.get_finished_spans())
    assert set(named) == {ROOT, "auth", "pick", "upstream", "stream"}
    root = named[ROOT]
    assert root.kind is trace.SpanKind.SERVER
    assert root.parent is None
    trace_id = root.context.trace_id
    for name in ("auth", "pick", "upstream", "stream"):
        assert named[name].context.trace_id == trace_id, name
        parent = named[name].parent
        assert parent is not None, name
        assert parent.span_id == root.context.span_id, name
    assert named["upstream"].kind is trace.SpanKind.CLIENT
    assert (
        dict(root.attributes or {}).items()
        >= {
            "http.request.method": "POST",
            "http.route": CHAT,
            "http.response.status_code": 200,
            "llmaz.model": "m",
        }.items()
    )
    assert (
        dict(named["pick"].attributes or {}).items()
        >= {
            "llmaz.routing.strategy": "prefix-aware",  # the gateway's default
            "llmaz.endpoint": str(engine.endpoint),
            "llmaz.attempt": 1,
        }.items()
    )
    assert (
        dict(named["stream"].attributes or {}).items()
        >= {"gen_ai.usage.input_tokens": 7, "gen_ai.usage.output_tokens": 11}.items()
    )
    assert named["upstream"].end_time is not None
    assert named["stream"].start_time is not None
    assert named["upstream"].end_time <= named["stream"].start_time  # the call ends at the first byte
    (seen,) = engine.requests
    assert parent_of(seen.headers["traceparent"]) == (trace_id, named["upstream"].context.span_id)
    values = [str(value) for span in named.values() for value in (span.attributes or {}).values()]
    assert not [value for value in values if KEY in value or MARKER in value or "Bearer" in value]


async def test_an_incoming_traceparent_is_continued_by_every_span_and_passed_on_to_the_engine(
    spans: InMemorySpanExporter,
) -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            headers = {"traceparent": traceparent(CLIENT_TRACE, CLIENT_SPAN), "tracestate": "vendor=1"}
            status, _ = await gw.post(CHAT, {"model": "m", "messages": []}, headers=headers)
            assert status == 200
            await eventually(lambda: any(span.name == ROOT for span in spans.get_finished_spans()), WAIT)
    named = by_name(spans.get_finished_spans())
    assert {span.context.trace_id for span in named.values()} == {CLIENT_TRACE}
    root = named[ROOT]
    assert root.parent is not None
    assert root.parent.span_id == CLIENT_SPAN
    assert root.parent.is_remote
    (seen,) = engine.requests
    assert parent_of(seen.headers["traceparent"]) == (CLIENT_TRACE, named["upstream"].context.span_id)
    assert seen.headers["tracestate"] == "vendor=1"


async def test_a_request_held_for_a_starting_replica_has_a_hold_span_before_its_pick(
    spans: InMemorySpanExporter,
) -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.open_models.add(open_model("m"))
        cluster.playgrounds.add(playground("p", "m"))
        cluster.slices.add(endpoint_slice("p-lb-old", "p-lb", engine.port, ("127.0.0.1", False, True)))  # stopping
        async with running_gateway(cluster, GatewayOptions(hold_timeout=WAIT)) as gw:
            held = asyncio.create_task(gw.session.post(gw.url + CHAT, json={"model": "m", "messages": []}))
            await eventually(lambda: gw.gateway.in_flight.of_model("m") > 0, WAIT, "the request held")
            cluster.slices.add(endpoint_slice("p-lb-new", "p-lb", engine.port, ("127.0.0.1", True, False)))
            async with await asyncio.wait_for(held, WAIT) as resp:
                assert resp.status == 200
            await eventually(lambda: any(span.name == ROOT for span in spans.get_finished_spans()), WAIT)
    named = by_name(spans.get_finished_spans())
    hold = named["hold"]
    assert hold.parent is not None
    assert hold.parent.span_id == named[ROOT].context.span_id
    assert (
        dict(hold.attributes or {}).items()
        >= {
            "llmaz.model": "m",
            "llmaz.hold.reason": "starting",
            "llmaz.hold.endpoints": 1,
        }.items()
    )
    assert hold.end_time is not None
    assert named["pick"].start_time is not None
    assert hold.end_time <= named["pick"].start_time


async def test_each_attempt_has_a_pick_and_an_upstream_call_of_its_own_and_a_502_is_an_error(
    spans: InMemorySpanExporter,
) -> None:
    cluster = Cluster().synced()
    with refused_endpoint() as first, refused_endpoint() as second:
        cluster.serve("m", first, second)
        async with running_gateway(cluster) as gw:
            status, _ = await gw.post(CHAT, {"model": "m", "messages": []})
            assert status == 502
            await eventually(lambda: any(span.name == ROOT for span in spans.get_finished_spans()), WAIT)
    finished = spans.get_finished_spans()
    picks = sorted(
        (dict(s.attributes or {}) for s in finished if s.name == "pick"), key=lambda a: str(a["llmaz.attempt"])
    )
    calls = [s for s in finished if s.name == "upstream"]
    assert [(p["llmaz.attempt"], p["llmaz.routing.candidates"]) for p in picks] == [(1, 2), (2, 1), (3, 0)]
    assert {p.get("llmaz.endpoint") for p in picks} == {str(first), str(second), None}
    assert "llmaz.routing.reason" in picks[2]  # nothing left to try: the scheduler says why
    assert [c.status.status_code for c in calls] == [trace.StatusCode.ERROR] * 2
    (root,) = (s for s in finished if s.name == ROOT)
    assert root.status.status_code is trace.StatusCode.ERROR
    assert dict(root.attributes or {})["http.response.status_code"] == 502


async def test_with_tracing_off_the_tracer_is_the_no_op_one_and_a_client_traceparent_reaches_the_engine_as_sent() -> (
    None
):
    assert not tracing.enabled()
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            assert isinstance(gw.gateway.tracer, trace.NoOpTracer)
            sent = traceparent(CLIENT_TRACE, CLIENT_SPAN)
            status, _ = await gw.post(CHAT, {"model": "m", "messages": []}, headers={"traceparent": sent})
            assert status == 200
            status, _ = await gw.post(CHAT, {"model": "m", "messages": []})
            assert status == 200
    first, second = engine.requests
    assert first.headers["traceparent"] == sent
    assert "traceparent" not in second.headers


async def test_requests_succeed_while_the_collector_is_down() -> None:
    with refused_endpoint() as collector:
        tracing.start(f"http://{collector.address}:{collector.port}/v1/traces", 1.0, "llmaz-gateway-test")
        try:
            async with engines(1) as (engine,):
                cluster = Cluster().synced()
                cluster.serve("m", engine.endpoint)
                async with running_gateway(cluster) as gw:
                    assert not isinstance(gw.gateway.tracer, trace.NoOpTracer)
                    for _ in range(3):
                        status, answer = await gw.post(CHAT, {"model": "m", "messages": []})
                        assert status == 200
                        assert answer["object"] == "chat.completion"
        finally:
            await asyncio.to_thread(tracing.shutdown, 1.0)
    assert not tracing.enabled()


async def test_a_refused_key_ends_the_trace_at_an_auth_span_marked_by_the_error_code_alone(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, api_keys=keys_file(tmp_path)) as gw:
            status, _ = await gw.post(CHAT, {"model": "m"}, headers={"Authorization": "Bearer sk-wrong-7f3e"})
            assert status == 401
            await eventually(lambda: any(span.name == ROOT for span in spans.get_finished_spans()), WAIT)
    named = by_name(spans.get_finished_spans())
    assert set(named) == {ROOT, "auth"}
    assert named["auth"].status.status_code is trace.StatusCode.ERROR
    assert named["auth"].status.description == "invalid_api_key"
    assert dict(named[ROOT].attributes or {})["http.response.status_code"] == 401
    assert named[ROOT].status.status_code is trace.StatusCode.UNSET  # a client's error is not the gateway's
    assert engine.requests == []
