"""Scripted list and watch functions for reflector and informer tests.

Each `list`/`watch` call consumes the next scripted step and records ("list"|"watch", resourceVersion) in
`calls`, so a test can assert the exact resourceVersion protocol. When a script runs out, the call parks
forever and `exhausted` is set: the test then inspects the state reached.

Limits: there is no server behind it. Nothing checks that the resourceVersions asked for are consistent with
the scripted data, selectors are ignored, and events are replayed as written (the test is responsible for
realistic sequences). `Pause` steps sleep on the given clock to model time passing inside a healthy watch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from llmaz.runtime.client.client import ObjectList
from llmaz.runtime.client.watch import WatchEvent
from llmaz.runtime.clock import REAL_CLOCK, Clock


@dataclass(frozen=True, slots=True)
class Pause:
    """Inside a watch script: time passes (on the clock) before the next event."""

    seconds: float


WatchStep = WatchEvent | Pause | Exception


def obj(name: str, rv: str, namespace: str = "default", **extra: Any) -> dict[str, Any]:
    """A minimal namespaced object at resourceVersion `rv`."""
    meta = {"name": name, "namespace": namespace, "resourceVersion": rv, "uid": f"uid-{name}"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **extra}


def event(etype: str, name: str, rv: str, **extra: Any) -> WatchEvent:
    return WatchEvent(etype, obj(name, rv, **extra))


def bookmark(rv: str) -> WatchEvent:
    return WatchEvent("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": rv}})


class ScriptedListWatch:
    def __init__(self, clock: Clock = REAL_CLOCK) -> None:
        self._clock = clock
        self._lists: deque[ObjectList | Exception] = deque()
        self._watches: deque[list[WatchStep] | Exception] = deque()
        self.calls: list[tuple[str, str]] = []
        self.watch_timeouts: list[int] = []
        self.exhausted = asyncio.Event()

    def add_list(self, items: list[dict[str, Any]], resource_version: str) -> ScriptedListWatch:
        self._lists.append(ObjectList(items, resource_version))
        return self

    def add_list_error(self, error: Exception) -> ScriptedListWatch:
        self._lists.append(error)
        return self

    def add_watch(self, *steps: WatchStep) -> ScriptedListWatch:
        """A watch stream: events (and pauses) in order; an Exception step is raised; else it ends cleanly."""
        self._watches.append(list(steps))
        return self

    def add_watch_error(self, error: Exception) -> ScriptedListWatch:
        """A watch that fails before its first event."""
        self._watches.append(error)
        return self

    async def _park(self) -> None:
        self.exhausted.set()
        await asyncio.get_running_loop().create_future()

    async def list(self, resource_version: str) -> ObjectList:
        self.calls.append(("list", resource_version))
        if not self._lists:
            await self._park()
        step = self._lists.popleft()
        if isinstance(step, Exception):
            raise step
        return step

    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        self.calls.append(("watch", resource_version))
        self.watch_timeouts.append(timeout_seconds)
        if not self._watches:
            await self._park()
        script = self._watches.popleft()
        if isinstance(script, Exception):
            raise script
        for step in script:
            if isinstance(step, Exception):
                raise step
            if isinstance(step, Pause):
                await self._clock.sleep(step.seconds)
                continue
            yield step
