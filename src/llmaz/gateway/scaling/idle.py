"""Idle detection: scale to zero the opted-in Playgrounds that have had no request for their idle time.

A controller on the runtime's controller machinery, keyed per Playground, which every gateway replica runs (no
leader election: each one knows only its own requests). Every request counts, through the gateway or not:
- the one `InFlight` count says which of the model's requests are in flight here and when one last started or
  ended here;
- the engines' own signals (`EngineActivity`, from the metrics the gateway scrapes anyway) say when the
  Playground's engines last worked: requests running or waiting, or their token counters moving. So a model used
  only by direct clients of its `-lb` Service is never idle while they use it.
`seen` is the later of the two (now, while a request is in flight here or an engine reports work). A reconcile of
an opted-in, running Playground (`llmaz.io/scale-to-zero-after`):
- moves the shared last request time to `seen` when it is a quarter of the idle time older
  (`scaletozero.needs_touch`), so the other replicas know;
- while requests are in flight here or an engine reports work, looks again a quarter of the idle time later;
- once it has been idle for its time everywhere (`scaletozero.should_sleep`: the shared time, `seen`, or its
  creation), scales it to zero with the conditional scale of `PlaygroundScale` (a concurrent change wins) and
  records `ScaledToZero`; just before the write (after the scale is read) it looks again, and does not scale down
  when a request arrived here or an engine worked since it decided: then it looks again later;
- otherwise looks again when it would become idle (`requeue_after`), unless an event comes first.
A model's requests count only for the Playgrounds it is routed to (`Catalog.routed`): a Playground whose model name
another namespace owns is judged by its own engines alone. A request that starts or ends while its model's shared
time needs moving queues the model's Playgrounds at once (`InFlight.watch`), so a request that starts and ends
between two looks is recorded all the same.
A write the API server refuses is logged and retried with the controller's backoff.
"""

from __future__ import annotations

from llmaz.apis.serving import lb_service_name, main_model
from llmaz.gateway.routing import routes
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import EngineActivity, NoSignals
from llmaz.gateway.scaling import scaletozero
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.runtime.cache import Obj
from llmaz.runtime.client.errors import ApiError
from llmaz.runtime.controller import Controller, ControllerOptions, Request, Result, Watch, enqueue_for_object
from llmaz.runtime.events import NORMAL
from llmaz.runtime.log import get_logger
from llmaz.runtime.resource import object_key

# The shortest wait before a Playground is looked at again, so that clock skew between the gateway and the API
# server's timestamps cannot spin a reconcile.
MIN_REQUEUE_SECONDS = 1.0
# An engine that worked within this of the decision to scale down counts as having worked since: the engines'
# samples and the wall clock are read at slightly different moments.
MIN_ACTIVITY_GAP = 0.001


class IdleDetector:
    """Idle detection's reconciler, one Playground key at a time (see the module docstring)."""

    def __init__(
        self, catalog: Catalog, scale: PlaygroundScale, in_flight: InFlight, activity: EngineActivity | None = None
    ) -> None:
        """`activity`: when the engines last worked (None: signals off, only this replica's requests count)."""
        self._catalog = catalog
        self._scale = scale
        self._in_flight = in_flight
        self._activity: EngineActivity = activity if activity is not None else NoSignals()
        self._log = get_logger("llmaz.gateway.idle")

    async def reconcile(self, request: Request) -> Result:
        playground = self._catalog.playground(request.namespace, request.name)
        if playground is None:
            return Result()
        idle = self._scale.idle_after(playground)
        model = main_model(playground)
        if idle is None or model is None:
            return Result()
        now = self._scale.now()
        in_flight, last_request = self._requests_of(playground, model)
        engine_idle = self._engine_idle_for(playground)
        working = in_flight > 0 or engine_idle == 0
        seen = _latest(now if in_flight else last_request, None if engine_idle is None else now - engine_idle)
        touch = seen is not None and scaletozero.needs_touch(playground, seen, idle)
        if touch and seen is not None and not await self._touch(playground, seen):
            return Result(requeue=True)
        if working:
            return Result(requeue_after=scaletozero.touch_interval(idle))
        if scaletozero.should_sleep(playground, now, idle, in_flight, seen):
            return await self._scale_down(playground, model, idle, now)
        if scaletozero.replicas(playground) == 0 or scaletozero.autoscaled(playground):
            return Result()  # asleep, or never put to sleep: only an event changes that
        idle_at = max(scaletozero.last_activity(playground), seen or 0.0) + idle
        return Result(requeue_after=max(idle_at - now, MIN_REQUEUE_SECONDS))

    def _requests_of(self, playground: Obj, model: str) -> tuple[int, float | None]:
        """This replica's requests for the Playground, in flight and when one last ended: its model's, when the
        model is routed to it; none when another namespace owns the model name (its requests go there)."""
        if not self._catalog.routed(playground):
            return 0, None
        return self._in_flight.of_model(model), self._in_flight.last_request(model)

    def _seen(self, model: str, now: float) -> float | None:
        """The last request of `model` this replica saw: now while one is in flight, else when one last ended."""
        return now if self._in_flight.of_model(model) else self._in_flight.last_request(model)

    def _engine_idle_for(self, playground: Obj) -> float | None:
        """Seconds since one of the Playground's engines last worked (0 while one does), None when none says."""
        meta = playground["metadata"]
        slices = self._catalog.slices_of(meta["namespace"], lb_service_name(meta["name"]))
        known = [
            idle_for
            for endpoint in routes.ready_endpoints(slices)
            if (idle_for := self._activity.idle_for(endpoint)) is not None
        ]
        return min(known) if known else None

    def _active_since(self, playground: Obj, model: str, decided: float) -> bool:
        """Whether a request arrived here, or an engine worked, since `decided` (the wall clock)."""
        in_flight, last_request = self._requests_of(playground, model)
        if in_flight or (last_request or 0.0) >= decided:
            return True
        engine_idle = self._engine_idle_for(playground)
        return engine_idle is not None and engine_idle < self._scale.now() - decided + MIN_ACTIVITY_GAP

    def stale_playgrounds(self, model: str) -> list[Request]:
        """The opted-in Playgrounds of `model` whose shared last request time needs moving to what this replica saw."""
        seen = self._seen(model, self._scale.now())
        if seen is None:
            return []
        found = []
        for playground in self._catalog.playgrounds_serving(model):
            idle = self._scale.idle_after(playground)
            if idle is not None and scaletozero.needs_touch(playground, seen, idle):
                meta = playground["metadata"]
                found.append(Request(meta["namespace"], meta["name"]))
        return found

    async def _touch(self, playground: Obj, seen: float) -> bool:
        try:
            await self._scale.touch(playground, seen)
        except ApiError as err:
            self._log.warning("cannot record the last request time", playground=object_key(playground), error=str(err))
            return False
        return True

    async def _scale_down(self, playground: Obj, model: str, idle: float, decided: float) -> Result:
        current = scaletozero.replicas(playground)
        key = object_key(playground)

        def still_idle() -> bool:
            return not self._active_since(playground, model, decided)

        try:
            if not await self._scale.scale_if(playground, current, 0, proceed=still_idle):
                if not still_idle():
                    self._log.info("not scaled to zero: a request arrived meanwhile", playground=key)
                    return Result(requeue_after=scaletozero.touch_interval(idle))
                return Result()  # changed meanwhile: its update event queues it again
        except ApiError as err:
            self._log.warning("cannot scale to zero", playground=key, error=str(err))
            return Result(requeue=True)
        self._log.info("scaled to zero", playground=key, idle_seconds=idle)
        self._scale.recorder.event(
            playground, NORMAL, "ScaledToZero", f"Scaled from {current} to 0 replicas: no request for {idle:.0f}s"
        )
        return Result()


def _latest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


def idle_controller(idle: IdleDetector, catalog: Catalog, in_flight: InFlight) -> Controller:
    """Idle detection as a controller over the catalog's Playgrounds, also queued by requests (see the module
    docstring)."""
    controller = Controller(
        "gateway-idle",
        idle,
        [Watch(catalog.playground_informer, enqueue_for_object(), source="playgrounds")],
        ControllerOptions(needs_leader_election=False),
    )

    def requests_changed(model: str, count: int) -> None:
        for request in idle.stale_playgrounds(model):
            controller.queue.add(request)

    in_flight.watch(requests_changed)
    return controller
