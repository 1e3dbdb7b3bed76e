"""The policy of llmaz-gateway's autoscaler for a Playground: `spec.elasticConfig.scaleTrigger.requests`.

One reading of the fields, shared by admission (which denies a bad value, naming the field and what it accepts) and
by the gateway (which reads objects stored before, or without, admission, and leaves such a Playground alone):
- `targetPerReplica`: a number greater than 0;
- `stableWindow`, `panicWindow`: durations in `llmaz.apis.duration`'s grammar, greater than 0, the panic window
  shorter than the stable window; `scaleDownDelay`: a duration, 0 or more;
- `panicThreshold`: a number greater than 1 (a threshold of 1 or less would panic at ordinary load);
- the bounds are `elasticConfig.minReplicas` (default 1) and `maxReplicas`, minReplicas below maxReplicas;
- `hpa` and `requests` are never set together: an HPA and the autoscaler would both write the Playground's
  replicas, each undoing the other.
Omitted fields take the CRD's defaults (`llmaz.apis.constants.AUTOSCALE_*`), which the API server fills in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from llmaz.apis import constants as c
from llmaz.apis.duration import parse_duration
from llmaz.apis.validation.field import FieldError, aggregate, forbidden, invalid

ELASTIC_PATH: Final = "spec.elasticConfig"
TRIGGER_PATH: Final = f"{ELASTIC_PATH}.scaleTrigger"
REQUESTS_PATH: Final = f"{TRIGGER_PATH}.requests"
DURATION_FORMS: Final = "a duration such as 30s, 5m, 1h30m or a number of seconds"
TARGET_RULE: Final = "must be a number greater than 0 (requests running plus waiting per replica)"
WINDOW_RULE: Final = f"must be {DURATION_FORMS}, greater than 0"
DELAY_RULE: Final = f"must be {DURATION_FORMS}, 0 or more"
PANIC_BELOW_STABLE: Final = "must be shorter than stableWindow"
BOUNDS_RULE: Final = "must be at least 1 and at most maxReplicas"
THRESHOLD_RULE: Final = "must be a number greater than 1 (a multiple of the current replicas' capacity)"
BOTH_TRIGGERS: Final = (
    "hpa and requests cannot be set together: an HPA and the autoscaler on the same Playground would both set its "
    "replicas, each undoing the other; keep one"
)


@dataclass(frozen=True, slots=True)
class AutoscalePolicy:
    """A Playground's autoscaling policy, durations in seconds."""

    target_per_replica: float
    stable_window: float
    panic_window: float
    panic_threshold: float
    scale_down_delay: float
    min_replicas: int
    max_replicas: int


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        seconds = parse_duration(str(value).strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def requests_trigger(playground: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Playground's `requests` trigger, or None when the autoscaler does not scale it."""
    trigger = _mapping(_mapping(_mapping(playground.get("spec")).get("elasticConfig")).get("scaleTrigger"))
    requests = trigger.get("requests")
    return requests if isinstance(requests, Mapping) else None


def policy_errors(elastic: Mapping[str, Any]) -> list[FieldError]:
    """What is wrong with the `requests` trigger of an `elasticConfig` (nothing when it has none).

    The bounds (`minReplicas` below `maxReplicas`) are the Playground validation's own rule, not repeated here.
    """
    return _read(elastic)[1]


def _field(requests: Mapping[str, Any], name: str, default: Any) -> Any:
    value = requests.get(name)
    return default if value is None else value


def _read(elastic: Mapping[str, Any]) -> tuple[AutoscalePolicy | None, list[FieldError]]:
    trigger = _mapping(elastic.get("scaleTrigger"))
    if trigger.get("requests") is None:
        return None, []
    errors: list[FieldError] = []
    if trigger.get("hpa") is not None:
        errors.append(forbidden(TRIGGER_PATH, BOTH_TRIGGERS))
    requests = _mapping(trigger.get("requests"))

    def check(name: str, value: Any, parsed: float | None, ok: bool, rule: str) -> float:
        if parsed is None or not ok:
            errors.append(invalid(f"{REQUESTS_PATH}.{name}", value, rule))
            return math.nan
        return parsed

    target = requests.get("targetPerReplica")
    number = _number(target)
    target_per_replica = check("targetPerReplica", target, number, number is not None and number > 0, TARGET_RULE)
    windows = {}
    for name, default in (("stableWindow", c.AUTOSCALE_STABLE_WINDOW), ("panicWindow", c.AUTOSCALE_PANIC_WINDOW)):
        value = _field(requests, name, default)
        seconds = _seconds(value)
        windows[name] = check(name, value, seconds, seconds is not None and seconds > 0, WINDOW_RULE)
    stable, panic = windows["stableWindow"], windows["panicWindow"]
    if panic >= stable:  # False when either is NaN: already reported
        value = _field(requests, "panicWindow", c.AUTOSCALE_PANIC_WINDOW)
        errors.append(invalid(f"{REQUESTS_PATH}.panicWindow", value, PANIC_BELOW_STABLE))
    threshold = _field(requests, "panicThreshold", c.AUTOSCALE_PANIC_THRESHOLD)
    number = _number(threshold)
    panic_threshold = check("panicThreshold", threshold, number, number is not None and number > 1, THRESHOLD_RULE)
    delay = _field(requests, "scaleDownDelay", c.AUTOSCALE_SCALE_DOWN_DELAY)
    scale_down_delay = check("scaleDownDelay", delay, _seconds(delay), True, DELAY_RULE)
    minimum, maximum = _field(elastic, "minReplicas", 1), elastic.get("maxReplicas")
    if errors or not isinstance(minimum, int) or not isinstance(maximum, int) or not 1 <= minimum <= maximum:
        return None, errors
    policy = AutoscalePolicy(
        target_per_replica=target_per_replica,
        stable_window=stable,
        panic_window=panic,
        panic_threshold=panic_threshold,
        scale_down_delay=scale_down_delay,
        min_replicas=minimum,
        max_replicas=maximum,
    )
    return policy, errors


def autoscale_policy(playground: Mapping[str, Any]) -> AutoscalePolicy | None:
    """The Playground's policy; None when it has no `requests` trigger.

    Raises ValueError, with admission's text, when the trigger or the bounds are not a policy admission accepts.
    """
    elastic = _mapping(_mapping(playground.get("spec")).get("elasticConfig"))
    policy, errors = _read(elastic)
    if errors:
        raise ValueError(aggregate(errors))
    if policy is None and requests_trigger(playground) is not None:
        minimum = _field(elastic, "minReplicas", 1)
        raise ValueError(str(invalid(f"{ELASTIC_PATH}.minReplicas", minimum, BOUNDS_RULE)))
    return policy
