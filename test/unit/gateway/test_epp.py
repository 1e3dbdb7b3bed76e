"""The Endpoint Picker's ext_proc conversation, driven over a real gRPC channel on loopback, as Envoy drives it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc
import orjson
import pytest
from envoy.config.core.v3 import base_pb2 as core
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from structlog.testing import capture_logs
from test.unit.gateway.support import (
    WAIT,
    Cluster,
    endpoint_slice,
    engines,
    inference_service,
    open_model,
    playground,
    scraping,
    secret,
)
from test.unit.gateway.test_adapter_routing import HUB, llamacpp, serve_with_adapters
from test.unit.gateway.test_waker import asleep, engine_starts
from test.unit.gateway.test_waker import setup as scaling_setup

from llmaz.apis.routing import LEAST_OUTSTANDING
from llmaz.gateway.epp.http2 import Call, Status
from llmaz.gateway.epp.processor import DESTINATION_HEADER, LB_NAMESPACE, SUBSET_KEY, SUBSET_NAMESPACE, usage_of
from llmaz.gateway.epp.server import EndpointPicker, EppOptions, ProcessCall
from llmaz.gateway.proxy import errors
from llmaz.gateway.proxy.auth import ApiKeys, Authenticator
from llmaz.gateway.proxy.keys import SecretKeys
from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import AdapterSignals
from llmaz.gateway.routing.picker import Pickers, RoutingOptions
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import PromptUsage
from llmaz.gateway.scaling.outlook import Coming
from llmaz.gateway.scaling.waker import Waker
from llmaz_dev.testing.informer import FakeInformer
from llmaz_dev.testing.waiting import eventually

Mode = processing_mode_pb2.ProcessingMode
A = Endpoint("127.0.0.1", 8001)
B = Endpoint("127.0.0.1", 8002)


class CountingInFlight(InFlight):
    """The in-flight counts, with every release recorded (the scheduler's `post_response` releases)."""

    def __init__(self) -> None:
        super().__init__()
        self.released: list[Endpoint] = []
        self.changed = asyncio.Event()

    def release(self, endpoint: Endpoint) -> None:
        super().release(endpoint)
        self.released.append(endpoint)
        self.changed.set()


@dataclass
class Epp:
    picker: EndpointPicker
    in_flight: CountingInFlight
    channel: grpc.aio.Channel
    stub: ext_grpc.ExternalProcessorStub = field(init=False)

    def __post_init__(self) -> None:
        self.stub = ext_grpc.ExternalProcessorStub(self.channel)

    async def exchange(self, *messages: ext.ProcessingRequest, answers: int) -> list[ext.ProcessingResponse]:
        """Send `messages` on one stream, then read `answers` answers and close it."""
        call = self.stub.Process()
        for message in messages:
            await call.write(message)
        got = [await asyncio.wait_for(call.read(), WAIT) for _ in range(answers)]
        await call.done_writing()
        return got


@contextlib.asynccontextmanager
async def running_epp(
    cluster: Cluster,
    max_body_bytes: int = 1 << 20,
    fallbacks: int = 0,
    *,
    hold_timeout: float = WAIT,
    wake_timeout: float = WAIT,
    catalog: Catalog | None = None,
    waker: Waker | None = None,
    api_keys: Authenticator | None = None,
    adapters: AdapterSignals | None = None,
    metrics: GatewayMetrics | None = None,
    strategy: str = LEAST_OUTSTANDING,
) -> AsyncIterator[Epp]:
    """An EPP on loopback over `cluster` (or `catalog`, one of its catalogs), routing by `strategy` (least
    outstanding by default: one request in flight decides its pick)."""
    in_flight = CountingInFlight()
    options = EppOptions(
        host="127.0.0.1",
        port=0,
        max_body_bytes=max_body_bytes,
        drain_timeout=1.0,
        fallbacks=fallbacks,
        hold_timeout=hold_timeout,
        wake_timeout=wake_timeout,
    )
    pickers = Pickers(in_flight, options=RoutingOptions(strategy=strategy), adapters=adapters)
    picker = EndpointPicker(
        catalog or cluster.catalog(), pickers, options, waker=waker, api_keys=api_keys, metrics=metrics
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(picker.run(stopping))
    await asyncio.wait_for(picker.wait_started(), WAIT)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{picker.port}")
    try:
        yield Epp(picker, in_flight, channel)
    finally:
        await channel.close()
        stopping.set()
        await asyncio.wait_for(task, WAIT)


def served(*endpoints: Endpoint, model: str = "m") -> Cluster:
    cluster = Cluster().synced()
    cluster.serve(model, *endpoints)
    return cluster


def headers(
    end_of_stream: bool = False, mode: int | None = None, subset: Any = None, extra: dict[str, str] | None = None
) -> ext.ProcessingRequest:
    values = {":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json", **(extra or {})}
    message = ext.ProcessingRequest(
        request_headers=ext.HttpHeaders(
            headers=core.HeaderMap(headers=[core.HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]),
            end_of_stream=end_of_stream,
        )
    )
    if mode is not None:
        message.protocol_config.request_body_mode = mode
    if subset is not None:
        hint = struct_pb2.Struct()
        hint.update({SUBSET_KEY: subset})
        message.metadata_context.filter_metadata[SUBSET_NAMESPACE].CopyFrom(hint)
    return message


def body(data: bytes, end_of_stream: bool = True) -> ext.ProcessingRequest:
    return ext.ProcessingRequest(request_body=ext.HttpBody(body=data, end_of_stream=end_of_stream))


def chat(model: str = "m") -> bytes:
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hello"}]})


def destination(answer: ext.ProcessingResponse, part: str) -> tuple[str, str]:
    """The destination header a headers or body answer sets, and the destination in its dynamic metadata."""
    common = getattr(answer, part).response
    (option,) = common.header_mutation.set_headers
    assert option.header.key == DESTINATION_HEADER
    metadata = answer.dynamic_metadata.fields[LB_NAMESPACE].struct_value.fields[DESTINATION_HEADER].string_value
    return option.header.raw_value.decode(), metadata


def refusal(answer: ext.ProcessingResponse) -> tuple[int, dict[str, Any]]:
    immediate = answer.immediate_response
    assert answer.WhichOneof("response") == "immediate_response"
    error = orjson.loads(immediate.body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return int(immediate.status.code), error


async def test_a_buffered_body_is_routed_to_the_pick_then_its_fallbacks_in_order() -> None:
    async with running_epp(served(A, B), fallbacks=1) as epp:
        epp.in_flight.acquire(A)  # A is busier: least outstanding picks B, with A as the fallback
        first, second = await epp.exchange(headers(mode=Mode.BUFFERED), body(chat()), answers=2)
    assert first.WhichOneof("response") == "request_headers"
    assert not first.request_headers.response.HasField("header_mutation")
    assert destination(second, "request_body") == (f"{B},{A}", f"{B},{A}")


async def test_without_fallbacks_only_the_pick_is_named() -> None:
    async with running_epp(served(A, B)) as epp:
        epp.in_flight.acquire(A)
        _, answer = await epp.exchange(headers(), body(chat()), answers=2)
    assert destination(answer, "request_body") == (str(B), str(B))


async def test_without_protocol_config_the_body_is_taken_as_buffered() -> None:
    async with running_epp(served(A)) as epp:
        first, second = await epp.exchange(headers(), body(chat()), answers=2)
    assert first.WhichOneof("response") == "request_headers"
    assert destination(second, "request_body") == (str(A), str(A))


async def test_a_full_duplex_body_is_routed_on_the_delayed_headers_answer_and_echoed_chunk_by_chunk() -> None:
    raw = chat()
    parts = [raw[:10], raw[10:25], raw[25:]]
    async with running_epp(served(A)) as epp:
        answers = await epp.exchange(
            headers(mode=Mode.FULL_DUPLEX_STREAMED),
            body(parts[0], False),
            body(parts[1], False),
            body(parts[2], True),
            answers=4,
        )
    assert destination(answers[0], "request_headers") == (str(A), str(A))
    echoed = [a.request_body.response.body_mutation.streamed_response for a in answers[1:]]
    assert [e.body for e in echoed] == parts
    assert [e.end_of_stream for e in echoed] == [False, False, True]


async def test_an_unknown_model_gets_404_model_not_found() -> None:
    async with running_epp(served(A)) as epp:
        _, answer = await epp.exchange(headers(), body(chat("nope")), answers=2)
    status, error = refusal(answer)
    assert (status, error["code"], error["param"]) == (404, "model_not_found", "model")
    assert "`nope`" in error["message"]
    assert "Available models: m." in error["message"]


async def test_a_body_over_the_bound_gets_413_in_either_mode() -> None:
    async with running_epp(served(A), max_body_bytes=64) as epp:
        _, buffered = await epp.exchange(headers(), body(b"x" * 65), answers=2)
        (streamed,) = await epp.exchange(
            headers(mode=Mode.FULL_DUPLEX_STREAMED), body(b"x" * 40, False), body(b"x" * 40, False), answers=1
        )
    for answer in (buffered, streamed):
        status, error = refusal(answer)
        assert (status, error["code"]) == (413, "request_too_large")


async def test_a_buffered_body_larger_than_grpcs_default_message_bound_is_routed() -> None:
    large = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * (5 << 20)}]})
    async with running_epp(served(A), max_body_bytes=6 << 20) as epp:
        _, answer = await epp.exchange(headers(), body(large), answers=2)
    assert destination(answer, "request_body") == (str(A), str(A))


def ready_slice(endpoint: Endpoint, model: str = "m") -> dict[str, Any]:
    return endpoint_slice(f"pg-{model}-lb-new", f"pg-{model}-lb", endpoint.port, (endpoint.address, True, False))


async def held(epp: Epp, model: str = "m") -> None:
    """Wait until a request for `model` is routed and held: counted in flight for its model, with no endpoint."""
    await eventually(lambda: epp.in_flight.of_model(model) > 0, WAIT, "the request held")


async def test_a_request_for_a_model_whose_replicas_start_is_held_and_routed_once_one_is_ready() -> None:
    cluster = served()  # a Playground with a replica that is not ready yet
    async with running_epp(cluster) as epp:
        routing = asyncio.create_task(epp.exchange(headers(), body(chat()), answers=2))
        await held(epp)
        assert not routing.done()
        assert epp.in_flight.busy() == {}  # held: counted for its model, on no endpoint yet
        cluster.slices.add(ready_slice(A))
        _, answer = await asyncio.wait_for(routing, WAIT)
        assert destination(answer, "request_body") == (str(A), str(A))
        await asyncio.wait_for(epp.in_flight.changed.wait(), WAIT)  # the stream closed: the attempt ended
        assert (epp.in_flight.of_model("m"), epp.in_flight.released) == (0, [A])


async def test_a_held_request_is_shown_by_the_proxys_held_requests_gauge_until_it_is_routed() -> None:
    cluster = served()
    metrics = GatewayMetrics(process_collectors=False)

    def held_now() -> float:
        return metrics.registry.get_sample_value("llmaz_gateway_requests_held", {"model": "m"}) or 0.0

    async with running_epp(cluster, metrics=metrics) as epp:
        routing = asyncio.create_task(epp.exchange(headers(), body(chat()), answers=2))
        await eventually(lambda: held_now() == 1, WAIT, "the held request in the gauge")
        cluster.slices.add(ready_slice(A))
        await asyncio.wait_for(routing, WAIT)
        assert held_now() == 0


async def test_a_request_held_past_the_bound_gets_the_proxys_503_model_not_ready() -> None:
    async with running_epp(served(), hold_timeout=0.05) as epp:
        _, answer = await epp.exchange(headers(), body(chat()), answers=2)
        await eventually(lambda: epp.in_flight.of_model("m") == 0, WAIT, "the refused request to stop counting")
    status, error = refusal(answer)
    proxys = errors.not_ready_in_time("m", 0.05)
    assert (status, error) == (proxys.status, proxys.body()["error"])
    assert ("retry-after", "5") in response_headers(answer)


async def test_a_held_request_whose_model_stops_being_served_gets_404_at_once() -> None:
    cluster = served()
    async with running_epp(cluster) as epp:
        routing = asyncio.create_task(epp.exchange(headers(), body(chat()), answers=2))
        await held(epp)
        (found,) = cluster.playgrounds.store.list()
        cluster.playgrounds.delete(found)
        _, answer = await asyncio.wait_for(routing, WAIT)
    status, error = refusal(answer)
    assert (status, error["code"]) == (404, "model_not_found")


async def test_a_model_no_replica_is_coming_for_gets_503_at_once() -> None:
    cluster = Cluster().synced()
    cluster.open_models.add(open_model("m"))
    stopped = playground("pg-m", "m")
    stopped["spec"]["replicas"] = 0  # not opted in to scale to zero: nothing wakes it
    cluster.playgrounds.add(stopped)
    async with running_epp(cluster) as epp:  # held for WAIT if it were held at all
        _, answer = await asyncio.wait_for(epp.exchange(headers(), body(chat()), answers=2), WAIT / 2)
    status, error = refusal(answer)
    assert (status, error["code"]) == (503, "model_not_ready")
    assert "none is coming" in error["message"]


async def test_a_request_for_a_sleeping_model_scales_it_from_zero_and_is_routed_once_it_is_ready() -> None:
    cluster = Cluster().synced()
    cluster.open_models.add(open_model("m"))
    cluster.playgrounds.add(asleep("p", "m"))
    scaling, api, events, catalog = scaling_setup(cluster)
    api.on_scaled.append(engine_starts(cluster, A))
    async with running_epp(cluster, catalog=catalog, waker=scaling.waker) as epp:
        _, answer = await epp.exchange(headers(), body(chat()), answers=2)
    assert destination(answer, "request_body") == (str(A), str(A))
    assert api.scaled == [("p", 1)]
    assert [e[2] for e in events.recorded] == ["ScaledFromZero"]


async def test_a_sleeping_model_that_does_not_wake_within_the_bound_gets_504() -> None:
    cluster = Cluster().synced()
    cluster.open_models.add(open_model("m"))
    cluster.playgrounds.add(asleep("p", "m"))
    scaling, api, _, catalog = scaling_setup(cluster)
    async with running_epp(cluster, catalog=catalog, waker=scaling.waker, wake_timeout=0.05) as epp:
        _, answer = await epp.exchange(headers(), body(chat()), answers=2)
    status, error = refusal(answer)
    assert (status, error["code"]) == (504, "model_wake_timeout")
    assert api.scaled == [("p", 1)]


async def test_the_gateway_cancelling_a_held_request_stops_it_counting_and_the_epp_keeps_serving() -> None:
    cluster = served()
    async with running_epp(cluster) as epp:
        call = epp.stub.Process()
        await call.write(headers())
        await call.write(body(chat()))
        await call.read()
        await held(epp)
        call.cancel()
        await eventually(lambda: epp.in_flight.of_model("m") == 0, WAIT, "the cancelled request to stop counting")
        cluster.slices.add(ready_slice(A))
        _, answer = await epp.exchange(headers(), body(chat()), answers=2)
        assert destination(answer, "request_body") == (str(A), str(A))
    assert epp.in_flight.released == [A]  # only the second request was ever routed


async def test_a_held_request_is_never_routed_outside_the_gateways_subset() -> None:
    cluster = served()
    async with running_epp(cluster) as epp:
        routing = asyncio.create_task(epp.exchange(headers(subset=[str(B)]), body(chat()), answers=2))
        await held(epp)
        cluster.slices.add(ready_slice(A))  # ready, but not in the pool the gateway named
        _, answer = await asyncio.wait_for(routing, WAIT)
    status, error = refusal(answer)
    assert (status, error["code"]) == (503, "no_eligible_endpoint")
    assert epp.in_flight.busy() == {}


async def test_an_adapter_no_ready_replica_holds_is_held_then_gets_the_proxys_503() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,), scraping(cluster) as signals:
        llamacpp(engine)  # lists no adapter
        serve_with_adapters(cluster, engine)
        await signals.scrape()
        async with running_epp(cluster, adapters=signals, hold_timeout=0.05) as epp:
            _, answer = await epp.exchange(headers(), body(chat("sql")), answers=2)
            _, base = await epp.exchange(headers(), body(chat("m")), answers=2)
    proxys = errors.not_ready_in_time("sql", 0.05)
    assert refusal(answer) == (proxys.status, proxys.body()["error"])
    assert destination(base, "request_body") == (str(engine.endpoint),) * 2  # the base model keeps serving


async def test_an_adapter_its_service_left_out_gets_503_at_once() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,), scraping(cluster) as signals:
        llamacpp(engine)
        serve_with_adapters(cluster, engine)
        left_out = [{"name": "sql", "source": HUB, "reason": "ModelLoaderFailed", "message": "exited with code 3"}]
        cluster.services.add({**inference_service("p", "m"), "status": {"unavailableAdapters": left_out}})
        await signals.scrape()
        async with running_epp(cluster, adapters=signals) as epp:  # held for WAIT if it were held at all
            _, answer = await asyncio.wait_for(epp.exchange(headers(), body(chat("sql")), answers=2), WAIT / 2)
    status, error = refusal(answer)
    assert (status, error["code"]) == (503, "model_not_ready")
    assert error["message"] == "The model `sql` has no ready endpoint, and none is coming (adapter unavailable)."


async def test_a_path_the_models_engine_does_not_serve_gets_501_at_once_without_holding() -> None:
    cluster = Cluster().synced()
    cluster.serve("m", backend="llamacpp")  # no endpoint yet: a request it served would be held for WAIT
    async with running_epp(cluster) as epp:
        exchange = epp.exchange(headers(extra={":path": "/v1/score?x=1"}), body(chat()), answers=2)
        _, answer = await asyncio.wait_for(exchange, WAIT / 2)
    status, error = refusal(answer)
    proxys = errors.unsupported_endpoint("m", "/v1/score")
    assert (status, error) == (proxys.status, proxys.body()["error"])
    assert epp.in_flight.of_model("m") == 0  # never counted: nothing was held


async def test_a_path_outside_openais_api_is_left_to_the_gateway_and_routed() -> None:
    cluster = Cluster().synced()
    cluster.serve("m", A, backend="llamacpp")
    async with running_epp(cluster) as epp:
        _, answer = await epp.exchange(headers(extra={":path": "/custom/generate"}), body(chat()), answers=2)
    assert destination(answer, "request_body") == (str(A), str(A))


def response_headers(answer: ext.ProcessingResponse) -> set[tuple[str, str]]:
    return {(o.header.key, o.header.raw_value.decode()) for o in answer.immediate_response.headers.set_headers}


async def test_the_subset_hint_narrows_the_candidates() -> None:
    async with running_epp(served(A, B)) as epp:
        epp.in_flight.acquire(B)  # B is busier, yet the only one the gateway allows
        _, answer = await epp.exchange(headers(subset=[str(B)]), body(chat()), answers=2)
    assert destination(answer, "request_body") == (str(B), str(B))


async def test_a_subset_hint_naming_no_ready_endpoint_gets_503() -> None:
    async with running_epp(served(A, B)) as epp:
        _, answer = await epp.exchange(headers(subset=["10.0.0.9:8000"]), body(chat()), answers=2)
        _, empty = await epp.exchange(headers(subset=[]), body(chat()), answers=2)
    for got in (answer, empty):
        status, error = refusal(got)
        assert (status, error["code"]) == (503, "no_eligible_endpoint")


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([body(chat())], id="a body before the headers"),
        pytest.param([ext.ProcessingRequest()], id="an empty message"),
        pytest.param(
            [
                headers(end_of_stream=True, extra={"x-ai-eg-model": "m"}),
                headers(end_of_stream=True, extra={"x-ai-eg-model": "m"}),
            ],
            id="headers twice",
        ),
    ],
)
async def test_a_message_out_of_order_or_malformed_gets_400_and_the_server_keeps_serving(
    messages: list[ext.ProcessingRequest],
) -> None:
    async with running_epp(served(A)) as epp:
        answers = await epp.exchange(*messages, answers=len(messages))
        status, error = refusal(answers[-1])
        assert (status, error["code"]) == (400, "invalid_processing_request")
        _, routed = await epp.exchange(headers(), body(chat()), answers=2)
        assert destination(routed, "request_body") == (str(A), str(A))


async def test_a_body_that_is_not_a_json_object_naming_a_model_gets_400() -> None:
    async with running_epp(served(A)) as epp:
        _, not_json = await epp.exchange(headers(), body(b"{oops"), answers=2)
        _, no_model = await epp.exchange(headers(), body(b'{"messages": []}'), answers=2)
    assert refusal(not_json)[1]["code"] == "invalid_json"
    assert refusal(no_model)[1]["code"] == "missing_model"


async def test_a_request_without_a_body_is_routed_by_its_model_header() -> None:
    async with running_epp(served(A)) as epp:
        (answer,) = await epp.exchange(headers(end_of_stream=True, extra={"x-ai-eg-model": "m"}), answers=1)
    assert destination(answer, "request_headers") == (str(A), str(A))


async def test_the_attempt_ends_once_when_the_gateway_cancels_the_stream_mid_request() -> None:
    async with running_epp(served(A)) as epp:
        call = epp.stub.Process()
        await call.write(headers())
        await call.write(body(chat()))
        await call.read()
        await call.read()
        assert epp.in_flight.outstanding(A) == 1
        call.cancel()
        await asyncio.wait_for(epp.in_flight.changed.wait(), WAIT)
        assert epp.in_flight.outstanding(A) == 0
    assert epp.in_flight.released == [A]


@dataclass
class RecordingCall:
    """Stands for the transport's `Call`: what the stream's handler sends, and its status."""

    sent: list[ext.ProcessingResponse] = field(default_factory=list)
    status: Status | None = None

    def send(self, message: bytes) -> None:
        self.sent.append(ext.ProcessingResponse.FromString(message))

    def finish(self, status: Status = Status.OK, details: str = "") -> None:
        self.status = status


async def test_a_stream_ended_then_reset_in_one_turn_ends_the_attempt_once() -> None:
    # Envoy ends an ext_proc stream with its last DATA and a reset, which one read delivers together: the reset
    # comes before the end's own handling has begun.
    async with running_epp(served(A)) as epp:
        call = RecordingCall()
        stream = ProcessCall(epp.picker.serving, cast(Call, call))
        stream.on_message(headers().SerializeToString())
        stream.on_message(body(chat()).SerializeToString())
        await eventually(lambda: len(call.sent) == 2, WAIT, "the headers' and the body's answers")
        assert destination(call.sent[1], "request_body") == (str(A), str(A))
        assert epp.in_flight.outstanding(A) == 1
        stream.on_half_close()
        stream.on_cancel()
        assert epp.in_flight.outstanding(A) == 0
    assert epp.in_flight.released == [A]


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([headers()], id="after the headers"),
        pytest.param([headers(mode=Mode.FULL_DUPLEX_STREAMED), body(b'{"model": ', False)], id="mid-body"),
    ],
)
async def test_a_stream_the_gateway_closes_mid_request_gets_400_and_the_epp_keeps_serving(
    messages: list[ext.ProcessingRequest],
) -> None:
    async with running_epp(served(A)) as epp:
        call = epp.stub.Process()
        for message in messages:
            await call.write(message)
        await call.done_writing()  # the gateway's side ends before the request's body does
        answers = [answer async for answer in call]
        _, routed = await epp.exchange(headers(), body(chat()), answers=2)
    status, error = refusal(answers[-1])
    assert (status, error["code"]) == (400, "invalid_processing_request")
    assert "before the end of the request body" in error["message"]
    assert destination(routed, "request_body") == (str(A), str(A))


async def test_the_attempt_ends_once_when_the_stream_closes_after_the_response() -> None:
    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 7, "prompt_tokens_details": {"cached_tokens": 4}}}\n\n'
    async with running_epp(served(A)) as epp:
        response_headers = ext.ProcessingRequest(response_headers=ext.HttpHeaders())
        response_body = ext.ProcessingRequest(
            response_body=ext.HttpBody(body=usage + b"data: [DONE]\n\n", end_of_stream=True)
        )
        answers = await epp.exchange(headers(), body(chat()), response_headers, response_body, answers=4)
        await asyncio.wait_for(epp.in_flight.changed.wait(), WAIT)
    assert [a.WhichOneof("response") for a in answers[2:]] == ["response_headers", "response_body"]
    assert epp.in_flight.released == [A]


async def health(epp: Epp, service: str) -> int:
    stub: Any = health_pb2_grpc.HealthStub(epp.channel)  # the stubs type it for a synchronous channel
    answer = await stub.Check(health_pb2.HealthCheckRequest(service=service))
    return int(answer.status)


async def test_readiness_waits_for_the_catalog_and_liveness_does_not() -> None:
    cluster = Cluster()
    async with running_epp(cluster) as epp:
        assert await health(epp, "liveness") == health_pb2.HealthCheckResponse.SERVING
        assert await health(epp, "readiness") == health_pb2.HealthCheckResponse.NOT_SERVING
        cluster.synced()
        await asyncio.wait_for(epp.picker.wait_ready(), WAIT)
        for service in ("readiness", "envoy.service.ext_proc.v3.ExternalProcessor"):
            assert await health(epp, service) == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("tail", "usage"),
    [
        pytest.param(
            orjson.dumps(
                {
                    "object": "chat.completion",
                    "usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 8}},
                }
            ),
            PromptUsage(9, 8),
            id="a whole JSON answer",
        ),
        pytest.param(
            b'data: {"choices": []}\n\ndata: {"choices": [], "usage": {"prompt_tokens": 7}}\n\ndata: [DONE]\n\n',
            PromptUsage(7, None),
            id="the last SSE event with usage",
        ),
        pytest.param(b'data: {"choices": []}\n\ndata: [DONE]\n\n', None, id="a stream without usage"),
        pytest.param(b'tokens": 7}}\n\n', None, id="the cut end of a long answer"),
    ],
)
def test_the_usage_is_read_from_the_end_of_the_answer(tail: bytes, usage: PromptUsage | None) -> None:
    assert usage_of(tail) == usage


KEY = "sk-epp-secret-key"


def keys_file(tmp_path: Path) -> Authenticator:
    path = tmp_path / "keys"
    path.write_text(f"{KEY} tenant=team-a\n")
    keys = ApiKeys(path)
    keys.load()
    return Authenticator(keys)


@pytest.mark.parametrize(
    ("authorization", "model", "code"),
    [
        pytest.param(None, "m", "missing_api_key", id="no key"),
        pytest.param("Basic abc", "m", "missing_api_key", id="not a bearer key"),
        pytest.param("Bearer sk-wrong", "m", "invalid_api_key", id="a wrong key"),
        pytest.param(None, "nope", "missing_api_key", id="no key for an unknown model: nothing about models"),
    ],
)
async def test_with_api_keys_a_request_without_a_valid_key_gets_the_proxys_401_on_its_headers(
    tmp_path: Path, authorization: str | None, model: str, code: str
) -> None:
    extra = {"authorization": authorization} if authorization else {}
    async with running_epp(served(A), api_keys=keys_file(tmp_path)) as epp:
        (answer,) = await epp.exchange(headers(extra=extra), answers=1)
        _, routed = await epp.exchange(headers(extra={"authorization": f"Bearer {KEY}"}), body(chat()), answers=2)
    status, error = refusal(answer)
    assert (status, error["code"], error["type"]) == (401, code, "invalid_request_error")
    assert ("www-authenticate", "Bearer") in response_headers(answer)
    assert destination(routed, "request_body") == (str(A), str(A))  # the EPP keeps serving


async def test_with_api_keys_a_valid_key_is_routed_and_taken_off_the_request_the_engine_gets(tmp_path: Path) -> None:
    async with running_epp(served(A), api_keys=keys_file(tmp_path)) as epp:
        authorization = {"authorization": f"Bearer {KEY}"}
        _, buffered = await epp.exchange(headers(extra=authorization), body(chat()), answers=2)
        (bodiless,) = await epp.exchange(
            headers(end_of_stream=True, extra={**authorization, "x-ai-eg-model": "m"}), answers=1
        )
    assert destination(buffered, "request_body") == (str(A), str(A))
    assert list(buffered.request_body.response.header_mutation.remove_headers) == ["authorization"]
    assert list(bodiless.request_headers.response.header_mutation.remove_headers) == ["authorization"]


async def test_without_api_keys_the_authorization_header_is_left_to_the_engine() -> None:
    async with running_epp(served(A)) as epp:
        _, answer = await epp.exchange(headers(extra={"authorization": "Bearer engine-key"}), body(chat()), answers=2)
    assert list(answer.request_body.response.header_mutation.remove_headers) == []


async def test_a_key_that_may_not_wake_gets_503_for_a_sleeping_model_and_nothing_is_scaled() -> None:
    secrets = FakeInformer()
    secrets.add(secret("viewer", key="sk-viewer", tenant="viewers", may_wake="false"))
    secrets.add(secret("owner", key="sk-owner", tenant="owners"))
    secrets.mark_synced()
    cluster = Cluster().synced()
    cluster.open_models.add(open_model("m"))
    cluster.playgrounds.add(asleep("p", "m"))
    scaling, api, _, catalog = scaling_setup(cluster)
    api.on_scaled.append(engine_starts(cluster, A))
    auth = Authenticator(None, SecretKeys(secrets))
    async with running_epp(cluster, catalog=catalog, waker=scaling.waker, api_keys=auth) as epp:
        _, refused = await epp.exchange(headers(extra={"authorization": "Bearer sk-viewer"}), body(chat()), answers=2)
        assert api.scaled == []
        _, routed = await epp.exchange(headers(extra={"authorization": "Bearer sk-owner"}), body(chat()), answers=2)
    status, error = refusal(refused)
    assert (status, error["code"]) == (503, "model_sleeping")
    assert destination(routed, "request_body") == (str(A), str(A))
    assert api.scaled == [("p", 1)]


class FailingWaker(Waker):
    async def wake(self, model: str, *, may_wake: bool = True) -> Coming:
        raise RuntimeError("the waker failed")


async def test_the_authorization_header_is_never_logged(tmp_path: Path) -> None:
    cluster = served()
    with capture_logs() as logs:
        async with running_epp(
            cluster, api_keys=keys_file(tmp_path), waker=FailingWaker(cluster.catalog(), None)
        ) as epp:
            authorization = {"authorization": f"Bearer {KEY}"}
            (wrong,) = await epp.exchange(headers(extra={"authorization": f"Bearer {KEY}x"}), answers=1)
            _, failed = await epp.exchange(headers(extra=authorization), body(chat()), answers=2)
    assert refusal(wrong)[0] == 401
    assert refusal(failed)[0] == 500
    assert any(line["event"] == "processing failed" for line in logs)  # the failure was logged, without the key
    assert KEY not in repr(logs)


async def test_the_picker_exports_each_routed_requests_decision_time_in_its_histogram() -> None:
    metrics = GatewayMetrics(process_collectors=False)
    async with running_epp(served(A), metrics=metrics) as epp:
        for _ in range(3):
            await epp.exchange(headers(), body(chat()), answers=2)
        await epp.exchange(headers(), body(chat("unknown")), answers=2)
    count = metrics.registry.get_sample_value("llmaz_gateway_epp_decision_seconds_count")
    total = metrics.registry.get_sample_value("llmaz_gateway_epp_decision_seconds_sum")
    assert count == 3
    assert total is not None
    assert 0 < total < 3 * WAIT
