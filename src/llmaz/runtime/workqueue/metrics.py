"""Work queue metrics under controller-runtime's exact names, labels, help texts and buckets.

Both the `name` and `controller` labels carry the queue's name (a controller's queue is named after the
controller); `workqueue_depth` also has `priority`, always "" because this is the classic FIFO queue, not a
priority queue. A queue without a name records nothing.

`unfinished_work_seconds` and `longest_running_processor_seconds` are computed when scraped, from the
queue's injected clock, instead of being refreshed by a 500 ms ticker: the value is the same, only fresher,
and there is no background task to manage.

`retries_total` counts every `add_after` call, zero delays included, as client-go's delaying queue does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram

from llmaz.runtime.clock import Clock
from llmaz.runtime.metrics import REGISTRY

# ExponentialBuckets(10e-9, 10, 12): 1e-8 s .. 1e3 s.
DURATION_BUCKETS = tuple(float(f"1e{exponent}") for exponent in range(-8, 4))

_LABELS = ("name", "controller")

DEPTH = Gauge("workqueue_depth", "Current depth of workqueue", [*_LABELS, "priority"], registry=REGISTRY)
ADDS = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", _LABELS, registry=REGISTRY)
QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    _LABELS,
    buckets=DURATION_BUCKETS,
    registry=REGISTRY,
)
WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    _LABELS,
    buckets=DURATION_BUCKETS,
    registry=REGISTRY,
)
UNFINISHED_WORK = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. "
    "Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate "
    "at which this increases.",
    _LABELS,
    registry=REGISTRY,
)
LONGEST_RUNNING_PROCESSOR = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    _LABELS,
    registry=REGISTRY,
)
RETRIES = Counter("workqueue_retries_total", "Total number of retries handled by workqueue", _LABELS, registry=REGISTRY)


class QueueMetrics(Protocol):
    """Hooks a queue calls; `depth` is the number of dirty items (queued, or re-added while processing)."""

    def added(self, item: Hashable, depth: int) -> None: ...

    def got(self, item: Hashable, depth: int) -> None: ...

    def done(self, item: Hashable) -> None: ...

    def retried(self) -> None: ...


class NoQueueMetrics:
    """What an unnamed queue records: nothing."""

    def added(self, item: Hashable, depth: int) -> None:
        pass

    def got(self, item: Hashable, depth: int) -> None:
        pass

    def done(self, item: Hashable) -> None:
        pass

    def retried(self) -> None:
        pass


class PrometheusQueueMetrics:
    """Records one named queue's series.

    Invariants: `_added_at` holds items added and not yet handed out (the start of queue_duration);
    `_started_at` holds items handed out and not yet done (the start of work_duration).
    """

    def __init__(self, name: str, clock: Clock) -> None:
        self._clock = clock
        self._added_at: dict[Hashable, float] = {}
        self._started_at: dict[Hashable, float] = {}
        self._depth = DEPTH.labels(name=name, controller=name, priority="")
        self._adds = ADDS.labels(name=name, controller=name)
        self._queue_duration = QUEUE_DURATION.labels(name=name, controller=name)
        self._work_duration = WORK_DURATION.labels(name=name, controller=name)
        self._retries = RETRIES.labels(name=name, controller=name)
        # The scrape-time callbacks hold the recorder weakly so a discarded queue can be collected.
        UNFINISHED_WORK.labels(name=name, controller=name).set_function(_weak(self, _unfinished_seconds))
        LONGEST_RUNNING_PROCESSOR.labels(name=name, controller=name).set_function(_weak(self, _longest_running_seconds))

    def added(self, item: Hashable, depth: int) -> None:
        self._adds.inc()
        self._depth.set(depth)
        self._added_at.setdefault(item, self._clock.now())

    def got(self, item: Hashable, depth: int) -> None:
        now = self._clock.now()
        self._depth.set(depth)
        self._started_at[item] = now
        added_at = self._added_at.pop(item, None)
        if added_at is not None:
            self._queue_duration.observe(now - added_at)

    def done(self, item: Hashable) -> None:
        started_at = self._started_at.pop(item, None)
        if started_at is not None:
            self._work_duration.observe(self._clock.now() - started_at)

    def retried(self) -> None:
        self._retries.inc()

    def in_flight_ages(self) -> list[float]:
        now = self._clock.now()
        # tuple() copies in one step, so a scrape from another thread never sees the dict change size.
        return [now - started for started in tuple(self._started_at.values())]


def _unfinished_seconds(recorder: PrometheusQueueMetrics) -> float:
    return sum(recorder.in_flight_ages())


def _longest_running_seconds(recorder: PrometheusQueueMetrics) -> float:
    return max(recorder.in_flight_ages(), default=0.0)


def _weak(recorder: PrometheusQueueMetrics, compute: Callable[[PrometheusQueueMetrics], float]) -> Callable[[], float]:
    ref = weakref.ref(recorder)

    def value() -> float:
        alive = ref()
        return compute(alive) if alive is not None else 0.0

    return value


def queue_metrics(name: str | None, clock: Clock) -> QueueMetrics:
    return PrometheusQueueMetrics(name, clock) if name else NoQueueMetrics()
