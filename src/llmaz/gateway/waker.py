"""Scale from zero on demand, and back to zero when idle, for Playgrounds that opted in (`scaletozero`).

`Waker.wake(model)` is called by the server when a routed model has no ready endpoint. It scales every opted-in
Playground of the model that runs 0 replicas to 1 (through the scale subresource, the way an HPA does) and holds
the request until an endpoint is ready or `wake_timeout` passes. `Waker.run` is the idle loop: every
`check_interval` it refreshes the shared last request time of the models this replica is serving, and scales
to zero the opted-in Playgrounds idle for their time.

Invariants:
- One scale-up per Playground however many requests arrive at once: in a replica, concurrent `wake` calls share
  one task per Playground; across replicas, the scale is patched with the resourceVersion of the read that saw
  `spec.replicas` at 0 (optimistic concurrency; a JSON patch `test` cannot express it, since the Scale object
  omits a zero count), so exactly one succeeds, and only that one records the `ScaledFromZero` Event.
- The last request time is written before the scale-up, so the idle loop of any replica never puts a model to
  sleep that was just woken.
- Scaling down is conditional the same way (`spec.replicas` unchanged since it was read), and records
  `ScaledToZero`. A Playground whose annotation is not a valid duration gets one Warning Event per value.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from llmaz.apis.resources import PLAYGROUNDS
from llmaz.apis.scaletozero import idle_after
from llmaz.apis.serving import main_model
from llmaz.gateway import errors, scaletozero
from llmaz.gateway.catalog import Catalog
from llmaz.gateway.routes import Endpoint
from llmaz.runtime.cache import Obj
from llmaz.runtime.client import Client
from llmaz.runtime.client.errors import ApiError
from llmaz.runtime.events import NORMAL, WARNING, EventRecorder
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import object_key

RBAC_RULES = (
    allow(PLAYGROUNDS, "patch"),  # the last request time annotation
    allow(PLAYGROUNDS, "get", "patch", subresource="scale"),
)
# A conditional scale re-reads and retries this often after a concurrent write to the Playground (409).
_SCALE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class WakeOptions:
    wake_timeout: float = 300.0
    """Seconds a request is held while its model wakes (504 after). Default 300."""
    check_interval: float = 5.0
    """Seconds between idle checks. Default 5."""


class Waker:
    """A Runnable (every replica runs one; no leader election): wakes models on demand, puts idle ones to sleep."""

    needs_leader_election = False

    def __init__(
        self,
        client: Client,
        catalog: Catalog,
        recorder: EventRecorder,
        options: WakeOptions | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._catalog = catalog
        self._recorder = recorder
        self.options = options or WakeOptions()
        self._now = wall_clock
        self._waking: dict[str, asyncio.Task[None]] = {}
        self._touching: dict[str, asyncio.Task[None]] = {}
        self._in_flight: Counter[str] = Counter()
        self._warned: dict[str, str] = {}
        self._log = get_logger("llmaz.gateway.waker")

    # Request path

    def started(self, model: str) -> None:
        self._in_flight[model] += 1

    def finished(self, model: str) -> None:
        self._in_flight[model] -= 1
        if self._in_flight[model] <= 0:
            del self._in_flight[model]

    async def wake(self, model: str) -> list[Endpoint]:
        """Wake the model's sleeping Playgrounds and return its ready endpoints once there are some.

        Returns [] at once when none of its Playgrounds opted in; raises an OpenAIError (504) after
        `wake_timeout`, or (503) when a scale-up was refused.
        """
        sleeping = [pg for pg in self._catalog.playgrounds_serving(model) if self._idle_after(pg) is not None]
        if not sleeping:
            return []
        tasks = [self._scale_up_once(pg, model) for pg in sleeping if scaletozero.replicas(pg) == 0]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.wake_timeout
        while not (endpoints := self._catalog.endpoints(model)):
            for task in tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise errors.wake_failed(model, str(task.exception()))
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise errors.wake_timeout(model, self.options.wake_timeout)
            await self._catalog.changed(remaining)
        return endpoints

    def _scale_up_once(self, playground: Obj, model: str) -> asyncio.Task[None]:
        key = object_key(playground)
        task = self._waking.get(key)
        if task is None or task.done():
            task = asyncio.create_task(self._scale_up(playground, model), name=f"wake {key}")
            self._waking[key] = task
        return task

    async def _scale_up(self, playground: Obj, model: str) -> None:
        await self._touch(playground)
        try:
            if not await self._scale_if(playground, 0, 1):
                return  # another replica (or a user) scaled it first
        except ApiError as err:
            self._log.error("cannot scale up", playground=object_key(playground), error=str(err))
            raise
        self._log.info("scaled from zero", playground=object_key(playground), model=model)
        self._recorder.event(
            playground, NORMAL, "ScaledFromZero", f"Scaled from 0 to 1 replica for a request for model {model}"
        )

    # Shared last request time

    async def _touch(self, playground: Obj) -> None:
        meta = playground["metadata"]
        await self._client.patch(PLAYGROUNDS, meta["name"], scaletozero.touch_patch(self._now()), meta["namespace"])

    def _touch_soon(self, playground: Obj) -> None:
        key = object_key(playground)
        if key in self._touching and not self._touching[key].done():
            return
        self._touching[key] = asyncio.create_task(self._touch_quietly(playground), name=f"touch {key}")

    async def _touch_quietly(self, playground: Obj) -> None:
        try:
            await self._touch(playground)
        except ApiError as err:
            self._log.warning("cannot record the last request time", playground=object_key(playground), error=str(err))

    # Idle loop

    async def run(self, stopping: asyncio.Event) -> None:
        try:
            while not stopping.is_set():
                if self._catalog.has_synced():
                    await self.check()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), self.options.check_interval)
        finally:
            for task in (*self._waking.values(), *self._touching.values()):
                task.cancel()

    async def check(self) -> None:
        """One pass of the idle loop over every opted-in Playground."""
        now = self._now()
        for playground in self._catalog.playgrounds():
            idle = self._idle_after(playground)
            model = main_model(playground)
            if idle is None or model is None:
                continue
            in_flight = self._in_flight.get(model, 0)
            if in_flight and scaletozero.needs_touch(playground, now, idle):
                self._touch_soon(playground)
            elif scaletozero.should_sleep(playground, now, idle, in_flight):
                await self._scale_down(playground, idle)

    async def _scale_down(self, playground: Obj, idle: float) -> None:
        current = scaletozero.replicas(playground)
        try:
            if not await self._scale_if(playground, current, 0):
                return
        except ApiError as err:
            self._log.warning("cannot scale to zero", playground=object_key(playground), error=str(err))
            return
        self._log.info("scaled to zero", playground=object_key(playground), idle_seconds=idle)
        self._recorder.event(
            playground, NORMAL, "ScaledToZero", f"Scaled from {current} to 0 replicas: no request for {idle:.0f}s"
        )

    async def _scale_if(self, playground: Obj, current: int, wanted: int) -> bool:
        """Set the replica count to `wanted` if it is `current`; True when this call made the change."""
        meta = playground["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        for _ in range(_SCALE_ATTEMPTS):
            scale = await self._client.get_scale(PLAYGROUNDS, name, namespace)
            if scaletozero.scale_replicas(scale) != current:
                return False
            try:
                await self._client.patch(
                    PLAYGROUNDS, name, scaletozero.scale_patch(scale, wanted), namespace, subresource="scale"
                )
            except ApiError as err:
                if err.status != 409:
                    raise
                continue  # the Playground changed since the read: read again
            return True
        return False

    def _idle_after(self, playground: Obj) -> float | None:
        try:
            return idle_after(playground)
        except ValueError as err:
            key, message = object_key(playground), str(err)
            if self._warned.get(key) != message:
                self._warned[key] = message
                self._log.warning("scale to zero is off for this Playground", playground=key, error=message)
                self._recorder.event(playground, WARNING, "InvalidScaleToZero", f"{message}; scale to zero is off")
            return None
