"""Holding a request behind another of its prefix, for engines that reuse a cached prompt serially: it waits while
its pick serves that prefix, goes when the attempt ends, never longer than recomputing costs, and only for such
engines."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web

from llmaz.apis import constants as c
from llmaz.apis.routing import PREFIX_AWARE
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.routing import holds as holds_module
from llmaz.gateway.routing.balancer import LeastOutstanding
from llmaz.gateway.routing.engines import engine
from llmaz.gateway.routing.holds import DEFAULT_HOLD, MAX_HOLD, MIN_HOLD, PrefixHolds
from llmaz.gateway.routing.holds import HOME as HOME_WAIT
from llmaz.gateway.routing.holds import PREFIX as PREFIX_WAIT
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.picker import PrefixAware, RoutingOptions
from llmaz.gateway.routing.prefix import RoutingKey
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import PromptUsage, Request
from llmaz_dev.testing.waiting import eventually

from .support import WAIT, Cluster, FakeEngine, chat_completion, engines, running_gateway

HOME, OTHER = Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 8080)
KEY = RoutingKey((1, 2, 3), ring=7)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(key: RoutingKey | None = KEY, model: str = "m") -> Request:
    return Request(model, [HOME, OTHER], key)


async def test_a_request_waits_while_its_prefix_is_served_there_and_goes_when_that_attempt_ends() -> None:
    holds = PrefixHolds()
    first, second = request(), request()
    holds.pre_request(first, HOME)
    waiting = asyncio.create_task(holds.wait(second, HOME))
    await eventually(lambda: holds.waiting() == 1)
    assert not waiting.done()
    holds.post_response(first, HOME, None)
    assert await waiting is True
    assert holds.waiting() == 0


async def test_a_request_scheduled_away_from_its_home_waits_while_the_home_serves_its_prefix() -> None:
    holds = PrefixHolds(home_of=lambda key: HOME)
    running = request()
    holds.pre_request(running, HOME)
    assert holds.behind(request(), OTHER) == HOME
    waiting = asyncio.create_task(holds.wait(request(), OTHER))
    await eventually(lambda: holds.waiting() == 1)
    holds.post_response(running, HOME, None)
    assert await waiting is True
    assert holds.behind(request(), OTHER) is None  # nothing left to wait behind: it goes where it is scheduled


def test_a_home_that_is_not_a_candidate_is_not_waited_behind() -> None:
    holds = PrefixHolds(home_of=lambda key: HOME)
    holds.pre_request(request(), HOME)
    assert holds.behind(Request("m", [OTHER], KEY), OTHER) is None


def _busy_home(aware: PrefixAware) -> tuple[Request, Request, Endpoint, Endpoint]:
    """A prefix's first request at its home, another prefix there too, and the prefix's second request, which the
    request bound moves off that home: (first, second, home, where the second is scheduled)."""
    first, second = request(), request()
    home = aware.schedule(first).endpoint
    assert home is not None
    aware.pre_request(first, home)
    aware.pre_request(Request("m", [HOME, OTHER], RoutingKey((9,), ring=9)), home)  # another prefix there too
    moved = aware.schedule(second).endpoint
    assert moved is not None
    assert moved != home  # the request bound moved it on
    return first, second, home, moved


async def test_a_prefix_aware_scheduler_holds_a_request_its_bound_moved_off_a_busy_serial_home() -> None:
    aware = PrefixAware(InFlight())
    first, second, home, _ = _busy_home(aware)
    deciding = asyncio.create_task(aware.decide(second, lambda endpoint: engine("llamacpp")))
    await eventually(lambda: aware.prefix_holds.waiting() == 1)
    aware.post_response(first, home)
    decision = await deciding
    assert decision.held is True
    assert decision.endpoint == home  # scheduled again: home, where its prompt is


async def test_a_request_waits_for_a_slot_at_its_home_busy_with_other_prefixes_not_recomputing_elsewhere() -> None:
    aware = PrefixAware(InFlight())
    first = request()
    home = aware.schedule(first).endpoint
    assert home is not None
    aware.pre_request(first, home)
    aware.post_response(first, home)  # the prefix's home, and its prompt cached there
    others = [Request("m", [HOME, OTHER], RoutingKey((9, n), ring=90 + n)) for n in range(2)]
    for other in others:  # two other prefixes fill the home
        aware.pre_request(other, home)
    second = request()
    moved = aware.schedule(second).endpoint
    assert moved is not None
    assert moved != home  # the request bound moves it on
    assert aware.prefix_holds.behind(second, moved) == home
    deciding = asyncio.create_task(aware.decide(second, lambda endpoint: engine("llamacpp")))
    await eventually(lambda: aware.prefix_holds.waiting() == 1)
    aware.post_response(others[0], home)  # a slot frees at the home
    decision = await deciding
    assert (decision.endpoint, decision.held) == (home, True)


async def test_a_request_that_got_a_slot_at_its_home_still_serving_its_prefix_waits_for_that_attempt_too() -> None:
    aware = PrefixAware(InFlight())
    first, second, other = request(), request(), Request("m", [HOME, OTHER], RoutingKey((9,), ring=9))
    home = aware.schedule(first).endpoint
    assert home is not None
    aware.pre_request(first, home)
    aware.pre_request(other, home)  # the home serves the prefix's first request and another prefix's
    assert aware.schedule(second).endpoint != home  # full: the request bound moves the second on
    deciding = asyncio.create_task(aware.decide(second, lambda endpoint: engine("llamacpp")))
    await eventually(lambda: aware.prefix_holds.waiting(HOME_WAIT) == 1)
    aware.post_response(other, home)  # a slot frees at the home, but its prefix's first request still runs there
    await eventually(lambda: aware.prefix_holds.waiting(PREFIX_WAIT) == 1)  # behind `first`, not beside it
    assert aware.prefix_holds.waiting(HOME_WAIT) == 0
    aware.post_response(first, home)
    decision = await deciding
    assert (decision.endpoint, decision.held) == (home, True)


def test_a_home_serving_nothing_is_not_waited_for() -> None:
    holds = PrefixHolds(home_of=lambda key: HOME)
    assert holds.behind(Request("m", [HOME, OTHER], KEY), OTHER) is None


async def test_a_request_for_an_engine_that_shares_cached_prompts_is_decided_without_waiting() -> None:
    aware = PrefixAware(InFlight())
    _, second, _, moved = _busy_home(aware)
    decision = await aware.decide(second, lambda endpoint: engine("vllm"))
    assert (decision.endpoint, decision.held) == (moved, False)
    assert aware.prefix_holds.waiting() == 0


@pytest.mark.parametrize(
    ("key", "endpoint"),
    [(KEY, OTHER), (RoutingKey((1, 2, 3), ring=8), HOME), (None, HOME)],
    ids=["another-endpoint", "another-prefix", "no-key"],
)
async def test_nothing_waits_for_another_endpoint_another_prefix_or_a_request_without_a_key(
    key: RoutingKey | None, endpoint: Endpoint
) -> None:
    holds = PrefixHolds()
    holds.pre_request(request(), HOME)
    assert await holds.wait(request(key), endpoint) is False


async def test_waiters_go_one_per_ended_attempt_oldest_first() -> None:
    holds = PrefixHolds()
    running = [request(), request()]
    for attempt in running:
        holds.pre_request(attempt, HOME)
    order: list[int] = []

    async def wait(n: int) -> None:
        await holds.wait(request(), HOME)
        order.append(n)

    waiters = [asyncio.create_task(wait(n)) for n in range(3)]
    await eventually(lambda: holds.waiting() == 3)
    holds.post_response(running[0], HOME, None)
    await eventually(lambda: order == [0])
    assert holds.waiting() == 2
    holds.post_response(running[1], HOME, None)
    await eventually(lambda: order == [0, 1])
    assert holds.waiting() == 1
    waiters[2].cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert holds.waiting() == 0


def learn(holds: PrefixHolds, clock: Clock, cached: int, seconds: float, model: str = "m") -> None:
    attempt = request(model=model)
    holds.pre_request(attempt, HOME)
    clock.now += seconds
    holds.post_response(attempt, HOME, PromptUsage(prompt_tokens=1000, cached_tokens=cached))


@pytest.mark.parametrize(
    ("answers", "deadline"),
    [
        ([], DEFAULT_HOLD),
        ([(0, 1.4)], DEFAULT_HOLD),  # a miss alone: what a hit costs is not known yet
        ([(0, 1.4), (990, 0.3)], 1.1),
        ([(0, 1.4), (990, 0.3), (500, 9.0)], 1.1),  # half cached tells neither
        ([(0, 1.4), (990, 0.3), (0, 2.4)], 1.3),  # weighted: 1.4 + 0.2 x (2.4 - 1.4) = 1.6, less 0.3
        ([(0, 0.3), (990, 0.3)], MIN_HOLD),
        ([(0, 60.0), (990, 0.3)], MAX_HOLD),
    ],
    ids=["unknown", "miss-only", "learned", "half-ignored", "weighted", "at-least-min", "at-most-max"],
)
def test_the_deadline_is_what_recomputing_costs_learned_from_the_engines_answers(
    answers: list[tuple[int, float]], deadline: float
) -> None:
    clock = Clock()
    holds = PrefixHolds(clock)
    for cached, seconds in answers:
        learn(holds, clock, cached, seconds)
    assert holds.deadline("m") == pytest.approx(deadline)
    assert holds.deadline("another-model") == DEFAULT_HOLD


@pytest.mark.parametrize(
    ("sharing", "deadline"),
    [(0, 1.1), (1, 2.2), (2, 3.3), (-1, 1.1), (20, MAX_HOLD)],
    ids=["alone", "one-running", "two-running", "negative-as-none", "at-most-max"],
)
def test_the_deadline_counts_the_recompute_once_more_for_each_request_the_pick_serves(
    sharing: int, deadline: float
) -> None:
    clock = Clock()
    holds = PrefixHolds(clock)
    learn(holds, clock, 0, 1.4)
    learn(holds, clock, 990, 0.3)
    assert holds.deadline("m", sharing) == pytest.approx(deadline)


@pytest.mark.parametrize(
    ("answers", "slots", "allowance"),
    [
        ([], 2, 0),  # nothing learned: no queue
        ([(0, 1.4)], 2, 0),  # what a hit costs not known yet
        ([(0, 0.76), (990, 0.49)], 2, 1),  # 0.27 s of recompute; the first waiter starts after ~0.245 s
        ([(0, 0.76), (990, 0.49)], 1, 0),  # one slot: it would wait ~0.49 s, more than a recompute
        ([(0, 3.0), (990, 0.2)], 2, 2),  # recompute far dearer: at most as many as the slots
        ([(0, 0.3), (990, 0.5)], 2, 0),  # a hit slower than a miss: no queue
    ],
    ids=["unknown", "miss-only", "one-waits", "one-slot", "at-most-slots", "no-gain"],
)
def test_the_queue_allowed_at_a_full_engine_is_what_still_starts_sooner_than_a_recompute(
    answers: list[tuple[int, float]], slots: int, allowance: int
) -> None:
    clock = Clock()
    holds = PrefixHolds(clock, home_of=lambda key: HOME if key == KEY else None)
    for cached, seconds in answers:
        learn(holds, clock, cached, seconds)
    assert holds.queue_allowance(request(), HOME, slots) == allowance
    assert holds.queue_allowance(request(model="another-model"), HOME, slots) == 0
    # Only at the prefix's home, where its prompt is: elsewhere, or for a prefix with no home, it is computed whole.
    assert holds.queue_allowance(request(), OTHER, slots) == 0
    assert holds.queue_allowance(request(RoutingKey((5,), ring=5)), HOME, slots) == 0
    assert holds.queue_allowance(request(None), HOME, slots) == 0


async def test_a_request_waits_no_longer_than_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holds_module, "DEFAULT_HOLD", 0.01)
    waits: list[tuple[str, str, str]] = []
    holds = PrefixHolds(waited=lambda model, where, outcome, seconds: waits.append((model, where, outcome)))
    holds.pre_request(request(), HOME)
    assert await asyncio.wait_for(holds.wait(request(), HOME), WAIT) is True  # it waited, and gave up
    assert holds.waiting() == 0
    assert holds.busy(request(), HOME)
    assert waits == [("m", "prefix", "expired")]


async def test_each_wait_is_told_where_it_waited_and_how_it_ended_and_one_with_nothing_to_wait_for_is_not() -> None:
    clock = Clock()
    waits: list[tuple[str, str, str, float]] = []
    holds = PrefixHolds(clock, home_of=lambda key: HOME, waited=lambda *wait: waits.append(wait))
    running = request()
    holds.pre_request(running, HOME)
    waiting = asyncio.create_task(holds.wait(request(), OTHER))  # moved off its full home
    await eventually(lambda: holds.waiting() == 1)
    clock.now += 0.25
    holds.post_response(running, HOME, None)
    assert await waiting is True
    assert waits == [("m", "home", "released", 0.25)]
    assert await holds.wait(request(), OTHER) is False  # the home serves nothing now
    assert len(waits) == 1


def test_attempts_that_never_end_are_let_go_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holds_module, "TRACKED_ATTEMPTS", 4)
    holds = PrefixHolds()
    attempts = [Request("m", [HOME], RoutingKey((n,), ring=n)) for n in range(10)]
    for attempt in attempts:
        holds.pre_request(attempt, HOME)
    assert [holds.busy(attempt, HOME) for attempt in attempts] == [False] * 6 + [True] * 4


async def test_prefix_aware_holds_and_least_outstanding_does_not() -> None:
    least = LeastOutstanding(InFlight())
    least.pre_request(request(), HOME)
    assert least.holds is None
    decision = await least.decide(request(), lambda endpoint: engine("llamacpp"))
    assert (decision.endpoint, decision.held) == (OTHER, False)  # the least loaded, at once
    aware = PrefixAware(InFlight())
    assert aware.holds is aware.prefix_holds
    aware = PrefixAware(InFlight())
    assert aware.holds is aware.prefix_holds


# Through a running gateway

SYSTEM = "You answer questions about the shop's opening hours, briefly. " * 20
PREFIX_AWARE_GATEWAY = GatewayOptions(routing=RoutingOptions(strategy=PREFIX_AWARE))


def chat(question: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]}


def gated(engine: FakeEngine, gate: asyncio.Event) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The first request waits for `gate`; the others answer at once."""

    async def handler(req: web.Request) -> web.StreamResponse:
        if len(engine.requests) == 1:
            engine.first_sent.set()
            await gate.wait()
        return web.json_response(chat_completion(orjson.loads(engine.requests[-1].body)["model"]))

    return handler


@pytest.mark.parametrize(
    ("backend", "held"),
    [(c.LLAMACPP_BACKEND, True), ("vllm", False)],
    ids=["llamacpp-serial", "vllm-shared"],
)
async def test_through_the_gateway_a_serial_engine_serves_one_prefix_at_a_time_and_a_shared_one_at_once(
    backend: str, held: bool
) -> None:
    async with engines(2) as fleet:
        gate = asyncio.Event()
        for engine in fleet:
            engine.handler = gated(engine, gate)
        cluster = Cluster().synced()
        cluster.serve("m", *(engine.endpoint for engine in fleet), backend=backend)
        async with running_gateway(cluster, PREFIX_AWARE_GATEWAY) as gw:
            first = asyncio.create_task(gw.post("/v1/chat/completions", chat("When do you open?")))
            await asyncio.wait_for(asyncio.wait([asyncio.create_task(e.first_sent.wait()) for e in fleet],
                                                return_when=asyncio.FIRST_COMPLETED), WAIT)  # fmt: skip
            home = next(engine for engine in fleet if engine.first_sent.is_set())
            second = asyncio.create_task(gw.post("/v1/chat/completions", chat("And on Sundays?")))
            holds = gw.gateway.pickers.prefix_aware.prefix_holds
            if held:
                await eventually(lambda: holds.waiting() == 1)
                assert sum(len(engine.requests) for engine in fleet) == 1  # the second waits at the gateway
            else:
                await eventually(lambda: len(home.requests) == 2)  # the second is at the engine beside the first
                assert holds.waiting() == 0
            gate.set()
            assert [(await first)[0], (await second)[0]] == [200, 200]
            assert len(home.requests) == 2  # either way, both went to the prefix's home
            released = gw.sample("llmaz_gateway_prefix_holds_total", model="m", where="prefix", outcome="released")
            assert released == (1 if held else 0)
            assert gw.sample("llmaz_gateway_prefix_hold_seconds_count", model="m") == released
