"""A request's priority band: from the `x-llmaz-priority` header, its API key's `priority`, or the default.

Bands are the integers MIN_PRIORITY to MAX_PRIORITY; a higher band is always served first. Without API keys a
request picks its band freely. With API keys, a key's `priority` is its requests' band and the highest they may
ask for; a key without one has DEFAULT_PRIORITY as both. A request may ask a lower band than its key's (a batch
job sent with a key shared with interactive use), never a higher one: a higher value is lowered to the key's.
"""

from __future__ import annotations

import re

PRIORITY_HEADER = "x-llmaz-priority"
MIN_PRIORITY = 0
MAX_PRIORITY = 9
DEFAULT_PRIORITY = 5
RANGE = f"an integer from {MIN_PRIORITY} to {MAX_PRIORITY}"
_INTEGER = re.compile(r"[+-]?[0-9]{1,3}")


class PriorityError(ValueError):
    """A priority value that is not an integer in range; the message says which range."""


def parse_priority(text: str) -> int:
    """`text` as a band, or PriorityError."""
    stripped = text.strip()
    if not _INTEGER.fullmatch(stripped) or not MIN_PRIORITY <= int(stripped) <= MAX_PRIORITY:
        raise PriorityError(f"must be {RANGE} (higher is served first)")
    return int(stripped)


def band_of(header: str | None, authenticated: bool, key_priority: int | None) -> int:
    """The band of a request: `header` (the header's value, None when absent), whether it came with an API key, and
    that key's `priority` (None when it sets none). Raises PriorityError for a header that is not a band."""
    if not authenticated:
        ceiling = MAX_PRIORITY
        own = DEFAULT_PRIORITY
    else:
        ceiling = own = DEFAULT_PRIORITY if key_priority is None else key_priority
    if header is None:
        return own
    return min(parse_priority(header), ceiling)
