"""The controller loop's outcomes, with an in-memory informer and a FakeClock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from llmaz.runtime.client.errors import Conflict
from llmaz.runtime.controller import (
    CacheSyncTimeoutError,
    Controller,
    ControllerBuilder,
    Request,
    Result,
    TerminalError,
)
from llmaz.runtime.resource import Resource
from llmaz.runtime.runnable import cancel_without_grace
from llmaz_dev.testing import FakeClock, FakeInformer, FakeInformerSource
from llmaz_dev.testing.runnables import started
from llmaz_dev.testing.waiting import eventually

from .helpers import sample, settle

MODEL = Resource("llmaz.io", "v1alpha1", "openmodels", "OpenModel", namespaced=True)

Outcome = Result | Exception | Callable[[], Any]


@dataclass
class Call:
    request: Request
    at: float
    log_context: dict[str, Any]


@dataclass
class ScriptedReconciler:
    """Returns (or raises) the scripted outcomes in order, then succeeds; records every call."""

    clock: FakeClock
    script: list[Outcome] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)

    async def reconcile(self, request: Request) -> Result:
        self.calls.append(Call(request, self.clock.now(), structlog.contextvars.get_contextvars()))
        outcome = self.script.pop(0) if self.script else Result()
        if isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, Result):
            return outcome
        return outcome()  # type: ignore[no-any-return]


def model(name: str, generation: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "generation": generation}}


def build(
    name: str, reconciler: Any, clock: FakeClock, workers: int = 1, reconcile_timeout: float = 0.0
) -> tuple[Controller, FakeInformer]:
    """A controller over one FakeInformer; no reconcile timeout unless asked (its timer is one more sleeper on the
    clock, which the backoff tests count)."""
    source = FakeInformerSource()
    controller = (
        ControllerBuilder(name)
        .for_(MODEL)
        .with_options(max_concurrent_reconciles=workers, clock=clock, reconcile_timeout=reconcile_timeout)
        .build(reconciler, source)
    )
    informer = source.informer_for(MODEL)
    informer.mark_synced()
    return controller, informer


async def fail_once_then_retry(clock: FakeClock, reconciler: ScriptedReconciler) -> None:
    """Wait for the first reconcile, step the fake clock past the first backoff (5 ms), wait for the retry."""
    await eventually(lambda: len(reconciler.calls) == 1)
    await clock.wait_for_sleepers()
    clock.step(0.005)
    await eventually(lambda: len(reconciler.calls) == 2)


def reconciles(controller: Controller, result: str) -> float | None:
    return sample("controller_runtime_reconcile_total", controller=controller.name, result=result)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    return str(request.node.name)


async def test_success_reconciles_once_and_forgets_the_key(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock)
    controller, informer = build(name, reconciler, clock)
    async with started(controller):
        informer.add(model("a"))
        await eventually(lambda: len(reconciler.calls) == 1)
        clock.step(2000.0)
        await settle()
    assert [c.request for c in reconciler.calls] == [Request("ns", "a")]
    assert controller.queue.num_requeues(Request("ns", "a")) == 0
    assert reconciles(controller, "success") == 1


async def test_an_error_is_retried_with_growing_backoff_until_success(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock, [RuntimeError("boom")] * 3)
    controller, informer = build(name, reconciler, clock)
    start = clock.now()
    with capture_logs() as logs:
        async with started(controller):
            informer.add(model("a"))
            for calls, backoff in [(1, 0.005), (2, 0.01), (3, 0.02)]:
                await eventually(lambda n=calls: len(reconciler.calls) == n)  # type: ignore[misc]
                await clock.wait_for_sleepers()
                clock.step(backoff)
            await eventually(lambda: len(reconciler.calls) == 4)
    offsets = [round(c.at - start, 6) for c in reconciler.calls]
    assert offsets == [0.0, 0.005, 0.015, 0.035]
    assert controller.queue.num_requeues(Request("ns", "a")) == 0
    assert reconciles(controller, "error") == 3
    assert reconciles(controller, "success") == 1
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 3
    errors = [log for log in logs if log["event"] == "Reconciler error"]
    assert len(errors) == 3
    assert all(log["log_level"] == "error" and log["exc_info"] for log in errors)


async def test_requeue_after_resets_the_backoff_and_reconciles_after_exactly_that_delay(
    clock: FakeClock, name: str
) -> None:
    reconciler = ScriptedReconciler(clock, [RuntimeError("boom"), Result(requeue_after=30.0)])
    controller, informer = build(name, reconciler, clock)
    start = clock.now()
    async with started(controller):
        informer.add(model("a"))
        await fail_once_then_retry(clock, reconciler)
        assert controller.queue.num_requeues(Request("ns", "a")) == 0
        requeued_at = clock.now()
        await clock.wait_for_sleepers()
        clock.set(requeued_at + 29.9)
        await settle()
        assert len(reconciler.calls) == 2
        clock.set(requeued_at + 30.0)
        await eventually(lambda: len(reconciler.calls) == 3)
    assert reconciler.calls[2].at - start == pytest.approx(30.005)
    assert reconciles(controller, "requeue_after") == 1


async def test_requeue_retries_with_the_rate_limiters_backoff(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock, [Result(requeue=True), Result(requeue=True)])
    controller, informer = build(name, reconciler, clock)
    async with started(controller):
        informer.add(model("a"))
        await eventually(lambda: len(reconciler.calls) == 1)
        await clock.wait_for_sleepers()
        assert controller.queue.num_requeues(Request("ns", "a")) == 1
        clock.step(0.005)
        await eventually(lambda: len(reconciler.calls) == 2)
        await clock.wait_for_sleepers()
        assert clock.next_deadline() == pytest.approx(clock.now() + 0.01)
        clock.step(0.01)
        await eventually(lambda: len(reconciler.calls) == 3)
    assert controller.queue.num_requeues(Request("ns", "a")) == 0
    assert reconciles(controller, "requeue") == 2
    assert reconciles(controller, "success") == 1


async def test_a_terminal_error_is_counted_but_not_retried(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock, [TerminalError("invalid spec")])
    controller, informer = build(name, reconciler, clock)
    async with started(controller):
        informer.add(model("a"))
        await eventually(lambda: len(reconciler.calls) == 1)
        clock.step(2000.0)
        await settle()
        assert len(reconciler.calls) == 1
        assert controller.queue.num_requeues(Request("ns", "a")) == 0
        informer.update(model("a", generation=2))  # the next event reconciles it again
        await eventually(lambda: len(reconciler.calls) == 2)
    assert sample("controller_runtime_terminal_reconcile_errors_total", controller=name) == 1
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 1
    assert reconciles(controller, "error") == 1


async def test_no_exception_from_a_reconciler_stops_the_worker(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock, [KeyError("x"), lambda: None, TerminalError("no"), Result()])
    controller, informer = build(name, reconciler, clock)
    async with started(controller):
        for item in ["a", "b", "c", "d"]:
            informer.add(model(item))
        await eventually(lambda: len(reconciler.calls) == 4)
    assert [c.request.name for c in reconciler.calls] == ["a", "b", "c", "d"]
    assert reconciles(controller, "error") == 3  # returning None instead of a Result is an error too


async def test_each_reconcile_runs_in_its_own_log_context(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock)
    controller, informer = build(name, reconciler, clock)
    async with started(controller):
        informer.add(model("a"))
        informer.add(model("b"))
        await eventually(lambda: len(reconciler.calls) == 2)
    contexts = [c.log_context for c in reconciler.calls]
    assert [(c["controller"], c["kind"], c["namespace"], c["name"]) for c in contexts] == [
        (name, "OpenModel", "ns", "a"),
        (name, "OpenModel", "ns", "b"),
    ]
    ids = [c["reconcile_id"] for c in contexts]
    assert len(set(ids)) == 2
    assert all(isinstance(i, str) and len(i) == 12 for i in ids)


async def test_reconcile_metrics_add_up(clock: FakeClock, name: str) -> None:
    script: list[Outcome] = [
        RuntimeError("x"),
        TerminalError("y"),
        Result(requeue=True),
        Result(requeue_after=9),
    ]
    reconciler = ScriptedReconciler(clock, script)
    controller, informer = build(name, reconciler, clock, workers=3)
    async with started(controller):
        await eventually(lambda: sample("controller_runtime_max_concurrent_reconciles", controller=name) == 3)
        assert reconciles(controller, "requeue_after") == 0  # series exist at zero before any reconcile
        for item in ["a", "b", "c", "d", "e"]:
            informer.add(model(item))
        await eventually(lambda: len(reconciler.calls) == 5)
        await settle()
    results = {r: reconciles(controller, r) for r in ("success", "error", "requeue", "requeue_after")}
    assert results == {"success": 1, "error": 2, "requeue": 1, "requeue_after": 1}
    assert sample("controller_runtime_reconcile_time_seconds_count", controller=name) == 5
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 2
    assert sample("controller_runtime_terminal_reconcile_errors_total", controller=name) == 1
    assert sample("controller_runtime_reconcile_panics_total", controller=name) == 0
    assert sample("controller_runtime_reconcile_timeouts_total", controller=name) == 0
    assert sample("controller_runtime_active_workers", controller=name) == 0
    assert sample("workqueue_adds_total", name=name, controller=name) == 5


class BlockingReconciler:
    """Each reconcile waits until the test releases it; records starts, finishes and overlaps."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.finished: list[str] = []
        self.in_flight: set[str] = set()
        self.overlaps = 0
        self.max_in_flight = 0

    async def reconcile(self, request: Request) -> Result:
        if request.name in self.in_flight:
            self.overlaps += 1
        self.in_flight.add(request.name)
        self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
        self.started.append(request.name)
        try:
            await self.release.wait()
        finally:
            self.in_flight.discard(request.name)
        self.finished.append(request.name)
        return Result()


async def test_a_key_is_never_reconciled_concurrently_even_with_many_workers(clock: FakeClock, name: str) -> None:
    reconciler = BlockingReconciler()
    controller, informer = build(name, reconciler, clock, workers=4)
    async with started(controller):
        informer.add(model("a"))
        informer.add(model("b"))
        await eventually(lambda: len(reconciler.started) == 2)
        informer.update(model("a", generation=2))  # arrives while "a" is being reconciled
        await settle()
        assert reconciler.started == ["a", "b"]
        assert reconciler.max_in_flight == 2
        reconciler.release.set()
        await eventually(lambda: len(reconciler.finished) == 3)
    assert reconciler.started == ["a", "b", "a"]
    assert reconciler.overlaps == 0


async def test_stopping_drains_in_flight_reconciles_and_drops_queued_keys(clock: FakeClock, name: str) -> None:
    reconciler = BlockingReconciler()
    controller, informer = build(name, reconciler, clock, workers=1)
    task = asyncio.create_task(controller.run())
    informer.add(model("in-flight"))
    informer.add(model("queued"))
    await eventually(lambda: reconciler.started == ["in-flight"])
    task.cancel()
    await settle()
    assert not task.done()  # waiting for the in-flight reconcile
    informer.add(model("late"))  # ignored: the queue is shutting down
    reconciler.release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=5)
    assert reconciler.finished == ["in-flight"]
    assert controller.queue.shutting_down


async def test_workers_start_only_after_the_informers_sync(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock)
    source = FakeInformerSource()
    controller = ControllerBuilder(name).for_(MODEL).with_options(clock=clock).build(reconciler, source)
    informer = source.informer_for(MODEL)
    async with started(controller):
        informer.add(model("a"))
        await settle()
        assert reconciler.calls == []
        informer.mark_synced()
        await eventually(lambda: len(reconciler.calls) == 1)


async def test_run_fails_when_the_informers_do_not_sync_in_time(clock: FakeClock, name: str) -> None:
    source = FakeInformerSource()
    controller = (
        ControllerBuilder(name)
        .for_(MODEL)
        .with_options(clock=clock, cache_sync_timeout=60.0)
        .build(ScriptedReconciler(clock), source)
    )
    task = asyncio.create_task(controller.run())
    await clock.wait_for_sleepers()
    clock.step(60.0)
    with pytest.raises(CacheSyncTimeoutError):
        await asyncio.wait_for(task, timeout=5)


async def test_stopping_before_sync_returns_without_reconciling(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock)
    source = FakeInformerSource()
    controller = ControllerBuilder(name).for_(MODEL).with_options(clock=clock).build(reconciler, source)
    source.informer_for(MODEL).add(model("a"))
    async with started(controller):
        await settle()
    assert reconciler.calls == []


@pytest.mark.parametrize("reconcile_timeout", [0.0, 60.0])
@pytest.mark.parametrize("grace_ends", ["at once", "while draining"])
async def test_stopping_without_grace_cancels_in_flight_reconciles(
    clock: FakeClock, name: str, reconcile_timeout: float, grace_ends: str
) -> None:
    reconciler = BlockingReconciler()
    controller, informer = build(name, reconciler, clock, reconcile_timeout=reconcile_timeout)
    task = asyncio.create_task(controller.run())
    informer.add(model("a"))
    await eventually(lambda: reconciler.started == ["a"])
    if grace_ends == "at once":
        cancel_without_grace(task)  # a lost Lease
    else:
        task.cancel()
        await settle()
        assert not task.done()  # draining: waiting for the in-flight reconcile
        task.cancel()  # the graceful-shutdown period is over
    with pytest.raises(asyncio.CancelledError):
        await task
    assert reconciler.in_flight == set()
    assert reconciler.finished == []
    assert reconciles(controller, "error") == 0  # a cancellation is not an error


async def test_a_controller_runs_only_once(clock: FakeClock, name: str) -> None:
    controller, _ = build(name, ScriptedReconciler(clock), clock)
    async with started(controller):
        await settle()
    with pytest.raises(RuntimeError, match="already started"):
        await controller.run()


async def test_a_conflict_is_retried_and_logged_at_info_without_a_traceback(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock, [Conflict(409, "Conflict", "the object has been modified")])
    controller, informer = build(name, reconciler, clock)
    with capture_logs() as logs:
        async with started(controller):
            informer.add(model("a"))
            await fail_once_then_retry(clock, reconciler)
    assert reconciles(controller, "error") == 1
    assert reconciles(controller, "success") == 1
    assert [log for log in logs if log["log_level"] == "error"] == []
    (conflict,) = [log for log in logs if log["event"] == "Reconcile conflict, requeued"]
    assert conflict["log_level"] == "info"
    assert "exc_info" not in conflict
    assert "the object has been modified" in conflict["error"]


class HangingReconciler:
    """The first reconcile waits on a call that never answers; later ones succeed at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.cancelled = 0

    async def reconcile(self, request: Request) -> Result:
        self.calls += 1
        if self.calls == 1:
            try:
                await self.call_that_never_answers()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return Result()

    async def call_that_never_answers(self) -> None:
        await asyncio.Event().wait()


async def test_a_reconcile_past_its_timeout_is_cancelled_counted_as_a_timeout_and_retried(
    clock: FakeClock, name: str
) -> None:
    reconciler = HangingReconciler()
    controller, informer = build(name, reconciler, clock, reconcile_timeout=30.0)
    start = clock.now()
    with capture_logs() as logs:
        async with started(controller):
            informer.add(model("a"))
            await eventually(lambda: reconciler.calls == 1)
            await clock.wait_for_sleepers()  # the reconcile's deadline
            clock.set(start + 29.9)
            await settle()
            assert reconciler.cancelled == 0
            clock.set(start + 30.0)
            await eventually(lambda: reconciler.cancelled == 1)
            await eventually(lambda: controller.queue.num_requeues(Request("ns", "a")) == 1)  # rate-limited retry
            await clock.wait_for_sleepers()
            clock.step(0.005)
            await eventually(lambda: reconciler.calls == 2)
            await settle()
    assert reconciles(controller, "error") == 1
    assert reconciles(controller, "success") == 1
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 1
    assert sample("controller_runtime_reconcile_timeouts_total", controller=name) == 1
    assert sample("controller_runtime_terminal_reconcile_errors_total", controller=name) == 0
    (error,) = [log for log in logs if log["event"] == "Reconciler error"]
    assert error["log_level"] == "error"
    assert "within 30s" in error["error"]
    # Innermost first: the Event it waits on, the hung call, the reconcile.
    assert [frame.split(" ")[0] for frame in error["stuck_at"].split(" <- ")] == [
        "wait",
        "call_that_never_answers",
        "reconcile",
    ]


async def test_a_reconcile_within_its_timeout_is_not_affected(clock: FakeClock, name: str) -> None:
    reconciler = ScriptedReconciler(clock, [Result(), RuntimeError("boom")])
    controller, informer = build(name, reconciler, clock, reconcile_timeout=30.0)
    async with started(controller):
        informer.add(model("a"))
        await eventually(lambda: len(reconciler.calls) == 1)
        informer.update(model("a", generation=2))
        await eventually(lambda: len(reconciler.calls) == 2)
        await settle()
        assert clock.sleepers == 1  # the retry's backoff; no deadline is left behind
    assert reconciles(controller, "success") == 1
    assert reconciles(controller, "error") == 1
    assert sample("controller_runtime_reconcile_timeouts_total", controller=name) == 0


async def test_a_zero_reconcile_timeout_lets_a_reconcile_run_as_long_as_it_takes(clock: FakeClock, name: str) -> None:
    reconciler = HangingReconciler()
    controller, informer = build(name, reconciler, clock, reconcile_timeout=0.0)
    task = asyncio.create_task(controller.run())
    informer.add(model("a"))
    await eventually(lambda: reconciler.calls == 1)
    clock.step(10_000.0)
    await settle()
    assert reconciler.cancelled == 0
    assert clock.sleepers == 0
    cancel_without_grace(task)  # no drain: the reconcile would never finish
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sample("controller_runtime_reconcile_timeouts_total", controller=name) == 0
