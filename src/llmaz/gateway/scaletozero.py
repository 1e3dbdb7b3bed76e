"""Pure rules of scale to zero and back: which Playgrounds opted in, when one is idle, what the patches are.

A Playground opts in with the annotation `llmaz.io/scale-to-zero-after: <duration>` (`90s`, `5m`, `1h30m`, or
plain seconds). Then:
- a request for its model while it has no ready endpoint and `spec.replicas` is 0 scales it to 1 (the gateway
  holds the request until an endpoint is ready);
- once no request for it has arrived for that long, it is scaled to 0.
The last request time is shared by every gateway replica through the annotation `llmaz.io/last-request-time`
(RFC 3339, UTC), which each replica refreshes at most every `touch_interval(idle)` while it serves the model, so
a replica that sees no traffic does not put to sleep a model that another one is serving.

A Playground with an `elasticConfig` (an HPA scales it, and llmaz's HPA has `minReplicas` >= 1) is woken but never
put to sleep: the two would fight.

Nothing here does I/O or reads a clock: `now` is passed in, in seconds since the epoch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

SCALE_TO_ZERO_AFTER = "llmaz.io/scale-to-zero-after"
LAST_REQUEST_TIME = "llmaz.io/last-request-time"
# Shortest idle time accepted: a model that sleeps sooner spends its life loading.
MIN_IDLE_SECONDS = 10.0
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_duration(text: str) -> float:
    """`90`, `90s`, `5m`, `1h30m` -> seconds; ValueError naming the accepted forms otherwise."""
    text = text.strip()
    if text.isdigit():
        seconds = float(text)
    else:
        match = _DURATION.match(text)
        if not text or match is None:
            raise ValueError(f"{text!r} is not a duration: use seconds or h/m/s units, e.g. 300, 90s, 5m, 1h30m")
        hours, minutes, secs = (int(group or 0) for group in match.groups())
        seconds = float(hours * 3600 + minutes * 60 + secs)
    if seconds < MIN_IDLE_SECONDS:
        raise ValueError(f"{text!r} is shorter than the minimum, {MIN_IDLE_SECONDS:.0f}s")
    return seconds


def idle_after(playground: Obj) -> float | None:
    """Seconds without a request after which the Playground sleeps; None when it has not opted in.

    Raises ValueError (naming the annotation) when the annotation is present but not a valid duration.
    """
    value = _mapping(_mapping(playground.get("metadata")).get("annotations")).get(SCALE_TO_ZERO_AFTER)
    if value is None:
        return None
    try:
        return parse_duration(str(value))
    except ValueError as err:
        raise ValueError(f"annotation {SCALE_TO_ZERO_AFTER}: {err}") from None


def replicas(playground: Obj) -> int:
    value = _mapping(playground.get("spec")).get("replicas", 1)
    return value if isinstance(value, int) else 1


def autoscaled(playground: Obj) -> bool:
    return bool(_mapping(playground.get("spec")).get("elasticConfig"))


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def last_request(playground: Obj) -> float | None:
    return _timestamp(_mapping(_mapping(playground.get("metadata")).get("annotations")).get(LAST_REQUEST_TIME))


def last_activity(playground: Obj) -> float:
    """The later of the last request time and the Playground's creation (0 when neither is known)."""
    meta = _mapping(playground.get("metadata"))
    created = _timestamp(meta.get("creationTimestamp")) or 0.0
    return max(last_request(playground) or 0.0, created)


def touch_interval(idle: float) -> float:
    """How stale the shared last request time may get while a replica serves the model."""
    return max(idle / 4, 2.0)


def needs_touch(playground: Obj, now: float, idle: float) -> bool:
    return now - (last_request(playground) or 0.0) >= touch_interval(idle)


def should_sleep(playground: Obj, now: float, idle: float, in_flight: int) -> bool:
    """Scale to zero: running, not autoscaled, nothing in flight here, and idle for `idle` seconds everywhere."""
    if in_flight > 0 or replicas(playground) == 0 or autoscaled(playground):
        return False
    return now - last_activity(playground) >= idle


def format_time(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def touch_patch(now: float) -> Obj:
    """Merge patch recording a request at `now` on the Playground."""
    return {"metadata": {"annotations": {LAST_REQUEST_TIME: format_time(now)}}}


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
