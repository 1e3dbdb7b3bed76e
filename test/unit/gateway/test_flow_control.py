"""Flow control's saturation test and its queues at work: when a request waits, when it is dispatched, shed,
expired or removed. The engines' load is set by the test; time is an injected clock."""

from __future__ import annotations

import asyncio
import math

import pytest

from llmaz.gateway.flow.control import (
    NO_ENDPOINT,
    QUEUE_FULL,
    QUEUE_TTL,
    RESERVE_KEPT_FOR,
    FlowControl,
    FlowOptions,
    ShedError,
)
from llmaz.gateway.flow.saturation import Saturation, SaturationOptions
from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import EngineLoad
from llmaz.gateway.routing.routes import Endpoint
from llmaz_dev.testing.clock import FakeClock

A, B = Endpoint("10.0.0.1", 8000), Endpoint("10.0.0.2", 8000)
SHED = "llmaz_gateway_flow_shed_requests_total"


class Signals:
    def __init__(self) -> None:
        self.loads: dict[Endpoint, EngineLoad] = {}

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        return self.loads.get(endpoint)


class Setup:
    def __init__(
        self,
        queue_size: int = 10,
        ttl: float = 30.0,
        saturation: SaturationOptions | None = None,
        reserved_slots: int = 0,
    ) -> None:
        self.clock = FakeClock()
        self.signals = Signals()
        self.in_flight = InFlight(clock=self.clock.now)
        self.endpoints = [A, B]
        self.metrics = GatewayMetrics(process_collectors=False)
        self.saturation = Saturation(self.in_flight, self.signals, saturation or SaturationOptions())
        self.flow = FlowControl(
            lambda model: list(self.endpoints),
            self.saturation,
            FlowOptions(enabled=True, queue_size=queue_size, queue_ttl=ttl, reserved_slots=reserved_slots),
            self.metrics,
            self.clock.now,
        )

    def saturate(self) -> None:
        for endpoint in self.endpoints:
            self.signals.loads[endpoint] = EngineLoad(running=8, waiting=4, observed_at=self.clock.now())

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


async def queued(flow: FlowControl, model: str, count: int) -> None:
    """Let the waiters' tasks run until `count` of them wait in `model`'s queue."""
    for _ in range(100):
        if len(flow.queued(model)) == count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(flow.queued(model))} queued, expected {count}")


# The saturation test


def test_a_reserve_keeps_an_engines_last_slots_free_and_nothing_in_its_queue() -> None:
    s = Setup(saturation=SaturationOptions(engine_waiting=4))
    s.signals.loads[A] = EngineLoad(running=1, waiting=0, utilisation=0.5, observed_at=s.clock.now(), slots=2)
    assert (s.saturation.room(A), s.saturation.room(A, reserve=1)) == (math.inf, 0)
    s.signals.loads[A] = EngineLoad(running=0, waiting=0, utilisation=0.0, observed_at=s.clock.now(), slots=4)
    assert s.saturation.room(A, reserve=1) == 3
    s.clock.step(0.01)
    s.in_flight.acquire(A)  # sent since the engine was read: it takes a slot too
    assert s.saturation.room(A, reserve=1) == 2
    # Slots not known: nothing into the engine's own queue once it is at capacity, where no reserve allows 4.
    s.signals.loads[B] = EngineLoad(running=8, waiting=1, observed_at=s.clock.now())
    assert (s.saturation.room(B), s.saturation.room(B, reserve=1)) == (3, 0)
    s.signals.loads[B] = EngineLoad(running=3, waiting=0, utilisation=0.5, observed_at=s.clock.now())
    assert s.saturation.room(B, reserve=1) == math.inf
    del s.signals.loads[B]  # load not known: this replica's own requests count, the reserve off the bound
    assert s.saturation.room(B, reserve=2) == SaturationOptions().endpoint_requests - 2


def test_an_endpoint_whose_engine_is_not_at_capacity_has_room_whatever_its_load() -> None:
    s = Setup()
    s.signals.loads[A] = EngineLoad(running=300, waiting=0, utilisation=0.9, observed_at=s.clock.now())
    assert s.saturation.room(A) == math.inf
    s.signals.loads[B] = EngineLoad(running=8, waiting=4)
    assert not s.saturation.saturated([A, B])


def test_an_engine_at_capacity_is_full_when_its_queue_reaches_the_threshold_counting_what_was_sent_since() -> None:
    s = Setup(saturation=SaturationOptions(engine_waiting=4))
    s.signals.loads[A] = EngineLoad(running=8, waiting=1, observed_at=s.clock.now())
    assert s.saturation.room(A) == 3
    s.clock.step(0.01)
    for _ in range(3):
        s.in_flight.acquire(A)
    assert s.saturation.room(A) == 0
    s.in_flight.release(A)
    assert s.saturation.room(A) == 1


def test_an_engine_with_every_slot_busy_is_at_capacity_from_its_utilisation() -> None:
    s = Setup(saturation=SaturationOptions(engine_waiting=2, utilisation=1.0))
    s.signals.loads[A] = EngineLoad(running=4, waiting=0, utilisation=1.0, observed_at=s.clock.now())
    s.clock.step(0.01)
    s.in_flight.acquire(A)
    s.in_flight.acquire(A)
    assert s.saturation.room(A) == 0


def test_an_endpoint_whose_load_is_not_known_counts_by_this_replicas_own_requests() -> None:
    s = Setup(saturation=SaturationOptions(endpoint_requests=2))
    s.in_flight.acquire(A)
    assert s.saturation.room(A) == 1
    s.in_flight.acquire(A)
    assert s.saturation.saturated([A])


def test_a_model_is_saturated_only_when_every_endpoint_is_full_and_when_it_has_none() -> None:
    s = Setup()
    s.saturate()
    assert s.saturation.saturated([A, B])
    s.signals.loads[B] = EngineLoad(running=8, waiting=3, observed_at=s.clock.now())
    assert not s.saturation.saturated([A, B])
    assert s.saturation.saturated([])


# The queues at work


async def test_a_request_for_a_model_that_is_not_saturated_is_admitted_at_once() -> None:
    s = Setup()
    ticket = s.flow.try_admit("m", 5, "a", 10)
    assert ticket is not None
    assert not ticket.queued
    ticket.sent()
    ticket.finish(10)
    assert s.flow.queued("m") == []
    assert s.sample("llmaz_gateway_flow_wait_seconds_count", model="m", band="5") == 1
    assert s.sample("llmaz_gateway_flow_wait_seconds_sum", model="m", band="5") == 0


async def test_a_saturated_models_request_waits_until_a_request_of_it_ends() -> None:
    s = Setup()
    s.saturate()
    assert s.flow.try_admit("m", 5, "a", 10) is None
    waiting = asyncio.create_task(s.flow.wait("m", 5, "a", 10))
    await queued(s.flow, "m", 1)
    assert s.sample("llmaz_gateway_flow_queue_depth", model="m", band="5", tenant="a") == 1
    s.clock.step(2)
    s.in_flight.acquire(A)  # a request sent before, now ending
    s.in_flight.release(A)
    s.in_flight.release(A)
    s.flow.pump("m")
    ticket = await waiting
    assert ticket.queued
    assert ticket.waited == 2
    assert s.sample("llmaz_gateway_flow_queue_depth", model="m", band="5", tenant="a") == 0
    assert s.sample("llmaz_gateway_flow_wait_seconds_sum", model="m", band="5") == 2


async def test_no_request_overtakes_a_queued_one_and_dispatches_never_outrun_the_room() -> None:
    s = Setup(saturation=SaturationOptions(engine_waiting=4))
    s.saturate()
    tasks = [asyncio.create_task(s.flow.wait("m", 5, "a", 10)) for _ in range(3)]
    await queued(s.flow, "m", 3)
    s.signals.loads[A] = EngineLoad(running=8, waiting=3, observed_at=s.clock.now())  # room for one
    s.flow.refresh()
    assert s.flow.try_admit("m", 9, "b", 10) is None  # two still queued: a newcomer queues behind them
    await asyncio.sleep(0)
    assert [t.done() for t in tasks] == [True, False, False]
    s.flow.pump("m")  # the dispatched one is not sent yet: its grant still takes the room
    assert len(s.flow.queued("m")) == 2
    ticket = tasks[0].result()
    s.clock.step(0.01)
    s.in_flight.acquire(A)
    ticket.sent()
    s.flow.pump("m")
    assert len(s.flow.queued("m")) == 2
    for task in tasks[1:]:
        task.cancel()
    await asyncio.gather(*tasks[1:], return_exceptions=True)


async def test_a_full_queue_sheds_the_lowest_bands_newest_with_queue_full() -> None:
    s = Setup(queue_size=2)
    s.saturate()
    low = asyncio.create_task(s.flow.wait("m", 1, "batch", 10))
    high = asyncio.create_task(s.flow.wait("m", 8, "chat", 10))
    await queued(s.flow, "m", 2)
    arrival = asyncio.create_task(s.flow.wait("m", 5, "chat", 10))
    with pytest.raises(ShedError) as shed:
        await low
    assert shed.value.reason == QUEUE_FULL
    with pytest.raises(ShedError):
        await s.flow.wait("m", 0, "batch", 10)
    assert s.sample(SHED, model="m", tenant="batch", band="1", reason=QUEUE_FULL) == 1
    assert s.sample(SHED, model="m", tenant="batch", band="0", reason=QUEUE_FULL) == 1
    assert [w.band for w in s.flow.queued("m")] == [8, 5]
    for task in (high, arrival):
        task.cancel()
    await asyncio.gather(high, arrival, return_exceptions=True)


async def test_a_waiter_past_its_ttl_gets_queue_ttl_while_endpoints_exist_and_no_endpoint_when_none() -> None:
    s = Setup(ttl=30)
    s.saturate()
    first = asyncio.create_task(s.flow.wait("m", 5, "a", 10))
    await queued(s.flow, "m", 1)
    s.clock.step(30)
    s.flow.pump("m")
    with pytest.raises(ShedError) as shed:
        await first
    assert (shed.value.reason, shed.value.waited) == (QUEUE_TTL, 30)
    second = asyncio.create_task(s.flow.wait("m", 5, "a", 10))
    await queued(s.flow, "m", 1)
    s.endpoints = []
    s.clock.step(30)
    s.flow.pump("m")
    with pytest.raises(ShedError) as shed:
        await second
    assert shed.value.reason == NO_ENDPOINT
    assert s.sample(SHED, model="m", tenant="a", band="5", reason=QUEUE_TTL) == 1
    assert s.sample(SHED, model="m", tenant="a", band="5", reason=NO_ENDPOINT) == 1


async def test_a_waiter_whose_client_goes_away_leaves_the_queue() -> None:
    s = Setup()
    s.saturate()
    gone = asyncio.create_task(s.flow.wait("m", 5, "a", 10))
    stays = asyncio.create_task(s.flow.wait("m", 5, "b", 10))
    await queued(s.flow, "m", 2)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert [w.tenant for w in s.flow.queued("m")] == ["b"]
    assert s.sample("llmaz_gateway_flow_queue_depth", model="m", band="5", tenant="a") == 0
    stays.cancel()
    await asyncio.gather(stays, return_exceptions=True)
    assert s.flow.queued("m") == []


async def test_a_waiter_given_its_turn_and_gone_before_it_was_sent_passes_the_turn_on() -> None:
    s = Setup(saturation=SaturationOptions(engine_waiting=4))
    s.saturate()
    first = asyncio.create_task(s.flow.wait("m", 5, "a", 10))
    second = asyncio.create_task(s.flow.wait("m", 5, "a", 10))
    await queued(s.flow, "m", 2)
    s.signals.loads[A] = EngineLoad(running=8, waiting=3, observed_at=s.clock.now())  # room for one
    s.flow.refresh()
    first.cancel()  # its turn was given; its client went away before it resumed
    await asyncio.gather(first, return_exceptions=True)
    ticket = await asyncio.wait_for(second, 5)
    assert ticket.queued


async def test_a_model_without_endpoints_holds_its_waiters_until_they_come_then_dispatches_by_band() -> None:
    s = Setup(ttl=30)
    s.endpoints = []
    low = asyncio.create_task(s.flow.wait("m", 1, "a", 10, ttl=300))
    await queued(s.flow, "m", 1)
    high = asyncio.create_task(s.flow.wait("m", 8, "b", 10, ttl=300))
    await queued(s.flow, "m", 2)
    assert s.flow.held("m") == 2
    s.clock.step(100)  # past the queue's TTL, within their own
    s.flow.pump("m")
    assert [w.band for w in s.flow.queued("m")] == [8, 1]
    s.endpoints = [A]
    s.signals.loads[A] = EngineLoad(running=8, waiting=3, observed_at=s.clock.now())  # room for one
    s.flow.pump("m")
    first = await high
    assert (first.band, first.waited) == (8, 100)
    assert not low.done()
    assert s.flow.held("m") == 2  # one given its turn, not yet sent, and one queued
    first.sent()
    assert s.flow.held("m") == 1
    low.cancel()
    await asyncio.gather(low, return_exceptions=True)
    assert s.flow.held("m") == 0


async def test_a_waiter_with_its_own_ttl_expires_then_and_not_at_the_queues() -> None:
    s = Setup(ttl=30)
    s.endpoints = []
    waking = asyncio.create_task(s.flow.wait("m", 5, "a", 10, ttl=120))
    await queued(s.flow, "m", 1)
    s.clock.step(60)
    s.flow.pump("m")
    assert not waking.done()
    s.clock.step(60)
    s.flow.pump("m")
    with pytest.raises(ShedError) as shed:
        await waking
    assert (shed.value.reason, shed.value.waited) == (NO_ENDPOINT, 120)


async def test_a_wait_with_a_ttl_that_is_not_positive_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="ttl must be a positive number of seconds, got 0"):
        await Setup().flow.wait("m", 5, "a", 10, ttl=0)


# The reserve


async def test_a_reserve_holds_lower_bands_back_only_while_a_band_that_may_use_it_comes() -> None:
    s = Setup(ttl=4 * RESERVE_KEPT_FOR, reserved_slots=1)
    s.endpoints = [A]
    s.signals.loads[A] = EngineLoad(running=1, waiting=0, utilisation=0.5, observed_at=s.clock.now(), slots=2)
    batch = s.flow.try_admit("m", 2, "batch", 10)
    assert batch is not None  # no higher band has come: the batch may take the last slot
    batch.finish(10)
    interactive = s.flow.try_admit("m", 7, "interactive", 10)
    assert interactive is not None  # the reserved band takes the last slot at once
    interactive.finish(10)
    assert s.flow.try_admit("m", 2, "batch", 10) is None  # now the last slot is kept for it
    waiting = asyncio.create_task(s.flow.wait("m", 2, "batch", 10))
    await queued(s.flow, "m", 1)
    assert s.flow.try_admit("m", 7, "interactive", 10) is None  # the queue is not empty: it queues, ahead
    ahead = asyncio.create_task(s.flow.wait("m", 7, "interactive", 10))
    first = await ahead
    first.finish(10)
    assert not waiting.done()
    s.clock.step(RESERVE_KEPT_FOR + 1)  # no request of the reserved band since: the reserve lapses
    s.flow.refresh()
    ticket = await waiting
    assert ticket.queued
    assert s.flow._reserved_seen == {}  # and nothing is kept of it


def test_flow_options_refuse_a_negative_reserve_and_a_reserved_band_out_of_range() -> None:
    with pytest.raises(ValueError, match="reserved_slots must be 0 or more"):
        FlowOptions(reserved_slots=-1)
    with pytest.raises(ValueError, match="reserved_band must be a band from 1 to 9"):
        FlowOptions(reserved_band=0)
