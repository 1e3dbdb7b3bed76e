"""List, then watch from the list's resourceVersion, forever: the producer side of an informer.

Invariants (the resourceVersion protocol, after client-go's reflector):
- The first list asks for resourceVersion "0" (served from the API server's watch cache). Later relists ask
  for the last resourceVersion seen; if the server says that one is expired (or too new for its cache), the
  reflector lists again at once with "" (a consistent read from etcd).
- Every watch starts from the last resourceVersion seen (the list's, then each event's or bookmark's), with
  bookmarks on and a random server-side timeout in [300, 600) s so that reflectors do not reconnect in step.
- A watch that ends cleanly is re-opened immediately from the last resourceVersion, without a list, unless it
  ended within a second without a single event: a server that closes watches at once would otherwise be
  asked hundreds of times a second, so such a watch counts as connection trouble (client-go's "very short
  watch").
- A watch that fails with 410 Expired ends the round; the next round relists and replaces the sink's contents.
- Connection failures, throttling (429) and very short watches back off, then retry the same request: a watch
  re-watches from the last resourceVersion (the server is more likely unwell than our data stale), a list
  lists again. Any other failure backs off, then relists.
- Two backoffs, one per kind of trouble, so that an outage does not slow the relist that follows it:
  connection trouble waits 0.8 s doubling to 2 s (cheap to retry, and the informer is back within seconds of
  the server, however long it was away), reset as soon as the server answers; relists wait 0.8 s doubling
  to 30 s with jitter (client-go's constants: they spare a sick server full lists), reset after two minutes
  without one.
- A list or watch refused with 404 (the resource is not served: a CRD not installed) or 403 (not allowed) is
  a problem retrying cannot fix (`problems`): with an `on_problem` callback it goes there, once per failure,
  and the next successful list reports `None`; the reflector keeps relisting on the relist backoff, so the
  cache fills by itself once someone installs the CRD or grants the rule.
Log levels follow the error class: expiry and normal ends are debug, throttling and connection trouble info
(`Connectivity` in the client says once, as a warning, that the server is gone), a reported problem debug (its
receiver logs it once), anything unexplained error.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from llmaz.runtime.backoff import Backoff, ExponentialBackoff
from llmaz.runtime.cache.interfaces import Obj
from llmaz.runtime.cache.problems import problem_reason
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
ProblemCallback = Callable[[BaseException | None], None]

MIN_WATCH_TIMEOUT = 300
# A watch that ends this soon (seconds) with no event is treated as a failure.
SHORT_WATCH = 1.0
CONNECTION_BACKOFF = Backoff(duration=0.8, factor=2.0, jitter=0.5, cap=2.0)
RELIST_BACKOFF = Backoff(duration=0.8, factor=2.0, jitter=1.0, cap=30.0)
RELIST_BACKOFF_RESET = 120.0


class ReflectorSink(Protocol):
    """Where the reflector delivers what it learns (the informer)."""

    def replace(self, items: list[Obj], resource_version: str) -> None: ...

    def add(self, obj: Obj) -> None: ...

    def update(self, obj: Obj) -> None: ...

    def delete(self, obj: Obj) -> None: ...


def _is_stale_rv(exc: BaseException) -> bool:
    return is_expired(exc) or is_too_large_resource_version(exc)


class Reflector:
    """`list_fn(resource_version)` lists; `watch_fn(resource_version, timeout_seconds)` streams events;
    `on_problem` (optional) hears of failures retrying cannot fix, and of the list that ends them (None)."""

    def __init__(
        self,
        list_fn: ListFunc,
        watch_fn: WatchFunc,
        sink: ReflectorSink,
        *,
        name: str,
        clock: Clock = REAL_CLOCK,
        rng: random.Random | None = None,
        on_problem: ProblemCallback | None = None,
    ) -> None:
        self._list_fn = list_fn
        self._on_problem = on_problem
        self._watch_fn = watch_fn
        self._sink = sink
        self._clock = clock
        self._rng = rng or random.Random()
        self._connection_backoff = ExponentialBackoff(CONNECTION_BACKOFF, clock=clock, rng=self._rng)
        self._relist_backoff = ExponentialBackoff(
            RELIST_BACKOFF, reset_after=RELIST_BACKOFF_RESET, clock=clock, rng=self._rng
        )
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
            except (ApiConnectionError, TooManyRequests) as exc:
                self._log.info(
                    "list failed to connect or was throttled", error=exc.message, resource_version=self._last_rv
                )
                await self._wait_for_connection(exc)
                continue
            except Exception as exc:
                if self._on_problem is not None and problem_reason(exc) is not None:
                    self._log.debug("list and watch failed", error=repr(exc), resource_version=self._last_rv)
                    self._on_problem(exc)
                else:
                    self._log.error("list and watch failed", error=repr(exc), resource_version=self._last_rv)
            await self._relist_backoff.wait()

    async def _wait_for_connection(self, exc: BaseException | None = None) -> None:
        """The connection backoff, or longer when the server named a delay."""
        delay = self._connection_backoff.next_delay()
        if isinstance(exc, TooManyRequests) and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        await self._clock.sleep(delay)

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
        self._connection_backoff.reset()
        self._last_rv_unavailable = False
        if self._on_problem is not None:
            self._on_problem(None)
        self._sink.replace(result.items, result.resource_version)
        self._last_rv = result.resource_version

    async def _watch_until_expired(self) -> None:
        """Re-watch after clean ends and recoverable failures; return when the resourceVersion is stale."""
        while True:
            timeout = int(MIN_WATCH_TIMEOUT * (1.0 + self._rng.random()))
            started = self._clock.now()
            events = 0
            stream = self._watch_fn(self._last_rv, timeout)
            try:
                async for event in stream:
                    if events == 0:
                        self._connection_backoff.reset()
                    events += 1
                    self._handle(event)
            except TooManyRequests as exc:
                self._log.info("watch throttled", retry_after=exc.retry_after, resource_version=self._last_rv)
                await self._wait_for_connection(exc)
                continue
            except ApiConnectionError as exc:
                self._log.info("watch connection failed", error=exc.message, resource_version=self._last_rv)
                await self._wait_for_connection()
                continue
            except Exception as exc:
                if not _is_stale_rv(exc):
                    raise
                self._log.debug("watch resource version expired", error=str(exc), resource_version=self._last_rv)
                self._last_rv_unavailable = is_too_large_resource_version(exc)
                return
            finally:
                await _close(stream)
            if events == 0 and self._clock.now() - started < SHORT_WATCH:
                self._log.info("watch closed at once without events", resource_version=self._last_rv)
                await self._wait_for_connection()
                continue
            self._connection_backoff.reset()
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
