"""Token usage from relayed JSON and SSE answers, read as the bytes pass in arbitrary chunks."""

from __future__ import annotations

import orjson
import pytest

from llmaz.gateway.proxy.usage import MAX_JSON_BYTES, MAX_SSE_LINE_BYTES, JsonUsage, NoUsage, SseUsage, Usage, meter_for

from .support import FIRST_EVENT, LAST_EVENTS, chat_completion


def fed(meter: JsonUsage | SseUsage, data: bytes, size: int) -> Usage | None:
    for i in range(0, len(data), size):
        meter.feed(data[i : i + size])
    return meter.result()


@pytest.mark.parametrize("size", [1, 3, 7, 64, 10_000])
def test_json_usage_is_read_whatever_the_chunking(size: int) -> None:
    assert fed(JsonUsage(), orjson.dumps(chat_completion(prompt_tokens=4, completion_tokens=9)), size) == Usage(4, 9)


@pytest.mark.parametrize("size", [1, 2, 5, 17, 10_000])
def test_the_last_usage_of_a_stream_is_read_whatever_the_chunking(size: int) -> None:
    stream = FIRST_EVENT + b'data: {"usage": null}\r\n\r\n' + LAST_EVENTS
    assert fed(SseUsage(), stream, size) == Usage(7, 11)


@pytest.mark.parametrize(
    "document",
    [
        {"usage": {"prompt_tokens": -1, "completion_tokens": 1}},
        {"usage": {"prompt_tokens": "3", "completion_tokens": 1}},
        {"usage": {"prompt_tokens": True, "completion_tokens": 1}},
        {"usage": {"completion_tokens": 1}},
        {"usage": []},
        {"no": "usage"},
        ["usage"],
    ],
)
def test_malformed_usage_counts_nothing(document: object) -> None:
    assert fed(JsonUsage(), orjson.dumps(document), 5) is None
    assert fed(SseUsage(), b"data: " + orjson.dumps(document) + b"\n\n", 5) is None


def test_embeddings_usage_has_no_completion_tokens() -> None:
    assert fed(JsonUsage(), b'{"data": [], "usage": {"prompt_tokens": 8, "total_tokens": 8}}', 4) == Usage(8, 0)


@pytest.mark.parametrize(
    ("details", "cached"),
    [
        ({"cached_tokens": 96}, 96),
        ({"cached_tokens": 0}, 0),
        ({"cached_tokens": -1}, None),
        ({"cached_tokens": "96"}, None),
        ({"cached_tokens": True}, None),
        ({}, None),
        (None, None),
        ([96], None),
    ],
)
def test_the_prompts_cached_tokens_are_read_when_the_engine_reports_them(details: object, cached: int | None) -> None:
    usage = {"prompt_tokens": 128, "completion_tokens": 3, "prompt_tokens_details": details}
    assert fed(JsonUsage(), orjson.dumps({"usage": usage}), 7) == Usage(128, 3, cached)
    assert fed(SseUsage(), b"data: " + orjson.dumps({"usage": usage}) + b"\n\n", 7) == Usage(128, 3, cached)


def test_bodies_too_big_to_be_worth_parsing_count_nothing_and_keep_nothing() -> None:
    meter = JsonUsage()
    assert (
        fed(
            meter,
            b'{"usage": {"prompt_tokens": 1, "completion_tokens": 1}, "pad": "' + b"x" * MAX_JSON_BYTES + b'"}',
            4096,
        )
        is None
    )
    sse = SseUsage()
    long_line = b'data: {"usage": {"prompt_tokens": 1, "completion_tokens": 1}, "x": "' + b"y" * MAX_SSE_LINE_BYTES * 2
    assert fed(sse, long_line + b'"}\n\n', 1000) is None
    assert fed(sse, b'data: {"usage": {"prompt_tokens": 2, "completion_tokens": 3}}\n\n', 7) == Usage(2, 3)


def test_the_meter_follows_the_content_type_and_skips_compressed_bodies() -> None:
    assert isinstance(meter_for("text/event-stream; charset=utf-8", ""), SseUsage)
    assert isinstance(meter_for("application/json", "identity"), JsonUsage)
    assert isinstance(meter_for("application/json", "gzip"), NoUsage)
    assert isinstance(meter_for("text/plain", ""), NoUsage)


def test_a_responses_api_answer_counts_its_input_and_output_tokens() -> None:
    answer = {"object": "response", "usage": {"input_tokens": 5, "output_tokens": 8, "total_tokens": 13}}
    assert fed(JsonUsage(), orjson.dumps(answer), 4) == Usage(5, 8)


@pytest.mark.parametrize("size", [1, 9, 10_000])
def test_a_streamed_responses_api_answer_counts_the_usage_of_its_completed_event(size: int) -> None:
    stream = (
        b'event: response.created\ndata: {"type": "response.created", "response": {"usage": null}}\n\n'
        b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": "a"}\n\n'
        b'event: response.completed\ndata: {"type": "response.completed",'
        b' "response": {"usage": {"input_tokens": 3, "output_tokens": 2}}}\n\n'
    )
    assert fed(SseUsage(), stream, size) == Usage(3, 2)
