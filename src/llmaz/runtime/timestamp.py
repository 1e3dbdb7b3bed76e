"""Kubernetes timestamps: the API's `Time` and `MicroTime` as text, and back.

The API writes RFC 3339 in UTC (`2026-11-28T13:22:05Z`, `MicroTime` with microseconds). Parsing accepts any RFC
3339 text Python reads, with or without fractions, `Z` or an offset; a text without a zone is taken as UTC, as the
API server means it. Nothing here imports the rest of the runtime: pure modules may use it.
"""

from __future__ import annotations

from datetime import UTC, datetime


def micro_time(t: datetime) -> str:
    """The API's MicroTime format: RFC 3339 with microseconds, in UTC."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: object) -> datetime | None:
    """The aware datetime of an API timestamp; None for anything that is not one (absent, empty, malformed)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
