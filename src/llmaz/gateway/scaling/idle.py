"""Idle detection: scale to zero the opted-in Playgrounds that have had no request for their idle time.

Every `check_interval` the loop refreshes the shared last request time of the models this replica is serving
(requests in flight, read from the one `InFlight` tracker), at most every quarter of the idle time, and scales to
zero the opted-in Playgrounds idle for their time everywhere (`scaletozero.should_sleep`), with the conditional
scale of `PlaygroundScale` (a concurrent change wins), recording `ScaledToZero`.
"""

from __future__ import annotations

import asyncio
import contextlib

from llmaz.apis.serving import main_model
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.scaling import scaletozero
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.runtime.cache import Obj
from llmaz.runtime.client.errors import ApiError
from llmaz.runtime.events import NORMAL
from llmaz.runtime.log import get_logger
from llmaz.runtime.resource import object_key


class IdleDetector:
    """A Runnable (every replica runs one; no leader election)."""

    needs_leader_election = False

    def __init__(
        self, catalog: Catalog, scale: PlaygroundScale, in_flight: InFlight, *, check_interval: float = 5.0
    ) -> None:
        self._catalog = catalog
        self._scale = scale
        self._in_flight = in_flight
        self.check_interval = check_interval
        self._touching: dict[str, asyncio.Task[None]] = {}
        self._log = get_logger("llmaz.gateway.idle")

    async def run(self, stopping: asyncio.Event) -> None:
        try:
            while not stopping.is_set():
                if self._catalog.has_synced():
                    await self.check()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), self.check_interval)
        finally:
            for task in self._touching.values():
                task.cancel()

    async def check(self) -> None:
        """One pass over every opted-in Playground."""
        now = self._scale.now()
        for playground in self._catalog.playgrounds():
            idle = self._scale.idle_after(playground)
            model = main_model(playground)
            if idle is None or model is None:
                continue
            in_flight = self._in_flight.of_model(model)
            if in_flight and scaletozero.needs_touch(playground, now, idle):
                self._touch_soon(playground)
            elif scaletozero.should_sleep(playground, now, idle, in_flight):
                await self._scale_down(playground, idle)

    def _touch_soon(self, playground: Obj) -> None:
        key = object_key(playground)
        if key in self._touching and not self._touching[key].done():
            return
        self._touching[key] = asyncio.create_task(self._touch_quietly(playground), name=f"touch {key}")

    async def _touch_quietly(self, playground: Obj) -> None:
        try:
            await self._scale.touch(playground)
        except ApiError as err:
            self._log.warning("cannot record the last request time", playground=object_key(playground), error=str(err))

    async def _scale_down(self, playground: Obj, idle: float) -> None:
        current = scaletozero.replicas(playground)
        try:
            if not await self._scale.scale_if(playground, current, 0):
                return
        except ApiError as err:
            self._log.warning("cannot scale to zero", playground=object_key(playground), error=str(err))
            return
        self._log.info("scaled to zero", playground=object_key(playground), idle_seconds=idle)
        self._scale.recorder.event(
            playground, NORMAL, "ScaledToZero", f"Scaled from {current} to 0 replicas: no request for {idle:.0f}s"
        )
