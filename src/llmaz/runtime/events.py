"""Kubernetes Events about objects, written in the background so a reconcile never waits on them.

Why `events.k8s.io/v1` rather than core/v1: it is what controller-runtime's current recorder writes, it has
first-class aggregation (`series.count` / `series.lastObservedTime`) and reporting fields
(`reportingController`, `reportingInstance`), and the API server serves the same Events through core/v1
too, so `kubectl describe` still lists them under the object.

Invariants:
- `EventRecorder.event` never blocks and never raises for delivery reasons: the event is queued, or dropped
  and counted (queue full, or the per-object spam filter says no).
- One sender task writes events in order. An event isomorphic to one written within `series_window`
  (same object, type, reason, action, note and reporter) increments that Event's series with a patch instead
  of creating a new object.
- Spam filter (client-go's numbers): per object a token bucket of 25, refilled one per 300 s.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from llmaz.runtime.client.client import Client
from llmaz.runtime.client.errors import ApiConnectionError, ApiError, NotFound, ServerError
from llmaz.runtime.client.throttle import TokenBucket
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.log import get_logger
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import Resource
from llmaz.runtime.runnable import grace_remains
from llmaz.runtime.timestamp import micro_time

EVENTS = Resource("events.k8s.io", "v1", "events", "Event", namespaced=True)
# Events live in the namespace of the object they are about; a repeated one is patched as a series.
RBAC_RULES = (allow(EVENTS, "create", "patch"),)
NORMAL = "Normal"
WARNING = "Warning"

DROPPED_TOTAL = Counter(
    "event_recorder_dropped_events_total",
    "Events not written, by reason (queue_full, rate_limited, write_failed).",
    ["reason"],
    registry=REGISTRY,
)

Obj = dict[str, Any]


@dataclass(slots=True)
class _Series:
    name: str
    namespace: str
    count: int
    last_seen: float  # monotonic


@dataclass(frozen=True, slots=True)
class _Pending:
    regarding: Obj
    namespace: str
    type: str
    reason: str
    action: str
    note: str
    controller: str
    instance: str

    @property
    def key(self) -> tuple[str, ...]:
        ref = self.regarding
        ident = ref.get("uid") or f"{ref.get('kind')}/{ref.get('namespace')}/{ref.get('name')}"
        return (ident, self.type, self.reason, self.action, self.note, self.controller, self.instance)


def object_reference(obj: Obj) -> Obj:
    """The `regarding` reference of an object dict."""
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: v for k, v in ref.items() if v}


class EventBroadcaster:
    """The queue, spam filter, aggregation cache and sender task shared by every `EventRecorder`.

    A Runnable (not leader-elected). Options: `queue_size` (default 1000), `series_window` (default 360 s:
    an isomorphic event after that starts a new Event), `burst`/`refill_seconds` (25 / 300 s per object),
    `cache_size` (default 4096 objects and series remembered, least recently used evicted).
    """

    needs_leader_election = False

    def __init__(
        self,
        client: Client,
        *,
        clock: Clock = REAL_CLOCK,
        queue_size: int = 1000,
        series_window: float = 360.0,
        burst: int = 25,
        refill_seconds: float = 300.0,
        cache_size: int = 4096,
    ) -> None:
        self._client = client
        self._clock = clock
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._series_window = series_window
        self._burst = burst
        self._refill_qps = 1.0 / refill_seconds
        self._cache_size = cache_size
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._series: OrderedDict[tuple[str, ...], _Series] = OrderedDict()
        self.dropped = 0
        self._log = get_logger("llmaz.runtime.events")

    def recorder(self, reporting_controller: str, reporting_instance: str | None = None) -> EventRecorder:
        instance = reporting_instance or f"{reporting_controller}-{socket.gethostname()}"
        return EventRecorder(self, reporting_controller, instance[:128])

    def submit(self, pending: _Pending) -> None:
        ident = pending.key[0]
        bucket = self._buckets.get(ident)
        if bucket is None:
            bucket = self._buckets[ident] = TokenBucket(self._refill_qps, self._burst, self._clock)
            _trim(self._buckets, self._cache_size)
        self._buckets.move_to_end(ident)
        if not bucket.try_take():
            self._drop("rate_limited")
            return
        try:
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            self._drop("queue_full")

    def _drop(self, reason: str) -> None:
        self.dropped += 1
        DROPPED_TOTAL.labels(reason).inc()

    async def run(self) -> None:
        writing: _Pending | None = None
        try:
            while True:
                writing = await self._queue.get()
                await self._write(writing)
                writing = None
        except asyncio.CancelledError:
            if grace_remains():
                # Best effort: what was queued (or being written) when the stop came is still written.
                if writing is not None:
                    await self._write(writing)
                while not self._queue.empty():
                    await self._write(self._queue.get_nowait())
            raise

    async def _write(self, pending: _Pending) -> None:
        for attempt in range(3):
            try:
                await self._write_once(pending)
                return
            except (ServerError, ApiConnectionError) as exc:
                self._log.debug("event write failed", attempt=attempt, error=str(exc))
                await self._clock.sleep(1.0 * (attempt + 1))
            except ApiError as exc:
                self._log.info("event rejected", reason=pending.reason, error=str(exc))
                break
        self._drop("write_failed")

    async def _write_once(self, pending: _Pending) -> None:
        now = self._clock.now()
        series = self._series.get(pending.key)
        if series is not None and now - series.last_seen <= self._series_window:
            series.count += 1
            series.last_seen = now
            body = {"series": {"count": series.count, "lastObservedTime": micro_time(self._clock.wall())}}
            try:
                await self._client.patch(EVENTS, series.name, body, series.namespace)
                return
            except NotFound:
                pass  # the Event expired (TTL) or was deleted: start a new one
        created = await self._client.create(EVENTS, self._new_event(pending), pending.namespace)
        self._series[pending.key] = _Series(created["metadata"]["name"], pending.namespace, 1, now)
        self._series.move_to_end(pending.key)
        _trim(self._series, self._cache_size)

    def _new_event(self, p: _Pending) -> Obj:
        wall = self._clock.wall()
        suffix = f"{int(wall.timestamp() * 1e9):x}{random.getrandbits(16):04x}"
        return {
            "apiVersion": EVENTS.api_version,
            "kind": EVENTS.kind,
            "metadata": {
                "name": f"{p.regarding.get('name', 'event')[:200]}.{suffix}",
                "namespace": p.namespace,
            },
            "eventTime": micro_time(wall),
            "regarding": p.regarding,
            "type": p.type,
            "reason": p.reason,
            "action": p.action,
            "note": p.note[:1024],
            "reportingController": p.controller,
            "reportingInstance": p.instance,
        }


class EventRecorder:
    """Records Events for one reporting controller; get one from `EventBroadcaster.recorder(name)`."""

    def __init__(self, broadcaster: EventBroadcaster, controller: str, instance: str) -> None:
        self._broadcaster = broadcaster
        self.reporting_controller = controller
        self.reporting_instance = instance

    def event(self, obj: Obj, type_: str, reason: str, note: str, *, action: str | None = None) -> None:
        """Queue an Event about `obj` (`type_` is NORMAL or WARNING; `action` defaults to `reason`)."""
        if type_ not in (NORMAL, WARNING):
            raise ValueError(f"event type must be {NORMAL} or {WARNING}, not {type_!r}")
        regarding = object_reference(obj)
        self._broadcaster.submit(
            _Pending(
                regarding=regarding,
                namespace=regarding.get("namespace") or "default",
                type=type_,
                reason=reason,
                action=action or reason,
                note=note,
                controller=self.reporting_controller,
                instance=self.reporting_instance,
            )
        )


def _trim(cache: OrderedDict[Any, Any], size: int) -> None:
    while len(cache) > size:
        cache.popitem(last=False)
