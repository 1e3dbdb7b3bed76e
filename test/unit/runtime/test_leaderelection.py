"""Pure parts of leader election: timing validation, MicroTime, and the takeover rule on the local clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llmaz.runtime.client import Client, RestConfig
from llmaz.runtime.leaderelection import LeaderElectionConfig, LeaderElector, default_identity, micro_time
from llmaz.testing.clock import FakeClock


def lease(holder: str | None, renew: str, duration: int = 15) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration, "renewTime": renew, "leaseTransitions": 2}
    if holder:
        spec["holderIdentity"] = holder
    return {"metadata": {"name": "l", "namespace": "ns", "resourceVersion": "1"}, "spec": spec}


def elector(clock: FakeClock, identity: str = "me") -> LeaderElector:
    config = LeaderElectionConfig(name="l", namespace="ns", identity=identity)
    return LeaderElector(Client(RestConfig(host="http://127.0.0.1:1")), config, clock)


def test_defaults_are_controller_runtimes() -> None:
    config = LeaderElectionConfig(name="l", namespace="ns")
    assert (config.lease_duration, config.renew_deadline, config.retry_period) == (15.0, 10.0, 2.0)
    assert config.request_timeout == 5.0


@pytest.mark.parametrize(("lease_s", "renew_s", "retry_s"), [(10, 10, 2), (15, 2, 2), (15, 10, 0)])
def test_timings_must_leave_room_for_renewal(lease_s: float, renew_s: float, retry_s: float) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaderElectionConfig("l", "ns", lease_duration=lease_s, renew_deadline=renew_s, retry_period=retry_s)


def test_identity_is_hostname_underscore_uuid() -> None:
    host, _, suffix = default_identity().rpartition("_")
    assert host
    assert len(suffix) == 36


def test_micro_time_is_rfc3339_with_microseconds_in_utc() -> None:
    assert micro_time(datetime(2024, 5, 6, 7, 8, 9, 12, tzinfo=UTC)) == "2024-05-06T07:08:09.000012Z"


def test_another_holder_is_respected_until_its_record_is_unchanged_for_a_lease_duration() -> None:
    clock = FakeClock()
    le = elector(clock)
    le._observe(lease("other", "t1"))
    clock.step(14.9)
    le._observe(lease("other", "t1"))  # same record: no renewal seen
    assert le._held_by_other(lease("other", "t1"))
    clock.step(0.2)
    assert not le._held_by_other(lease("other", "t1"))


def test_a_renewal_seen_restarts_the_wait_whatever_its_timestamps_say() -> None:
    clock = FakeClock()
    le = elector(clock)
    le._observe(lease("other", "t1"))
    clock.step(14.0)
    le._observe(lease("other", "2000-01-01T00:00:00.000000Z"))  # a changed record, even if "old"
    clock.step(14.0)
    assert le._held_by_other(lease("other", "2000-01-01T00:00:00.000000Z"))


def test_a_released_or_own_lease_is_free_to_take() -> None:
    le = elector(FakeClock())
    le._observe(lease(None, "t1", duration=1))
    assert not le._held_by_other(lease(None, "t1", duration=1))
    le._observe(lease("me", "t2"))
    assert not le._held_by_other(lease("me", "t2"))


def test_taking_over_increments_transitions_and_renewing_keeps_acquire_time() -> None:
    clock = FakeClock()
    le = elector(clock)
    taken = le._next_lease(lease("other", "t1"))
    assert taken["spec"]["holderIdentity"] == "me"
    assert taken["spec"]["leaseTransitions"] == 3
    acquired = taken["spec"]["acquireTime"]
    clock.step(2)
    renewed = le._next_lease(taken)
    assert renewed["spec"]["leaseTransitions"] == 3
    assert renewed["spec"]["acquireTime"] == acquired
    assert renewed["spec"]["renewTime"] != taken["spec"]["renewTime"]
