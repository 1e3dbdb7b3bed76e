"""One ext_proc stream's conversation, driven directly (no gRPC): the protocol's state machine as a table, and a
request held while its model has no ready endpoint, routed when the routing caches see one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from test.unit.gateway.support import WAIT, Cluster
from test.unit.gateway.test_epp import A, B, body, chat, headers, ready_slice, served

from llmaz.gateway.epp.processor import Conversation, Serving
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.picker import Pickers
from llmaz_dev.testing.waiting import eventually

Mode = processing_mode_pb2.ProcessingMode
RESPONSE_HEADERS = ext.ProcessingRequest(response_headers=ext.HttpHeaders())
RESPONSE_BODY = ext.ProcessingRequest(response_body=ext.HttpBody(body=b"{}", end_of_stream=True))
RESPONSE_TRAILERS = ext.ProcessingRequest(response_trailers=ext.HttpTrailers())
REQUEST_TRAILERS = ext.ProcessingRequest(request_trailers=ext.HttpTrailers())


def serving(cluster: Cluster, **options: Any) -> Serving:
    in_flight = InFlight()
    return Serving(cluster.catalog(), Pickers(in_flight), in_flight, **options)


@dataclass(frozen=True)
class Step:
    """What one message is answered with: the kinds of the answers, and, for a refusal, its status and code."""

    kinds: tuple[str, ...]
    refused: tuple[int, str] | None = None


async def converse(conversation: Conversation, messages: list[ext.ProcessingRequest]) -> list[Step]:
    """Each message's answers, until one ends the stream (as the server stops reading there)."""
    steps = []
    for message in messages:
        answers, over = await conversation.handle(message)
        kinds = tuple(str(a.WhichOneof("response")) for a in answers)
        refused = None
        if over:
            (answer,) = answers
            refused = (
                answer.immediate_response.status.code,
                orjson.loads(answer.immediate_response.body)["error"]["code"],
            )
        steps.append(Step(kinds, refused))
        if over:
            break
    return steps


def refused(status: int, code: str) -> Step:
    return Step(("immediate_response",), (status, code))


ROUTED_BUFFERED = [Step(("request_headers",)), Step(("request_body",))]
TOO_LONG = "m" * 254
BOUND = 100

# (messages, the steps they get); every one over the model "m" served at A, with a body bound of BOUND bytes.
TABLE: list[Any] = [
    pytest.param([headers(), body(chat())], ROUTED_BUFFERED, id="buffered: the body's answer routes"),
    pytest.param(
        [headers(mode=Mode.FULL_DUPLEX_STREAMED), body(chat()[:5], False), body(chat()[5:], True)],
        [Step(()), Step(()), Step(("request_headers", "request_body", "request_body"))],
        id="full duplex: the last chunk's answer routes, then echoes each chunk",
    ),
    pytest.param(
        [headers(end_of_stream=True, extra={"x-ai-eg-model": "m"})],
        [Step(("request_headers",))],
        id="no body: routed by the model header",
    ),
    pytest.param(
        [headers(), body(chat(), False), REQUEST_TRAILERS],
        [*ROUTED_BUFFERED, Step(("request_trailers",))],
        id="buffered with trailers: the body routes, the trailers pass",
    ),
    pytest.param(
        [headers(mode=Mode.BUFFERED_PARTIAL), body(chat(), False)],
        [Step(("request_headers",)), refused(413, "request_too_large")],
        id="buffered partial: a body cut by the gateway's buffer is over its bound",
    ),
    pytest.param(
        [headers(mode=Mode.FULL_DUPLEX_STREAMED), body(chat(), False), REQUEST_TRAILERS],
        [Step(()), Step(()), Step(("request_headers", "request_body", "request_trailers"))],
        id="full duplex: trailers end the body and route",
    ),
    pytest.param(
        [headers(), body(chat()), RESPONSE_HEADERS, RESPONSE_BODY, RESPONSE_TRAILERS],
        [*ROUTED_BUFFERED, Step(("response_headers",)), Step(("response_body",)), Step(("response_trailers",))],
        id="the response passes through",
    ),
    pytest.param([body(chat())], [refused(400, "invalid_processing_request")], id="a body before the headers"),
    pytest.param([ext.ProcessingRequest()], [refused(400, "invalid_processing_request")], id="an empty message"),
    pytest.param(
        [REQUEST_TRAILERS], [refused(400, "invalid_processing_request")], id="request trailers before the headers"
    ),
    pytest.param(
        [headers(), headers()],
        [Step(("request_headers",)), refused(400, "invalid_processing_request")],
        id="headers twice",
    ),
    pytest.param(
        [headers(), RESPONSE_HEADERS],
        [Step(("request_headers",)), refused(400, "invalid_processing_request")],
        id="response headers before the route",
    ),
    pytest.param(
        [headers(), RESPONSE_BODY],
        [Step(("request_headers",)), refused(400, "invalid_processing_request")],
        id="a response body before the route",
    ),
    pytest.param(
        [headers(subset=[1, 2])], [refused(400, "invalid_processing_request")], id="a subset hint not of strings"
    ),
    pytest.param(
        [headers(subset={"a": 1})],
        [refused(400, "invalid_processing_request")],
        id="a subset hint neither list nor string",
    ),
    pytest.param(
        [headers(mode=Mode.STREAMED)], [refused(500, "unsupported_processing_mode")], id="a STREAMED request body"
    ),
    pytest.param(
        [headers(), body(b"x" * (BOUND + 1))],
        [Step(("request_headers",)), refused(413, "request_too_large")],
        id="a body over the bound",
    ),
    pytest.param(
        [headers(), body(b"{oops")], [Step(("request_headers",)), refused(400, "invalid_json")], id="not JSON"
    ),
    pytest.param(
        [headers(), body(b"[]")], [Step(("request_headers",)), refused(400, "invalid_json")], id="not a JSON object"
    ),
    pytest.param(
        [headers(), body(b'{"messages": []}')],
        [Step(("request_headers",)), refused(400, "missing_model")],
        id="no model",
    ),
    pytest.param(
        [headers(end_of_stream=True, extra={"x-ai-eg-model": TOO_LONG})],
        [refused(400, "invalid_model")],
        id="a model name too long",
    ),
    pytest.param(
        [headers(), body(chat("nope"))],
        [Step(("request_headers",)), refused(404, "model_not_found")],
        id="an unknown model",
    ),
    pytest.param(
        [headers(subset=[str(B)]), body(chat())],
        [Step(("request_headers",)), refused(503, "no_eligible_endpoint")],
        id="a subset hint naming no endpoint of the model",
    ),
]


@pytest.mark.parametrize(("messages", "steps"), TABLE)
async def test_the_conversation_answers_each_message_as_the_protocol_says(
    messages: list[ext.ProcessingRequest], steps: list[Step]
) -> None:
    conversation = Conversation(serving(served(A), max_body_bytes=BOUND))
    assert await converse(conversation, messages) == steps


async def test_before_the_caches_sync_a_request_gets_503_not_ready() -> None:
    conversation = Conversation(serving(Cluster()))
    assert await converse(conversation, [headers(), body(chat())]) == [
        Step(("request_headers",)),
        refused(503, "not_ready"),
    ]


async def test_a_held_request_is_routed_once_its_model_has_a_ready_endpoint_and_counts_until_the_stream_ends() -> None:
    cluster = served()  # a Playground whose replica is not ready yet
    shared = serving(cluster, hold_timeout=WAIT)
    conversation = Conversation(shared)
    await conversation.handle(headers())
    routing = asyncio.create_task(conversation.handle(body(chat())))
    await eventually(lambda: shared.in_flight.of_model("m") == 1, WAIT, "the request held")
    assert not routing.done()
    cluster.slices.add(ready_slice(A))  # the readiness change the routing caches see
    answers, over = await asyncio.wait_for(routing, WAIT)
    assert ([a.WhichOneof("response") for a in answers], over) == (["request_body"], False)
    assert conversation.destination == str(A)
    assert shared.in_flight.outstanding(A) == 1
    conversation.finish()
    conversation.finish()  # once, however often the stream's end is seen
    assert (shared.in_flight.of_model("m"), shared.in_flight.outstanding(A)) == (0, 0)


async def test_a_conversation_ended_while_held_stops_counting_and_routes_nothing() -> None:
    cluster = served()
    shared = serving(cluster, hold_timeout=WAIT)
    conversation = Conversation(shared)
    await conversation.handle(headers())
    routing = asyncio.create_task(conversation.handle(body(chat())))
    await eventually(lambda: shared.in_flight.of_model("m") == 1, WAIT, "the request held")
    routing.cancel()  # the gateway closed the stream: the server's task is cancelled, then it finishes
    with pytest.raises(asyncio.CancelledError):
        await routing
    conversation.finish()
    cluster.slices.add(ready_slice(A))
    assert (shared.in_flight.of_model("m"), shared.in_flight.busy(), conversation.attempt) == (0, {}, None)
