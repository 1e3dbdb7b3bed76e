"""Watches Playgrounds, inference Services and LeaderWorkerSets in the bench namespace and counts how many
have reached each milestone, so a run can wait for "all N" without polling the API server.

Counters (each also kept as a timeline of (seconds since `mark()`, value) for the plots):
- `playground_progressing`, `playground_available`: Playgrounds with a `Progressing` condition / `Available=True`.
- `services`, `lws`: inference Services and LeaderWorkerSets that exist.
- `lws_round:<v>`: LeaderWorkerSets whose worker template carries `BENCH_ROUND=<v>`.
Only these summaries are kept, never whole objects, so the tracker stays cheap at any N.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from llmaz.apis import resources as r
from llmaz.runtime.client import Client, Expired
from llmaz.runtime.resource import Resource
from suite.cluster import NAMESPACE
from suite.workload import MARK_ENV

State = frozenset[str]


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c.get("type", ""): c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []}


def _lws_round(obj: dict[str, Any]) -> str | None:
    template = ((obj.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("workerTemplate") or {}
    for container in (template.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == MARK_ENV:
                return str(env.get("value"))
    return None


def summarize(resource: Resource, obj: dict[str, Any]) -> State:
    """The milestones one object has reached."""
    if resource == r.PLAYGROUNDS:
        conditions = _conditions(obj)
        return frozenset(
            name
            for name, reached in (
                ("playground_progressing", "Progressing" in conditions),
                ("playground_available", conditions.get("Available") == "True"),
            )
            if reached
        )
    if resource == r.INFERENCE_SERVICES:
        return frozenset({"services"})
    round_ = _lws_round(obj)
    return frozenset({"lws", *([f"lws_round:{round_}"] if round_ is not None else [])})


class Tracker:
    RESOURCES = (r.PLAYGROUNDS, r.INFERENCE_SERVICES, r.LEADER_WORKER_SETS)

    def __init__(self, client: Client) -> None:
        self._client = client
        self._states: dict[tuple[str, str], State] = {}
        self.counts: Counter[str] = Counter()
        self.timelines: dict[str, list[tuple[float, int]]] = {}
        self._origin = time.monotonic()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def mark(self) -> None:
        """Restart the timelines' clock (at the start of a measured phase)."""
        self._origin = time.monotonic()
        self.timelines = {}

    async def start(self) -> None:
        for resource in self.RESOURCES:
            rv = await self._relist(resource)
            self._tasks.append(asyncio.create_task(self._watch(resource, rv)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_until(self, done: Callable[[Counter[str]], bool], within: float) -> float:
        """Seconds from now until `done(counts)` holds; TimeoutError after `within` seconds."""
        started = time.monotonic()
        async with asyncio.timeout(within):
            while not done(self.counts):
                self._changed.clear()
                await self._changed.wait()
        return time.monotonic() - started

    async def _relist(self, resource: Resource) -> str:
        listed = await self._client.list(resource, NAMESPACE)
        seen = set()
        for obj in listed.items:
            seen.add(self._apply(resource, obj))
        for key in [k for k in self._states if k[0] == resource.plural and k not in seen]:
            self._set(key, frozenset())
        return listed.resource_version

    async def _watch(self, resource: Resource, rv: str) -> None:
        while True:
            try:
                async for event in self._client.watch(resource, NAMESPACE, resource_version=rv):
                    rv = event.object.get("metadata", {}).get("resourceVersion", rv)
                    if event.type == "DELETED":
                        self._set((resource.plural, event.object["metadata"]["name"]), frozenset())
                    elif event.type != "BOOKMARK":
                        self._apply(resource, event.object)
            except Expired:
                rv = await self._relist(resource)

    def _apply(self, resource: Resource, obj: dict[str, Any]) -> tuple[str, str]:
        key = (resource.plural, obj["metadata"]["name"])
        self._set(key, summarize(resource, obj))
        return key

    def _set(self, key: tuple[str, str], state: State) -> None:
        old = self._states.get(key, frozenset())
        if state == old:
            return
        self._states[key] = state
        now = time.monotonic() - self._origin
        for name in old - state:
            self.counts[name] -= 1
            self.timelines.setdefault(name, []).append((now, self.counts[name]))
        for name in state - old:
            self.counts[name] += 1
            self.timelines.setdefault(name, []).append((now, self.counts[name]))
        self._changed.set()
