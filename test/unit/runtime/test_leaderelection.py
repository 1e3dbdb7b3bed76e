"""Leader election on a FakeClock: timing validation, MicroTime, the takeover rule on the local clock, and when a
leader stops leading (renew deadline, another holder, a pause), against an in-memory Lease API."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from typing import Any

import pytest

from llmaz.runtime.client import AlreadyExists, Client, Conflict, NotFound, RestConfig
from llmaz.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLostError,
    default_identity,
)
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.clock import FakeClock

from .helpers import settle


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


class FakeLeases:
    """An in-memory Lease API for one Lease: resourceVersions, Conflict on a stale one, NotFound, AlreadyExists.

    Records every write it receives as (verb, holder written). `stall_updates` makes updates hang until
    cancelled, as a request does while the transport retries 429s. Limits: one Lease, no timestamps checked,
    no validation, no request timeouts of its own.
    """

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.writes: list[tuple[str, str]] = []
        self.stall_updates = False
        self.cancelled_updates = 0
        self._rv = 0

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        self.lease = copy.deepcopy(obj)
        self.lease["metadata"]["resourceVersion"] = str(self._rv)
        return copy.deepcopy(self.lease)

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, *, request_timeout: float | None = None
    ) -> dict[str, Any]:
        if self.lease is None:
            raise NotFound(404, "NotFound", f'leases "{name}" not found')
        return copy.deepcopy(self.lease)

    async def create(
        self, resource: Resource, obj: dict[str, Any], namespace: str | None = None, **opts: Any
    ) -> dict[str, Any]:
        self.writes.append(("create", obj["spec"].get("holderIdentity", "")))
        if self.lease is not None:
            raise AlreadyExists(409, "AlreadyExists", "exists")
        return self._store(obj)

    async def update(self, resource: Resource, obj: dict[str, Any], **opts: Any) -> dict[str, Any]:
        self.writes.append(("update", obj["spec"].get("holderIdentity", "")))
        if self.stall_updates:
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                self.cancelled_updates += 1
                raise
        assert self.lease is not None
        if obj["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        return self._store(obj)

    def take(self, holder: str) -> None:
        """Another replica writes itself in as holder, with a newer renew time."""
        assert self.lease is not None
        taken = copy.deepcopy(self.lease)
        taken["spec"].update(holderIdentity=holder, renewTime="2099-01-01T00:00:00.000000Z")
        self._store(taken)

    def writes_by(self, holder: str, since: int = 0) -> list[tuple[str, str]]:
        return [write for write in self.writes[since:] if write[1] == holder]


async def leading(clock: FakeClock, api: FakeLeases, on_lost: list[str]) -> tuple[LeaderElector, asyncio.Task[None]]:
    """Elector "me" holding the Lease, its `hold` running and asleep until the next renewal."""
    config = LeaderElectionConfig(name="l", namespace="ns", identity="me")
    le = LeaderElector(api, config, clock, random.Random(1), on_stopped_leading=lambda: on_lost.append("lost"))
    await le.acquire()
    task = asyncio.create_task(le.hold())
    await clock.wait_for_sleepers()
    return le, task


async def test_a_leader_paused_past_its_lease_wakes_up_deposed_and_writes_nothing() -> None:
    clock, api, on_lost = FakeClock(), FakeLeases(), list[str]()
    le, hold = await leading(clock, api, on_lost)
    writes = len(api.writes)
    # The whole process stops for longer than the lease (SIGSTOP); meanwhile another replica takes over. The
    # clock jumps and the takeover lands before any of this replica's tasks runs again.
    clock.step(20.0)
    api.take("other")
    assert not le.is_leader  # on the monotonic clock its renew deadline has long passed
    with pytest.raises(LeadershipLostError):
        await asyncio.wait_for(hold, 1)
    assert api.writes_by("me", since=writes) == []
    assert on_lost == ["lost"]


async def test_a_leader_that_finds_another_holder_steps_down_at_once() -> None:
    clock, api, on_lost = FakeClock(), FakeLeases(), list[str]()
    le, hold = await leading(clock, api, on_lost)
    api.take("other")
    clock.step(2.0)  # the next renewal: its optimistic update conflicts, and a read shows the new holder
    with pytest.raises(LeadershipLostError, match="taken by other"):
        await asyncio.wait_for(hold, 1)
    assert clock.now() == 1002.0  # not after waiting out the renew deadline
    assert not le.is_leader
    assert on_lost == ["lost"]
    assert api.lease is not None
    assert api.lease["spec"]["holderIdentity"] == "other"


async def test_a_renewal_stuck_in_retries_is_cancelled_and_leadership_lapses_at_the_renew_deadline() -> None:
    clock, api, on_lost = FakeClock(), FakeLeases(), list[str]()
    le, hold = await leading(clock, api, on_lost)
    acquired = clock.now()
    api.stall_updates = True
    clock.step(2.0)
    await settle()
    assert api.writes_by("me")[-1] == ("update", "me")  # the renewal is in flight, and stays there
    clock.set(acquired + 9.9)
    await settle()
    assert le.is_leader
    assert not hold.done()
    clock.set(acquired + 10.0)
    assert not le.is_leader  # at the deadline itself, before the elector's task has even run
    with pytest.raises(LeadershipLostError):
        await asyncio.wait_for(hold, 1)
    assert api.cancelled_updates == 1
    assert on_lost == ["lost"]


async def test_a_leader_that_keeps_renewing_stays_leader() -> None:
    clock, api, on_lost = FakeClock(), FakeLeases(), list[str]()
    le, hold = await leading(clock, api, on_lost)
    for _ in range(10):
        clock.step(2.0)
        await settle()
        assert le.is_leader
    assert len(api.writes_by("me")) == 11
    hold.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await hold
    assert on_lost == []


async def test_release_after_a_renew_whose_answer_was_lost_reads_the_lease_and_still_gives_it_up() -> None:
    clock, api, on_lost = FakeClock(), FakeLeases(), list[str]()
    le, hold = await leading(clock, api, on_lost)
    # A renew reached the server but its answer never came back (cancelled by the stop): the Lease is one
    # version ahead of the elector's record, still naming it.
    assert api.lease is not None
    api._store(copy.deepcopy(api.lease))
    hold.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await hold
    await le.release()
    assert api.lease is not None
    assert "holderIdentity" not in api.lease["spec"]
    assert api.lease["spec"]["leaseDurationSeconds"] == 1


async def test_release_gives_up_nothing_someone_else_already_holds() -> None:
    clock, api, on_lost = FakeClock(), FakeLeases(), list[str]()
    le, hold = await leading(clock, api, on_lost)
    api.take("other")
    hold.cancel()
    with contextlib.suppress(asyncio.CancelledError, LeadershipLostError):
        await hold
    writes = len(api.writes)
    await le.release()
    assert api.lease is not None
    assert api.lease["spec"]["holderIdentity"] == "other"
    assert len(api.writes) - writes <= 1  # at most the one stale attempt, refused
