"""Pure rules of scale to zero and back: which Playgrounds opted in, when one is idle, what the patches are.

A Playground opts in with the annotation `llmaz.io/scale-to-zero-after: <duration>` (`90s`, `5m`, `1h30m`, or
plain seconds; the grammar is `llmaz.apis.scaletozero`'s, which admission checks). Then:
- a request for its model while it has no ready endpoint and `spec.replicas` is 0 scales it to 1 (the gateway
  holds the request until an endpoint is ready);
- once no request for it has arrived for that long, it is scaled to 0.
Every request counts: a replica knows the last time a request of the model started or ended through it, and the
last request time is shared by every gateway replica through the annotation `llmaz.io/last-request-time`
(RFC 3339, UTC), which each replica moves to its own last request at most every `touch_interval(idle)`, so a
replica that sees no traffic does not put to sleep a model that another one is serving. The shared time may lag
a replica's by up to that interval.

A Playground with an `elasticConfig` (an HPA scales it, and llmaz's HPA has `minReplicas` >= 1) is woken but never
put to sleep: the two would fight. One scaled by llmaz-gateway's autoscaler (`scaleTrigger.requests`) is put to
sleep all the same: the autoscaler leaves an opted-in Playground at zero until a request wakes it.

Nothing here does I/O or reads a clock: `now` is passed in, in seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from llmaz.apis import constants as c
from llmaz.runtime.timestamp import parse_timestamp

Obj = dict[str, Any]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def replicas(playground: Obj) -> int:
    value = _mapping(playground.get("spec")).get("replicas", 1)
    return value if isinstance(value, int) else 1


def autoscaled(playground: Obj) -> bool:
    """Scaled by an HPA: it has an `elasticConfig` whose trigger is not llmaz-gateway's autoscaler."""
    elastic = _mapping(_mapping(playground.get("spec")).get("elasticConfig"))
    return bool(elastic) and _mapping(elastic.get("scaleTrigger")).get("requests") is None


def _timestamp(value: Any) -> float | None:
    parsed = parse_timestamp(value)
    return None if parsed is None else parsed.timestamp()


def last_request(playground: Obj) -> float | None:
    annotations = _mapping(_mapping(playground.get("metadata")).get("annotations"))
    return _timestamp(annotations.get(c.LAST_REQUEST_TIME_ANNOTATION))


def last_activity(playground: Obj) -> float:
    """The later of the last request time and the Playground's creation (0 when neither is known)."""
    meta = _mapping(playground.get("metadata"))
    created = _timestamp(meta.get("creationTimestamp")) or 0.0
    return max(last_request(playground) or 0.0, created)


def touch_interval(idle: float) -> float:
    """How stale the shared last request time may get while a replica serves the model."""
    return max(idle / 4, 2.0)


def needs_touch(playground: Obj, seen: float, idle: float) -> bool:
    """Whether a request seen at `seen` should move the shared last request time (it is that much older)."""
    return seen - (last_request(playground) or 0.0) >= touch_interval(idle)


def should_sleep(playground: Obj, now: float, idle: float, in_flight: int, seen: float | None = None) -> bool:
    """Scale to zero: running, not scaled by an HPA, nothing in flight here, and idle for `idle` seconds everywhere (the
    shared time, and `seen`, the last request this replica saw start or end)."""
    if in_flight > 0 or replicas(playground) == 0 or autoscaled(playground):
        return False
    return now - max(last_activity(playground), seen or 0.0) >= idle


def format_time(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def touch_patch(now: float) -> Obj:
    """Merge patch recording a request at `now` on the Playground."""
    return {"metadata": {"annotations": {c.LAST_REQUEST_TIME_ANNOTATION: format_time(now)}}}


def scale_replicas(scale: Obj) -> int:
    """The count of a Scale object; autoscaling/v1 omits a zero `spec.replicas`."""
    value = _mapping(scale.get("spec")).get("replicas", 0)
    return value if isinstance(value, int) else 0


def scale_patch(scale: Obj, wanted: int) -> Obj:
    """Merge patch of the Scale subresource that applies only if the object is still as `scale` was read: the API
    server refuses a stale resourceVersion with a 409, so of many replicas racing to make one change, exactly one
    succeeds."""
    version = _mapping(scale.get("metadata")).get("resourceVersion")
    return {"metadata": {"resourceVersion": version}, "spec": {"replicas": wanted}}
