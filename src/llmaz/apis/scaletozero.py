"""The idle time a Playground opts in to scale to zero with: `llmaz.io/scale-to-zero-after: <duration>`.

The value is a duration in `llmaz.apis.duration`'s grammar (a number of seconds, or Go duration text such as `90s`,
`5m`, `1h30m`), surrounding whitespace ignored, of at least MIN_IDLE_SECONDS. The admission webhook refuses
anything else; the gateway reads the same rule for objects stored before (or without) admission.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from llmaz.apis import constants as c
from llmaz.apis.duration import parse_duration

# Shortest idle time accepted: a model that sleeps sooner spends its life loading.
MIN_IDLE_SECONDS: Final = 10.0
ACCEPTED_FORMS: Final = "seconds or h/m/s units, e.g. 300, 90s, 5m, 1h30m"
# What a valid value is, as admission says it.
IDLE_TIME_RULE: Final = f"must be a duration of at least {MIN_IDLE_SECONDS:.0f}s: {ACCEPTED_FORMS}"


def parse_idle_time(text: str) -> float:
    """Seconds of `text`; ValueError saying what is accepted when it is not a duration of at least the minimum."""
    text = text.strip()
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration: use {ACCEPTED_FORMS}") from None
    if not math.isfinite(seconds):
        raise ValueError(f"{text!r} is not a duration: use {ACCEPTED_FORMS}")
    if seconds < MIN_IDLE_SECONDS:
        raise ValueError(f"{text!r} is shorter than the minimum, {MIN_IDLE_SECONDS:.0f}s")
    return seconds


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def idle_after(playground: Mapping[str, Any]) -> float | None:
    """Seconds without a request after which the Playground sleeps; None when it has not opted in.

    Raises ValueError (naming the annotation) when the annotation is present but not a valid idle time.
    """
    value = _mapping(_mapping(playground.get("metadata")).get("annotations")).get(c.SCALE_TO_ZERO_AFTER_ANNOTATION)
    if value is None:
        return None
    try:
        return parse_idle_time(str(value))
    except ValueError as err:
        raise ValueError(f"annotation {c.SCALE_TO_ZERO_AFTER_ANNOTATION}: {err}") from None
