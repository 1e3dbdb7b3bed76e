"""The rules of scale to zero: opting in, durations, idleness shared through the annotation, and the patches."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import constants as c
from llmaz.gateway.scaling import scaletozero as z

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
CREATED = "2027-01-15T07:00:00Z"  # an hour before NOW
AUTOSCALED = {"maxReplicas": 3, "scaleTrigger": {"requests": {"targetPerReplica": 4}}}


def pg(replicas: int = 1, after: str | None = "5m", last: str | None = None, **spec: Any) -> dict[str, Any]:
    annotations = {}
    if after is not None:
        annotations[c.SCALE_TO_ZERO_AFTER_ANNOTATION] = after
    if last is not None:
        annotations[c.LAST_REQUEST_TIME_ANNOTATION] = last
    return {
        "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": CREATED, "annotations": annotations},
        "spec": {"replicas": replicas, "modelClaim": {"modelName": "m"}, **spec},
    }


@pytest.mark.parametrize(
    ("playground", "in_flight", "sleeps"),
    [
        (pg(last="2027-01-15T07:54:00Z"), 0, True),  # 6 min since the last request
        (pg(last="2027-01-15T07:56:00Z"), 0, False),  # 4 min
        (pg(last="2027-01-15T07:55:00Z"), 0, True),  # exactly 5 min
        (pg(last=None), 0, True),  # no request since creation, an hour ago
        (pg(last="2027-01-15T07:54:00Z"), 1, False),  # a request in flight here
        (pg(replicas=0, last="2027-01-15T07:00:00Z"), 0, False),  # asleep already
        (pg(last="2027-01-15T07:00:00Z", elasticConfig={"maxReplicas": 3}), 0, False),  # an HPA scales it
        (pg(last="2027-01-15T07:00:00Z", elasticConfig=AUTOSCALED), 0, True),  # the gateway's autoscaler lets it
        (pg(last="not a time"), 0, True),  # an unreadable time counts as none: the creation time
    ],
)
def test_a_playground_sleeps_when_idle_everywhere_for_its_time(
    playground: dict[str, Any], in_flight: int, sleeps: bool
) -> None:
    assert z.should_sleep(playground, NOW, 300.0, in_flight) is sleeps


def test_a_freshly_created_playground_is_not_idle_yet() -> None:
    fresh = pg()
    fresh["metadata"]["creationTimestamp"] = "2027-01-15T07:58:00Z"
    assert not z.should_sleep(fresh, NOW, 300.0, 0)


def test_the_shared_time_is_refreshed_a_quarter_of_the_idle_time_at_most() -> None:
    assert z.touch_interval(300.0) == 75.0
    assert z.touch_interval(4.0) == 2.0
    assert not z.needs_touch(pg(last="2027-01-15T07:59:00Z"), NOW, 300.0)  # 60 s old
    assert z.needs_touch(pg(last="2027-01-15T07:58:45Z"), NOW, 300.0)  # 75 s old
    assert z.needs_touch(pg(last=None), NOW, 300.0)


def test_the_touch_writes_utc_seconds_that_read_back_as_the_same_time() -> None:
    patch = z.touch_patch(NOW)
    assert patch == {"metadata": {"annotations": {c.LAST_REQUEST_TIME_ANNOTATION: "2027-01-15T08:00:00Z"}}}
    assert z.last_request(pg(last=patch["metadata"]["annotations"][c.LAST_REQUEST_TIME_ANNOTATION])) == NOW


def test_the_scale_patch_names_the_version_read_and_a_missing_count_is_zero() -> None:
    read = {"metadata": {"resourceVersion": "42"}, "spec": {}}
    assert z.scale_replicas(read) == 0
    assert z.scale_replicas({"spec": {"replicas": 3}}) == 3
    assert z.scale_patch(read, 1) == {"metadata": {"resourceVersion": "42"}, "spec": {"replicas": 1}}


def test_a_request_this_replica_saw_counts_like_the_shared_time() -> None:
    six_minutes_ago = pg(last="2027-01-15T07:54:00Z")
    assert z.should_sleep(six_minutes_ago, NOW, 300.0, 0, seen=None)
    assert not z.should_sleep(six_minutes_ago, NOW, 300.0, 0, seen=NOW - 60)  # a request ended a minute ago
    assert z.should_sleep(six_minutes_ago, NOW, 300.0, 0, seen=NOW - 400)  # older than the shared time
    assert z.needs_touch(six_minutes_ago, NOW - 60, 300.0)  # seen 5 min after the shared time: moved
    assert not z.needs_touch(pg(last="2027-01-15T07:58:30Z"), NOW - 60, 300.0)  # 30 s after it: not yet
