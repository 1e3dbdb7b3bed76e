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
from test.unit.gateway.support import WAIT, Cluster, secret
from test.unit.gateway.test_epp import A, B, body, chat, headers, ready_slice, served

from llmaz.apis.routing import PREFIX_AWARE
from llmaz.gateway.epp.processor import Conversation, Serving
from llmaz.gateway.proxy.auth import Authenticator
from llmaz.gateway.proxy.keys import SecretKeys
from llmaz.gateway.proxy.limits import Limits
from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.picker import Pickers, RoutingOptions
from llmaz_dev.testing.informer import FakeInformer
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
    await eventually(lambda: shared.requests.of_model("m") == 1, WAIT, "the request held")
    assert not routing.done()
    cluster.slices.add(ready_slice(A))  # the readiness change the routing caches see
    answers, over = await asyncio.wait_for(routing, WAIT)
    assert ([a.WhichOneof("response") for a in answers], over) == (["request_body"], False)
    assert conversation.destination == str(A)
    assert shared.requests.outstanding(A) == 1
    conversation.finish()
    conversation.finish()  # once, however often the stream's end is seen
    assert (shared.requests.of_model("m"), shared.requests.outstanding(A)) == (0, 0)


async def test_a_conversation_ended_while_held_stops_counting_and_routes_nothing() -> None:
    cluster = served()
    shared = serving(cluster, hold_timeout=WAIT)
    conversation = Conversation(shared)
    await conversation.handle(headers())
    routing = asyncio.create_task(conversation.handle(body(chat())))
    await eventually(lambda: shared.requests.of_model("m") == 1, WAIT, "the request held")
    routing.cancel()  # the gateway closed the stream: the server's task is cancelled, then it finishes
    with pytest.raises(asyncio.CancelledError):
        await routing
    conversation.finish()
    cluster.slices.add(ready_slice(A))
    assert (shared.requests.of_model("m"), shared.requests.busy(), conversation.attempt) == (0, {}, None)


# --- the decision time ---------------------------------------------------------------------------------------------


class Ticks:
    """A clock that reads the given times in turn."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def decisions(metrics: GatewayMetrics) -> tuple[float | None, float | None]:
    """The decision-time histogram's count and sum."""
    sample = metrics.registry.get_sample_value
    return sample("llmaz_gateway_epp_decision_seconds_count"), sample("llmaz_gateway_epp_decision_seconds_sum")


@pytest.mark.parametrize("mode", [Mode.BUFFERED, Mode.FULL_DUPLEX_STREAMED])
async def test_the_decision_time_runs_from_the_request_headers_to_the_destination_once(mode: int) -> None:
    metrics = GatewayMetrics(process_collectors=False)
    conversation = Conversation(serving(served(A), metrics=metrics), clock=Ticks(10.0, 10.0015))
    await conversation.handle(headers(mode=mode))
    assert decisions(metrics) == (0, 0)  # the body has not come yet
    if mode == Mode.FULL_DUPLEX_STREAMED:
        await conversation.handle(body(chat()[:5], end_of_stream=False))
        await conversation.handle(body(chat()[5:]))
    else:
        await conversation.handle(body(chat()))
    conversation.finish()
    count, total = decisions(metrics)
    assert count == 1
    assert total == pytest.approx(0.0015)


async def test_a_refused_request_has_no_decision_time() -> None:
    metrics = GatewayMetrics(process_collectors=False)
    conversation = Conversation(serving(served(A), metrics=metrics))
    await conversation.handle(headers())
    assert await converse(conversation, [body(chat("unknown"))]) == [refused(404, "model_not_found")]
    assert decisions(metrics) == (0, 0)


# --- a key's limits, as the proxy keeps them ---------------------------------------------------------------------

KEY = "sk-limited"


def keyed(cluster: Cluster, hold_timeout: float = WAIT, **limits: str) -> Serving:
    """Serving with one Secret's key, `KEY`, with `limits`, on a clock that never moves (no bucket refills), and a
    cap of 500 tokens a request may ask for."""
    secrets = FakeInformer()
    secrets.add(secret("limited", key=KEY, tenant="team-a", **limits))
    secrets.mark_synced()
    auth = Authenticator(None, SecretKeys(secrets))
    return serving(cluster, api_keys=auth, limits=Limits(lambda: 1000.0), max_tokens_cap=500, hold_timeout=hold_timeout)


def asking(max_tokens: int = 10, stream: bool = False) -> list[ext.ProcessingRequest]:
    document = {"model": "m", "messages": [], "max_tokens": max_tokens, "stream": stream}
    return [headers(extra={"authorization": f"Bearer {KEY}"}), body(orjson.dumps(document))]


async def routed_or_refused(shared: Serving, messages: list[ext.ProcessingRequest]) -> tuple[Conversation, Step]:
    conversation = Conversation(shared)
    steps = await converse(conversation, messages)
    return conversation, steps[-1]


async def test_a_keys_requests_per_minute_are_spent_through_the_epp_then_429_with_the_proxys_answer() -> None:
    shared = keyed(served(A), requests_per_minute="1")
    first, routed = await routed_or_refused(shared, asking())
    first.finish()
    conversation = Conversation(shared)
    answers = [answer for message in asking() for answer in (await conversation.handle(message))[0]]
    assert routed == Step(("request_body",))
    refusal = answers[-1].immediate_response
    error = orjson.loads(refusal.body)["error"]
    assert (refusal.status.code, error["code"], error["type"]) == (429, "rate_limit_exceeded", "requests")
    assert ("retry-after", "60") in {(o.header.key, o.header.raw_value.decode()) for o in refusal.headers.set_headers}


async def test_a_keys_streams_are_held_until_each_stream_ends() -> None:
    shared = keyed(served(A), max_streams="1")
    first, routed = await routed_or_refused(shared, asking(stream=True))
    _, refused_while_streaming = await routed_or_refused(shared, asking(stream=True))
    _, not_a_stream = await routed_or_refused(shared, asking(stream=False))
    first.finish()
    _, after = await routed_or_refused(shared, asking(stream=True))
    assert (routed, refused_while_streaming) == (Step(("request_body",)), refused(429, "rate_limit_exceeded"))
    assert (not_a_stream, after) == (Step(("request_body",)), Step(("request_body",)))


async def test_a_keys_tokens_are_settled_by_the_usage_the_answer_reports_and_returned_when_nothing_was_routed() -> None:
    # Each request reserves 60 + its body's quarter (about 20) of a budget of 100: one at a time, unless settled.
    usage = orjson.dumps({"usage": {"prompt_tokens": 5, "completion_tokens": 5}})
    answer = [RESPONSE_HEADERS, ext.ProcessingRequest(response_body=ext.HttpBody(body=usage, end_of_stream=True))]

    reported = keyed(served(A), tokens_per_minute="100")
    first, _ = await routed_or_refused(reported, asking(60) + answer)
    first.finish()  # 10 used: the rest of the reservation is given back
    assert (await routed_or_refused(reported, asking(60)))[1] == Step(("request_body",))

    unreported = keyed(served(A), tokens_per_minute="100")
    first, _ = await routed_or_refused(unreported, asking(60))
    first.finish()  # the answer's usage is not known (response processing off): the reservation stays spent
    assert (await routed_or_refused(unreported, asking(60)))[1] == refused(429, "rate_limit_exceeded")

    cluster = served()  # no endpoint: the request is held, then refused
    unrouted = keyed(cluster, hold_timeout=0.01, tokens_per_minute="100")
    first, step = await routed_or_refused(unrouted, asking(60))
    first.finish()  # no engine answered: the whole reservation is given back
    assert step == refused(503, "model_not_ready")
    cluster.slices.add(ready_slice(A))
    assert (await routed_or_refused(unrouted, asking(60)))[1] == Step(("request_body",))


async def test_a_request_asking_more_tokens_than_the_cap_gets_400_naming_the_field() -> None:
    shared = keyed(served(A))
    conversation = Conversation(shared)
    document = {"model": "m", "messages": [], "max_completion_tokens": 501}
    steps = await converse(
        conversation, [headers(extra={"authorization": f"Bearer {KEY}"}), body(orjson.dumps(document))]
    )
    assert steps[-1] == refused(400, "max_tokens_too_large")
    assert shared.requests.of_model("m") == 0


# --- an engine that reuses a cached prompt serially ------------------------------------------------------------


@pytest.mark.parametrize(("backend", "waits"), [("llamacpp", True), ("vllm", False)], ids=["serial", "shared"])
async def test_a_request_waits_behind_another_of_its_prefix_on_an_engine_that_reuses_prompts_serially(
    backend: str, waits: bool
) -> None:
    cluster = Cluster().synced()
    cluster.serve("m", A, B, backend=backend)
    in_flight = InFlight()
    pickers = Pickers(in_flight, options=RoutingOptions(strategy=PREFIX_AWARE))
    shared = Serving(cluster.catalog(), pickers, in_flight)
    document = orjson.dumps({"model": "m", "messages": [{"role": "system", "content": "Answer in French. " * 40}]})
    first = Conversation(shared)
    await converse(first, [headers(), body(document)])
    second = Conversation(shared)
    await second.handle(headers())
    routing = asyncio.create_task(second.handle(body(document)))
    holds = pickers.prefix_aware.prefix_holds
    if waits:
        await eventually(lambda: holds.waiting() == 1, WAIT, "the second request waiting behind the first")
        assert not routing.done()
        first.finish()  # the first request's stream ends: its engine has the prompt and a free slot
    await asyncio.wait_for(routing, WAIT)
    assert second.destination == first.destination  # the prefix's home, either way
    assert holds.waiting() == 0
