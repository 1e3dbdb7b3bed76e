"""The Endpoint Picker's ext_proc conversation, driven over a real gRPC channel on loopback, as Envoy drives it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import orjson
import pytest
from envoy.config.core.v3 import base_pb2 as core
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test.unit.gateway.support import WAIT, Cluster

from llmaz.gateway.epp.processor import DESTINATION_HEADER, LB_NAMESPACE, SUBSET_KEY, SUBSET_NAMESPACE, usage_of
from llmaz.gateway.epp.server import EndpointPicker, EppOptions
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.picker import Pickers
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import PromptUsage

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
async def running_epp(cluster: Cluster, max_body_bytes: int = 1 << 20, fallbacks: int = 0) -> AsyncIterator[Epp]:
    in_flight = CountingInFlight()
    picker = EndpointPicker(
        cluster.catalog(),
        Pickers(in_flight),
        EppOptions(host="127.0.0.1", port=0, max_body_bytes=max_body_bytes, drain_timeout=1.0, fallbacks=fallbacks),
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


async def test_a_model_without_a_ready_endpoint_gets_503() -> None:
    async with running_epp(served()) as epp:
        _, answer = await epp.exchange(headers(), body(chat()), answers=2)
    status, error = refusal(answer)
    assert (status, error["code"], error["type"]) == (503, "model_not_ready", "server_error")


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
