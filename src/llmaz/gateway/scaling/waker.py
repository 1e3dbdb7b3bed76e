"""Waking: a request for a model with no ready endpoint asks here whether one is coming, and for one if need be.

`Waker.wake(model)` reads what the model's Playgrounds promise (`outlook`): it scales each sleeping opted-in
Playground (`llmaz.io/scale-to-zero-after`, 0 replicas) to 1, through its scale subresource as an HPA would, and
returns once those scale-ups are written how the endpoint is coming (`Coming`); the request then waits on routing
for it (`Catalog.await_endpoints`). When none is coming (no Playground, none with replicas, or replicas that
cannot become ready), it raises `NotComingError` with the reason, and the request is answered at once. Without
a `PlaygroundScale` (scale to zero off) it only reads: no Playground counts as opted in.

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
from llmaz.gateway.scaling.outlook import Coming, outlook
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.runtime.cache import Obj
from llmaz.runtime.client.errors import ApiError
from llmaz.runtime.events import NORMAL
from llmaz.runtime.log import get_logger
from llmaz.runtime.resource import object_key


class ScaleUpError(Exception):
    """A Playground could not be scaled up from zero; the message is the API server's reason."""


class NotComingError(Exception):
    """No ready endpoint is coming for the model; the message says why."""


class WakeNotAllowedError(Exception):
    """The model sleeps and the request's key may not wake it."""


class Waker:
    def __init__(self, catalog: Catalog, scale: PlaygroundScale | None) -> None:
        """`scale` None: scale to zero is off, nothing is scaled."""
        self._catalog = catalog
        self._scale = scale
        self._waking: dict[str, asyncio.Task[None]] = {}
        self._log = get_logger("llmaz.gateway.waker")

    async def wake(self, model: str, *, may_wake: bool = True) -> Coming:
        """How a ready endpoint of `model` is coming, once the scale-ups it needs are written (see the module
        docstring). Raises NotComingError when none is, ScaleUpError when a scale-up was refused, WakeNotAllowedError
        when one is needed and `may_wake` is False (nothing is scaled then)."""
        expected = outlook(self._catalog.playgrounds_serving(model), self._opted_in)
        if expected.coming is None:
            raise NotComingError(expected.reason)
        if expected.to_wake and not may_wake:
            raise WakeNotAllowedError(model)
        for task in [self._scale_up_once(pg, model) for pg in expected.to_wake]:
            try:
                await asyncio.shield(task)
            except ApiError as err:
                raise ScaleUpError(str(err)) from None
        return expected.coming

    def _opted_in(self, playground: Obj) -> bool:
        return self._scale is not None and self._scale.idle_after(playground) is not None

    def _scale_up_once(self, playground: Obj, model: str) -> asyncio.Task[None]:
        key = object_key(playground)
        task = self._waking.get(key)
        if task is None or task.done():
            task = asyncio.create_task(self._scale_up(playground, model), name=f"wake {key}")
            self._waking[key] = task
        return task

    async def _scale_up(self, playground: Obj, model: str) -> None:
        assert self._scale is not None, "only opted-in Playgrounds are woken, and only with scale to zero on"
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
