"""The reflector's resourceVersion protocol, asserted call by call with scripted list/watch functions."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from llmaz.runtime.cache.reflector import Reflector
from llmaz.runtime.client import ApiConnectionError, Expired, Forbidden, NotFound, ServerError, TooManyRequests
from llmaz.runtime.client.watch import WatchEvent
from llmaz_dev.testing.clock import FakeClock
from llmaz_dev.testing.listwatch import Pause, ScriptedListWatch, bookmark, event, obj
from llmaz_dev.testing.waiting import eventually


class RecordingClock(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await super().sleep(seconds)


class NoJitter(random.Random):
    def random(self) -> float:
        return 0.0


class RecordingSink:
    def __init__(self) -> None:
        self.log: list[tuple[str, ...]] = []

    def replace(self, items: list[dict[str, Any]], resource_version: str) -> None:
        self.log.append(("replace", ",".join(i["metadata"]["name"] for i in items), resource_version))

    def add(self, o: dict[str, Any]) -> None:
        self.log.append(("add", o["metadata"]["name"], o["metadata"]["resourceVersion"]))

    def update(self, o: dict[str, Any]) -> None:
        self.log.append(("update", o["metadata"]["name"], o["metadata"]["resourceVersion"]))

    def delete(self, o: dict[str, Any]) -> None:
        self.log.append(("delete", o["metadata"]["name"], o["metadata"]["resourceVersion"]))


def expired(rv: str = "1") -> Expired:
    return Expired(410, "Expired", f"too old resource version: {rv} (99)")


def connection_refused() -> ApiConnectionError:
    return ApiConnectionError("connection refused")


async def step_until_exhausted(lw: ScriptedListWatch, clock: FakeClock) -> None:
    """Let the reflector run, moving the clock to each sleeper's deadline, until the script is consumed."""
    await eventually(clock.stepping(lw.exhausted.is_set), within=10, what="the list-watch script to be consumed")


@contextlib.asynccontextmanager
async def running(lw: ScriptedListWatch, clock: FakeClock, sink: RecordingSink) -> AsyncIterator[Reflector]:
    reflector = Reflector(lw.list, lw.watch, sink, name="test", clock=clock, rng=NoJitter())
    task = asyncio.create_task(reflector.run())
    try:
        yield reflector
        await step_until_exhausted(lw, clock)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_lists_at_zero_then_watches_from_the_list_and_follows_events_and_bookmarks() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([obj("a", "5")], "10")
    lw.add_watch(event("ADDED", "b", "11"), event("MODIFIED", "a", "12"), bookmark("15"))
    lw.add_watch(event("DELETED", "b", "16"))
    async with running(lw, clock, sink) as reflector:
        pass
    assert lw.calls == [("list", "0"), ("watch", "10"), ("watch", "15"), ("watch", "16")]
    assert sink.log == [
        ("replace", "a", "10"),
        ("add", "b", "11"),
        ("update", "a", "12"),
        ("delete", "b", "16"),
    ]
    assert reflector.last_sync_resource_version == "16"
    assert clock.sleeps == []  # clean ends of watches that delivered events re-watch at once


async def test_an_expired_watch_relists_at_the_last_rv_after_a_backoff_and_watches_from_the_new_list() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([obj("a", "5")], "10")
    lw.add_watch(event("ADDED", "b", "11"), expired("11"))
    lw.add_list([obj("a", "5"), obj("c", "18")], "20")
    async with running(lw, clock, sink):
        pass
    assert lw.calls == [("list", "0"), ("watch", "10"), ("list", "11"), ("watch", "20")]
    assert sink.log[-1] == ("replace", "a,c", "20")
    assert clock.sleeps == [0.8]


async def test_an_expired_relist_falls_back_at_once_to_a_consistent_list() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([], "10").add_watch(expired("10"))
    lw.add_list_error(expired("10")).add_list([obj("a", "25")], "30")
    lw.add_watch(event("MODIFIED", "a", "31")).add_watch(expired("31"))
    lw.add_list([obj("a", "31")], "40")
    async with running(lw, clock, sink):
        pass
    assert lw.calls == [
        ("list", "0"), ("watch", "10"),
        ("list", "10"), ("list", ""), ("watch", "30"), ("watch", "31"),
        ("list", "31"), ("watch", "40"),
    ]  # fmt: skip
    assert clock.sleeps == [0.8, 1.6]


async def test_a_too_large_resource_version_on_watch_relists_from_etcd() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    too_large = ServerError(504, "Timeout", "Too large resource version: 12, current: 10", retry_after=1)
    lw = ScriptedListWatch(clock).add_list([], "12").add_watch(too_large).add_list([], "13")
    async with running(lw, clock, sink):
        pass
    assert lw.calls == [("list", "0"), ("watch", "12"), ("list", ""), ("watch", "13")]


async def test_throttled_or_disconnected_watches_back_off_and_rewatch_without_relisting() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([], "10")
    lw.add_watch_error(TooManyRequests(429, "TooManyRequests", "slow down", retry_after=1))
    lw.add_watch(event("ADDED", "a", "11"), connection_refused())
    lw.add_watch_error(connection_refused())
    async with running(lw, clock, sink):
        pass
    assert lw.calls == [("list", "0"), ("watch", "10"), ("watch", "10"), ("watch", "11"), ("watch", "11")]
    # The server's Retry-After (1 s) outweighs the first backoff step (0.8 s); the event proves the server back,
    # so the next failure starts the backoff over.
    assert clock.sleeps == [1.0, 0.8, 1.6]


async def test_an_unexplained_watch_error_backs_off_then_relists_from_the_last_rv() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([], "10")
    lw.add_watch(event("ADDED", "a", "11"), ServerError(500, "InternalError", "boom"))
    lw.add_list([obj("a", "11")], "12")
    async with running(lw, clock, sink):
        pass
    assert lw.calls == [("list", "0"), ("watch", "10"), ("list", "11"), ("watch", "12")]
    assert clock.sleeps == [0.8]


async def test_a_failing_first_list_is_retried_at_zero_with_backoff() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list_error(connection_refused())
    lw.add_list_error(ServerError(500, "InternalError", "etcd down")).add_list([], "7")
    async with running(lw, clock, sink):
        pass
    assert lw.calls == [("list", "0"), ("list", "0"), ("list", "0"), ("watch", "7")]
    assert clock.sleeps == [0.8, 0.8]  # one step of each backoff: connection trouble, then a failed list


async def test_the_connection_backoff_doubles_to_two_seconds_and_restarts_once_the_server_answers() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([], "10")
    for _ in range(6):
        lw.add_watch_error(connection_refused())
    lw.add_watch(event("ADDED", "a", "11"), connection_refused())
    lw.add_watch_error(connection_refused())
    async with running(lw, clock, sink):
        pass
    assert clock.sleeps == [0.8, 1.6, 2.0, 2.0, 2.0, 2.0, 0.8, 1.6]


async def test_the_relist_backoff_doubles_to_thirty_seconds_and_resets_after_two_minutes_without_a_relist() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock)
    for _ in range(8):
        lw.add_list([], "10").add_watch(event("ADDED", "a", "11"), ServerError(500, "InternalError", "boom"))
    lw.add_list([], "10").add_watch(Pause(121.0), ServerError(500, "InternalError", "boom"))
    lw.add_list([], "10")
    async with running(lw, clock, sink):
        pass
    assert clock.sleeps == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 121.0, 0.8]


async def test_an_outage_does_not_slow_the_relist_after_it() -> None:
    # The connection backoff grows while the server is away; the 410 that greets the informer on its return
    # (the new server's watch cache starts after its resourceVersion) relists after the relist backoff's first
    # step, not after the outage's longest wait.
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([obj("a", "5")], "10")
    for _ in range(12):
        lw.add_watch_error(connection_refused())
    lw.add_watch_error(expired("10")).add_list([obj("a", "5"), obj("b", "30")], "31")
    async with running(lw, clock, sink):
        pass
    assert clock.sleeps == [0.8, 1.6, *[2.0] * 10, 0.8]
    assert sink.log[-1] == ("replace", "a,b", "31")


async def test_a_watch_the_server_closes_at_once_is_retried_at_most_once_a_second() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([], "10")
    watch_times: list[float] = []
    scripted_watch = lw.watch

    def timed_watch(resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        watch_times.append(clock.now())
        return scripted_watch(resource_version, timeout_seconds)

    for _ in range(30):
        lw.add_watch()  # ends cleanly, at once, without an event
    reflector = Reflector(lw.list, timed_watch, sink, name="closing", clock=clock, rng=NoJitter())
    task = asyncio.create_task(reflector.run())
    try:
        await step_until_exhausted(lw, clock)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    elapsed = watch_times[-1] - watch_times[0]
    assert len(watch_times) == 31
    assert len(watch_times) - 1 <= elapsed, f"{len(watch_times)} watches in {elapsed:.1f} s"
    assert clock.sleeps[:4] == [0.8, 1.6, 2.0, 2.0]


async def test_a_short_watch_that_delivered_an_event_or_a_long_quiet_one_is_reopened_at_once() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([], "10")
    lw.add_watch(event("ADDED", "a", "11"))  # within a second, but an event: a healthy watch
    lw.add_watch(Pause(1.0))  # no event, but it lasted a second
    async with running(lw, clock, sink):
        pass
    assert lw.calls == [("list", "0"), ("watch", "10"), ("watch", "11"), ("watch", "11")]
    assert clock.sleeps == [1.0]  # the Pause itself: no backoff


async def test_backoff_jitter_stretches_each_wait_by_up_to_its_own_length() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock)
    for _ in range(4):
        lw.add_list([], "10").add_watch_error(ServerError(500, "InternalError", "boom"))
    reflector = Reflector(lw.list, lw.watch, sink, name="jitter", clock=clock, rng=random.Random(7))
    task = asyncio.create_task(reflector.run())
    try:
        await step_until_exhausted(lw, clock)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for wait, base in zip(clock.sleeps, [0.8, 1.6, 3.2, 6.4], strict=True):
        assert base <= wait <= 2 * base
    assert len(set(clock.sleeps)) == 4


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_watch_timeouts_are_random_between_five_and_ten_minutes(seed: int) -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list([], "1")
    for _ in range(20):
        lw.add_watch(bookmark("1"))
    reflector = Reflector(lw.list, lw.watch, sink, name="t", clock=clock, rng=random.Random(seed))
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(lw.exhausted.wait(), 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert all(300 <= t < 600 for t in lw.watch_timeouts)
    assert len(set(lw.watch_timeouts)) > 5


def not_served() -> NotFound:
    return NotFound(404, "NotFound", "the server could not find the requested resource")


async def test_a_resource_not_served_is_reported_at_each_failed_list_and_cleared_by_the_list_that_succeeds() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    reports: list[str | None] = []
    lw = ScriptedListWatch(clock).add_list_error(not_served()).add_list_error(not_served())
    lw.add_list_error(Forbidden(403, "Forbidden", "cannot list")).add_list([obj("a", "5")], "7")
    reflector = Reflector(
        lw.list,
        lw.watch,
        sink,
        name="crd",
        clock=clock,
        rng=NoJitter(),
        on_problem=lambda exc: reports.append(type(exc).__name__ if exc else None),
    )
    task = asyncio.create_task(reflector.run())
    with capture_logs() as logs:
        try:
            await step_until_exhausted(lw, clock)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert reports == ["NotFound", "NotFound", "Forbidden", None]
    assert lw.calls == [("list", "0"), ("list", "0"), ("list", "0"), ("list", "0"), ("watch", "7")]
    assert clock.sleeps == [0.8, 1.6, 3.2]  # the relist backoff: the server is fine, a person has to act
    assert [log for log in logs if log["log_level"] == "error"] == []  # the receiver logs it, once
    assert sink.log == [("replace", "a", "7")]


async def test_without_a_problem_receiver_a_resource_not_served_is_logged_as_an_error() -> None:
    clock, sink = RecordingClock(), RecordingSink()
    lw = ScriptedListWatch(clock).add_list_error(not_served()).add_list([], "7")
    with capture_logs() as logs:
        async with running(lw, clock, sink):
            pass
    assert [log["event"] for log in logs if log["log_level"] == "error"] == ["list and watch failed"]
