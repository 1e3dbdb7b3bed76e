"""The recorder never blocks a caller: it queues, or drops and counts (full queue, per-object spam filter)."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.runtime.client import Client, RestConfig
from llmaz.runtime.events import NORMAL, WARNING, EventBroadcaster, object_reference
from llmaz_dev.testing.clock import FakeClock


def pod(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "3"},
    }


def broadcaster(clock: FakeClock, **kw: Any) -> EventBroadcaster:
    return EventBroadcaster(Client(RestConfig(host="http://127.0.0.1:1")), clock=clock, **kw)


def test_the_regarding_reference_is_taken_from_the_object() -> None:
    assert object_reference(pod("p", "u1")) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "3",
    }


def test_events_beyond_the_queue_capacity_are_dropped_and_counted() -> None:
    b = broadcaster(FakeClock(), queue_size=2)
    recorder = b.recorder("ctrl")
    for i in range(5):
        recorder.event(pod(f"p{i}", f"u{i}"), NORMAL, "Created", "created")
    assert b.dropped == 3


def test_the_spam_filter_allows_a_burst_per_object_then_one_per_refill_period() -> None:
    clock = FakeClock()
    b = broadcaster(clock, burst=3, refill_seconds=300)
    recorder = b.recorder("ctrl")
    for _ in range(5):
        recorder.event(pod("p", "u1"), WARNING, "Failed", "x")
    assert b.dropped == 2
    recorder.event(pod("other", "u2"), WARNING, "Failed", "x")
    assert b.dropped == 2  # the budget is per object
    clock.step(300)
    recorder.event(pod("p", "u1"), WARNING, "Failed", "x")
    recorder.event(pod("p", "u1"), WARNING, "Failed", "x")
    assert b.dropped == 3


def test_the_reporting_instance_defaults_to_controller_and_host() -> None:
    recorder = broadcaster(FakeClock()).recorder("llmaz-controller")
    assert recorder.reporting_controller == "llmaz-controller"
    assert recorder.reporting_instance.startswith("llmaz-controller-")
    assert len(recorder.reporting_instance) <= 128


def test_an_unknown_event_type_is_a_programming_error() -> None:
    recorder = broadcaster(FakeClock()).recorder("c")
    with pytest.raises(ValueError, match="Normal or Warning"):
        recorder.event(pod("p", "u"), "Info", "R", "n")
