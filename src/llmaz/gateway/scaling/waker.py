"""Waking: a request for a model with no ready endpoint asks here for at least one replica, and nothing more.

`Waker.wake(model)` scales each opted-in Playground of the model (`llmaz.io/scale-to-zero-after`) that runs 0
replicas to 1, through its scale subresource as an HPA would, and returns True once those scale-ups are written;
the request then waits on routing for an endpoint (`Catalog.await_endpoints`). It returns False at once when no
Playground of the model opted in: nothing is going to bring an endpoint, and the request is answered at once.

Invariants:
- One scale-up per Playground however many requests arrive at once: in a replica, concurrent `wake` calls share
  one task per Playground (a request that goes away does not cancel it); across replicas, the conditional scale
  (`PlaygroundScale.scale_if`) lets exactly one succeed, and only that one records the `ScaledFromZero` Event.
- The last request time is written before the scale-up, so idle detection in any replica never puts a model to
  sleep that was just woken.
- A scale-up the API server refuses is a `ScaleUpError` carrying its reason, for every request waiting on it.
"""

from __future__ import annotations

import asyncio

from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.scaling import scaletozero
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.runtime.cache import Obj
from llmaz.runtime.client.errors import ApiError
from llmaz.runtime.events import NORMAL
from llmaz.runtime.log import get_logger
from llmaz.runtime.resource import object_key


class ScaleUpError(Exception):
    """A Playground could not be scaled up from zero; the message is the API server's reason."""


class Waker:
    def __init__(self, catalog: Catalog, scale: PlaygroundScale) -> None:
        self._catalog = catalog
        self._scale = scale
        self._waking: dict[str, asyncio.Task[None]] = {}
        self._log = get_logger("llmaz.gateway.waker")

    async def wake(self, model: str) -> bool:
        """Ask for a replica of the model's sleeping Playgrounds (see the module docstring); False when none opted in.

        Raises ScaleUpError when a scale-up was refused.
        """
        opted_in = [pg for pg in self._catalog.playgrounds_serving(model) if self._scale.idle_after(pg) is not None]
        if not opted_in:
            return False
        for task in [self._scale_up_once(pg, model) for pg in opted_in if scaletozero.replicas(pg) == 0]:
            try:
                await asyncio.shield(task)
            except ApiError as err:
                raise ScaleUpError(str(err)) from None
        return True

    def _scale_up_once(self, playground: Obj, model: str) -> asyncio.Task[None]:
        key = object_key(playground)
        task = self._waking.get(key)
        if task is None or task.done():
            task = asyncio.create_task(self._scale_up(playground, model), name=f"wake {key}")
            self._waking[key] = task
        return task

    async def _scale_up(self, playground: Obj, model: str) -> None:
        await self._scale.touch(playground)
        try:
            if not await self._scale.scale_if(playground, 0, 1):
                return  # another replica (or a user) scaled it first
        except ApiError as err:
            self._log.error("cannot scale up", playground=object_key(playground), error=str(err))
            raise
        self._log.info("scaled from zero", playground=object_key(playground), model=model)
        self._scale.recorder.event(
            playground, NORMAL, "ScaledFromZero", f"Scaled from 0 to 1 replica for a request for model {model}"
        )
