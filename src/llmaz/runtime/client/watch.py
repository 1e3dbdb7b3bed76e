"""Decoding a watch stream: newline-delimited JSON events, one orjson decode each.

Invariants: events come out in the order the server sent them; an ERROR event is raised as the typed error of
its Status (a 410 becomes `Expired`); the iterator ends cleanly when the server closes the stream, when the
request's total timeout passes, or after `inactivity_timeout` without a byte (a half-open connection), and
raises `ApiConnectionError` when the connection breaks mid-stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import aiohttp
import orjson

from llmaz.runtime.client.errors import ApiConnectionError, error_from_status

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"


class WatchEvent(NamedTuple):
    type: str
    object: dict[str, Any]


def parse_event(line: bytes) -> WatchEvent:
    """One line of a watch stream to an event; an ERROR event raises its typed error."""
    try:
        raw = orjson.loads(line)
        etype, obj = raw["type"], raw["object"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ApiConnectionError(f"malformed watch event: {line[:200]!r}") from exc
    if etype == ERROR:
        raise error_from_status(int(obj.get("code") or 500) if isinstance(obj, dict) else 500, obj)
    return WatchEvent(etype, obj)


async def iter_events(resp: aiohttp.ClientResponse) -> AsyncIterator[WatchEvent]:
    """Events from an open watch response. The caller owns (and releases) `resp`.

    Lines are split by hand from raw chunks, so an object of any size fits (aiohttp's line reader caps lines
    at its buffer size).
    """
    buffer = b""
    try:
        async for chunk in resp.content.iter_any():
            buffer += chunk
            while (newline := buffer.find(b"\n")) >= 0:
                line, buffer = buffer[:newline], buffer[newline + 1 :]
                if line.strip():
                    yield parse_event(line)
    except TimeoutError:
        # Total timeout or inactivity: a normal end; the caller re-watches from its last resourceVersion.
        return
    except aiohttp.ClientError as exc:
        raise ApiConnectionError(f"watch stream broke: {exc!r}") from exc
    if buffer.strip():
        yield parse_event(buffer)
