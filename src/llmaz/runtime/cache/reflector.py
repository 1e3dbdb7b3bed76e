"""List, then watch from the list's resourceVersion, forever: the producer side of an informer.

Invariants (the resourceVersion protocol, after client-go's reflector):
- The first list asks for resourceVersion "0" (served from the API server's watch cache). Later relists ask
  for the last resourceVersion seen; if the server says that one is expired (or too new for its cache), the
  reflector lists again at once with "" (a consistent read from etcd).
- Every watch starts from the last resourceVersion seen (the list's, then each event's or bookmark's), with
  bookmarks on and a random server-side timeout in [300, 600) s so that reflectors do not reconnect in step.
- A watch that ends cleanly is re-opened immediately from the last resourceVersion, without a list.
- A watch that fails with 410 Expired ends the round; the next round relists and replaces the sink's contents.
- Throttling (429) and connection failures back off, then re-watch from the last resourceVersion (the server
  is more likely unwell than our data stale). Any other failure backs off, then relists.
- Backoff: 0.8 s doubling to 30 s with jitter, reset after 2 healthy minutes (see `backoff`).
Log levels follow the error class: expiry and normal ends are debug, throttling and connection trouble info,
anything unexplained error.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from llmaz.runtime.cache.backoff import ExponentialBackoff
from llmaz.runtime.cache.interfaces import Obj
from llmaz.runtime.client.client import ObjectList
from llmaz.runtime.client.errors import (
    ApiConnectionError,
    TooManyRequests,
    is_expired,
    is_too_large_resource_version,
)
from llmaz.runtime.client.watch import ADDED, BOOKMARK, DELETED, MODIFIED, WatchEvent
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.log import get_logger

ListFunc = Callable[[str], Awaitable[ObjectList]]
WatchFunc = Callable[[str, int], AsyncIterator[WatchEvent]]

MIN_WATCH_TIMEOUT = 300


class ReflectorSink(Protocol):
    """Where the reflector delivers what it learns (the informer)."""

    def replace(self, items: list[Obj], resource_version: str) -> None: ...

    def add(self, obj: Obj) -> None: ...

    def update(self, obj: Obj) -> None: ...

    def delete(self, obj: Obj) -> None: ...


def _is_stale_rv(exc: BaseException) -> bool:
    return is_expired(exc) or is_too_large_resource_version(exc)


class Reflector:
    """`list_fn(resource_version)` lists; `watch_fn(resource_version, timeout_seconds)` streams events."""

    def __init__(
        self,
        list_fn: ListFunc,
        watch_fn: WatchFunc,
        sink: ReflectorSink,
        *,
        name: str,
        clock: Clock = REAL_CLOCK,
        rng: random.Random | None = None,
        backoff: ExponentialBackoff | None = None,
    ) -> None:
        self._list_fn = list_fn
        self._watch_fn = watch_fn
        self._sink = sink
        self._clock = clock
        self._rng = rng or random.Random()
        self._backoff = backoff or ExponentialBackoff(clock=clock, rng=self._rng)
        self._log = get_logger("llmaz.runtime.reflector").bind(reflector=name)
        self._last_rv = ""
        self._last_rv_unavailable = False

    @property
    def last_sync_resource_version(self) -> str:
        return self._last_rv

    async def run(self) -> None:
        """List and watch until cancelled."""
        while True:
            try:
                await self._list()
                await self._watch_until_expired()
            except asyncio.CancelledError:
                raise
            except ApiConnectionError as exc:
                self._log.info("list failed to connect", error=exc.message, resource_version=self._last_rv)
            except Exception as exc:
                self._log.error("list and watch failed", error=repr(exc), resource_version=self._last_rv)
            await self._backoff.wait()

    def _relist_rv(self) -> str:
        if self._last_rv_unavailable:
            return ""
        return self._last_rv or "0"

    async def _list(self) -> None:
        rv = self._relist_rv()
        try:
            result = await self._list_fn(rv)
        except Exception as exc:
            if not _is_stale_rv(exc) or rv == "":
                raise
            self._log.debug("list resource version expired, listing from etcd", resource_version=rv)
            self._last_rv_unavailable = True
            result = await self._list_fn("")
        self._last_rv_unavailable = False
        self._sink.replace(result.items, result.resource_version)
        self._last_rv = result.resource_version

    async def _watch_until_expired(self) -> None:
        """Re-watch after clean ends and recoverable failures; return when the resourceVersion is stale."""
        while True:
            timeout = int(MIN_WATCH_TIMEOUT * (1.0 + self._rng.random()))
            stream = self._watch_fn(self._last_rv, timeout)
            try:
                async for event in stream:
                    self._handle(event)
            except TooManyRequests as exc:
                self._log.info("watch throttled", retry_after=exc.retry_after, resource_version=self._last_rv)
                await self._backoff.wait()
                continue
            except ApiConnectionError as exc:
                self._log.info("watch connection failed", error=exc.message, resource_version=self._last_rv)
                await self._backoff.wait()
                continue
            except Exception as exc:
                if not _is_stale_rv(exc):
                    raise
                self._log.debug("watch resource version expired", error=str(exc), resource_version=self._last_rv)
                self._last_rv_unavailable = is_too_large_resource_version(exc)
                return
            finally:
                await _close(stream)
            self._log.debug("watch ended", resource_version=self._last_rv)

    def _handle(self, event: WatchEvent) -> None:
        obj = event.object
        etype = event.type
        if etype == ADDED:
            self._sink.add(obj)
        elif etype == MODIFIED:
            self._sink.update(obj)
        elif etype == DELETED:
            self._sink.delete(obj)
        elif etype != BOOKMARK:
            self._log.error("unknown watch event type", event_type=etype)
            return
        rv = _resource_version(obj)
        if rv:
            self._last_rv = rv


async def _close(stream: AsyncIterator[WatchEvent]) -> None:
    """Close an abandoned watch stream now (releasing its connection), not whenever it is collected."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


def _resource_version(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
