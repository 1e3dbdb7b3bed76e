"""Pure parts of the client: URL building, watch-line decoding, QPS bucket, retry policy, conflict retry."""

from __future__ import annotations

import orjson
import pytest

from llmaz.runtime.client import (
    Backoff,
    Conflict,
    Expired,
    NotFound,
    RestConfig,
    ServerError,
    TokenBucket,
    TooManyRequests,
    retry_on_conflict,
)
from llmaz.runtime.client._transport import Transport
from llmaz.runtime.client.client import _path
from llmaz.runtime.client.errors import ApiConnectionError
from llmaz.runtime.client.watch import parse_event
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.clock import FakeClock

PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
LWS = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", namespaced=True)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


@pytest.mark.parametrize(
    ("resource", "namespace", "name", "sub", "path"),
    [
        (PODS, "ns", None, None, "/api/v1/namespaces/ns/pods"),
        (PODS, None, None, None, "/api/v1/pods"),
        (PODS, "ns", "p", "status", "/api/v1/namespaces/ns/pods/p/status"),
        (LWS, "ns", "l", "scale", "/apis/leaderworkerset.x-k8s.io/v1/namespaces/ns/leaderworkersets/l/scale"),
        (NODES, "ignored", "n1", None, "/api/v1/nodes/n1"),
    ],
)
def test_paths_follow_the_api_layout(
    resource: Resource, namespace: str | None, name: str | None, sub: str | None, path: str
) -> None:
    assert _path(resource, namespace, name, sub) == path


def test_a_watch_line_decodes_to_type_and_object() -> None:
    line = orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "7"}}})
    event = parse_event(line)
    assert event.type == "ADDED"
    assert event.object["metadata"]["resourceVersion"] == "7"


def test_an_error_event_raises_the_typed_error_of_its_status() -> None:
    line = orjson.dumps(
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "code": 410,
                "reason": "Expired",
                "message": "too old resource version: 1 (5)",
            },
        }
    )
    with pytest.raises(Expired):
        parse_event(line)


def test_a_malformed_watch_line_is_a_connection_error() -> None:
    with pytest.raises(ApiConnectionError):
        parse_event(b'{"type": "ADDED"')


def test_token_bucket_grants_the_burst_then_spaces_requests_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.step(1.0)
    # 1 s refills 10 tokens, but two were borrowed and the bucket holds at most 3.
    assert bucket.try_take()
    assert bucket.try_take()
    assert bucket.try_take()
    assert not bucket.try_take()


def test_a_non_positive_qps_disables_limiting() -> None:
    bucket = TokenBucket(qps=0, burst=0, clock=FakeClock())
    assert all(bucket.reserve() == 0.0 for _ in range(1000))


def retry_delay(err: Exception, attempt: int = 0, method: str = "GET") -> float | None:
    transport = Transport(RestConfig(host="http://127.0.0.1:1", max_retries=3, max_retry_after=10.0))
    return transport._retry_delay(err, attempt, method)  # type: ignore[arg-type]


def test_throttled_requests_retry_after_the_servers_hint_capped_and_bounded() -> None:
    assert retry_delay(TooManyRequests(429, "TooManyRequests", "", retry_after=2.0)) == 2.0
    assert retry_delay(TooManyRequests(429, "TooManyRequests", "", retry_after=99.0)) == 10.0
    assert retry_delay(TooManyRequests(429, "TooManyRequests", "")) == 1.0
    assert retry_delay(TooManyRequests(429, "TooManyRequests", "", retry_after=2.0), attempt=3) is None


def test_server_errors_retry_only_when_the_server_names_a_delay() -> None:
    assert retry_delay(ServerError(503, "ServiceUnavailable", "", retry_after=1.0)) == 1.0
    assert retry_delay(ServerError(500, "InternalError", "")) is None
    assert retry_delay(NotFound(404, "NotFound", "")) is None


def test_a_broken_connection_is_retried_once_and_only_for_reads() -> None:
    assert retry_delay(ApiConnectionError("reset")) == 0.0
    assert retry_delay(ApiConnectionError("reset"), attempt=1) is None
    assert retry_delay(ApiConnectionError("reset"), method="POST") is None


def test_backoff_delays_grow_by_factor_and_respect_the_cap() -> None:
    assert list(Backoff(steps=5, duration=1.0, factor=2.0, cap=5.0).delays()) == [1.0, 2.0, 4.0, 5.0]


async def test_retry_on_conflict_reruns_until_the_write_succeeds() -> None:
    attempts = []

    async def write() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise Conflict(409, "Conflict", "stale")
        return "written"

    clock = FakeClock()
    assert await retry_on_conflict(write, Backoff(steps=5, duration=0.0), clock) == "written"
    assert len(attempts) == 3


async def test_retry_on_conflict_gives_up_after_its_steps_and_passes_other_errors_through() -> None:
    calls = []

    async def always_conflicts() -> None:
        calls.append(1)
        raise Conflict(409, "Conflict", "stale")

    with pytest.raises(Conflict):
        await retry_on_conflict(always_conflicts, Backoff(steps=4, duration=0.0), FakeClock())
    assert len(calls) == 4

    async def not_found() -> None:
        calls.append(1)
        raise NotFound(404, "NotFound", "gone")

    calls.clear()
    with pytest.raises(NotFound):
        await retry_on_conflict(not_found, Backoff(steps=4, duration=0.0), FakeClock())
    assert len(calls) == 1
