"""Durations as Kubernetes users write them: Go's duration text, or a plain number of seconds."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float:
    """Seconds from a number (`90`, `1.5`) or Go duration text (`15s`, `1m30s`, `500ms`); ValueError otherwise.
    Callers check the range they accept."""
    try:
        return float(text)
    except ValueError:
        pass
    parts = _PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"invalid duration {text!r} (e.g. 15s, 1m30s, 500ms)")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
