"""The autoscaler: scales the Playgrounds whose `elasticConfig.scaleTrigger` is `requests` on their engines' load.

One gateway replica decides, the holder of the Lease `llmaz-gateway-autoscaler` in the gateway's namespace: the
others serve requests as before and wait for the Lease. The election is the runtime's (`LeaderElector`), held by
this runnable rather than by the Manager, because the Manager's election ends the process when the Lease is lost,
which is right for controllers and wrong for a replica that is serving requests: losing the Lease here only stops
the deciding, and the replica goes back to waiting for it. Writes go through a client that refuses them once
leadership has lapsed. On a clean stop the Lease is released, so another replica takes over at once.

While leading, every `interval` seconds, for each such Playground (`llmaz.apis.validation.autoscale` reads its
policy; a stored policy admission would deny is skipped, with one Warning Event `InvalidAutoscaling` per value):
- the load is the sum, over the ready endpoints of its `-lb` Service, of the requests each engine holds (running
  plus waiting, `LoadSignals`), where an engine's signal is not known this gateway's own requests in flight to it
  (`InFlight.outstanding`), plus the requests for its model that flow control holds in this gateway replica
  (`held`: queued while the model is saturated, or while it wakes or its replicas start; shared evenly between
  the Playgrounds its model is routed to), which the engines do not see; when no endpoint's signal is known and
  nothing is held (or there is no ready endpoint and nothing is held) the load is not known, which is logged once
  when it starts and once when it ends, and shown by a gauge;
- `autoscale.Scaler` decides (see there for the windows, panic, the delay and the bounds), panic counting only the
  ready endpoints as capacity (replicas still starting or loading carry no load yet);
- when the count changes, it is written through the scale subresource, only if it is still the count read
  (`PlaygroundScale.scale_if`: someone else's change wins, and is read next time), with an Event `ScaledUp` or
  `ScaledDown` saying from what to what, the load and the window that decided.
A new leader starts each Playground from its current count and a fresh history (so it waits a whole
scaleDownDelay before scaling anything down). The gauges (`AutoscalerMetrics`) are labelled by Playground
(`namespace/name`) and removed when a Playground stops being autoscaled or this replica stops leading.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from llmaz.apis.resources import PLAYGROUNDS
from llmaz.apis.scaletozero import idle_after
from llmaz.apis.serving import lb_service_name, main_model
from llmaz.apis.validation.autoscale import AutoscalePolicy, autoscale_policy
from llmaz.gateway.routing import routes
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import LoadSignals
from llmaz.gateway.scaling import scaletozero
from llmaz.gateway.scaling.autoscale import Decision, Scaler, Window
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.runtime.cache import Obj
from llmaz.runtime.client import Client
from llmaz.runtime.client.errors import ApiError
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.events import NORMAL, WARNING, EventRecorder
from llmaz.runtime.leaderelection import (
    LEASES,
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLostError,
    default_identity,
)
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import object_key
from llmaz.runtime.runnable import grace_remains

LEASE_NAME = "llmaz-gateway-autoscaler"
DEFAULT_INTERVAL = 2.0
RBAC_RULES = (
    # Its own Lease only; a create cannot be limited by name (config/gateway's admission policy limits it).
    allow(LEASES, "get", "update", names=(LEASE_NAME,), own_namespace=True),
    allow(LEASES, "create", own_namespace=True),
    allow(PLAYGROUNDS, "get", "patch", subresource="scale"),
)


@dataclass(frozen=True, slots=True)
class AutoscalerOptions:
    lease_namespace: str
    """Where the Lease is: the gateway's own namespace."""
    interval: float = DEFAULT_INTERVAL
    """Seconds between two decisions for every autoscaled Playground."""
    scale_to_zero: bool = True
    """Whether the gateway scales opted-in Playgrounds to zero (then one asleep stays asleep)."""
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class AutoscalerMetrics:
    """The gauges of the latest decision per Playground (label `playground`, `namespace/name`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        by_playground = ["playground"]
        self.desired = Gauge(
            "llmaz_gateway_autoscaler_desired_replicas", "Replicas the autoscaler decided.", by_playground,
            registry=registry,
        )  # fmt: skip
        self.current = Gauge(
            "llmaz_gateway_autoscaler_current_replicas", "Replicas the Playground had when the autoscaler decided.",
            by_playground, registry=registry,
        )  # fmt: skip
        self.load = Gauge(
            "llmaz_gateway_autoscaler_load",
            "Requests (running plus waiting) averaged over the window that decided; absent while not known.",
            by_playground,
            registry=registry,
        )
        self.window = Gauge(
            "llmaz_gateway_autoscaler_window",
            "1 for the window that decided (stable, panic, no-signal, asleep), 0 for the others.",
            ["playground", "window"],
            registry=registry,
        )
        self.signal_missing = Gauge(
            "llmaz_gateway_autoscaler_signal_missing",
            "1 while the load of a Playground is not known (no engine signal, no ready endpoint): its count is held.",
            by_playground,
            registry=registry,
        )
        self.max_replicas = Gauge(
            "llmaz_gateway_autoscaler_max_replicas", "The Playground's elasticConfig.maxReplicas.", by_playground,
            registry=registry,
        )  # fmt: skip
        self.target = Gauge(
            "llmaz_gateway_autoscaler_target_per_replica",
            "Requests (running plus waiting) one replica should carry: the trigger's targetPerReplica.",
            by_playground,
            registry=registry,
        )

    def record(self, key: str, decision: Decision, policy: AutoscalePolicy) -> None:
        self.desired.labels(key).set(decision.desired)
        self.max_replicas.labels(key).set(policy.max_replicas)
        self.target.labels(key).set(policy.target_per_replica)
        self.current.labels(key).set(decision.current)
        if decision.load is None:
            with contextlib.suppress(KeyError):
                self.load.remove(key)
        else:
            self.load.labels(key).set(decision.load)
        for window in Window:
            self.window.labels(key, window.value).set(1 if window is decision.window else 0)

    def forget(self, key: str) -> None:
        for gauge in (self.desired, self.current, self.load, self.signal_missing, self.max_replicas, self.target):
            with contextlib.suppress(KeyError):
                gauge.remove(key)
        for window in Window:
            with contextlib.suppress(KeyError):
                self.window.remove(key, window.value)


class Autoscaler:
    """The runnable (see the module docstring). `tick` is one round of decisions, for tests to drive."""

    needs_leader_election = False  # it holds its own Lease: see the module docstring

    def __init__(
        self,
        catalog: Catalog,
        client: Client,
        recorder: EventRecorder,
        signals: LoadSignals,
        in_flight: InFlight,
        options: AutoscalerOptions,
        metrics: AutoscalerMetrics,
        clock: Clock = REAL_CLOCK,
        *,
        held: Callable[[str], int] | None = None,
    ) -> None:
        """`held(model)`: the requests for `model` that flow control holds in this replica (None: flow control off,
        nothing is held)."""
        self._catalog = catalog
        self._held = held
        self._client = client
        self._recorder = recorder
        self._signals = signals
        self._in_flight = in_flight
        self.options = options
        self._metrics = metrics
        self._clock = clock
        self._scalers: dict[str, Scaler] = {}
        self._missing: set[str] = set()
        self._warned: dict[str, str] = {}
        self._log = get_logger("llmaz.gateway.autoscaler")

    async def run(self) -> None:
        o = self.options
        config = LeaderElectionConfig(
            name=LEASE_NAME,
            namespace=o.lease_namespace,
            identity=o.identity,
            lease_duration=o.lease_duration,
            renew_deadline=o.renew_deadline,
            retry_period=o.retry_period,
            release_on_cancel=True,
        )
        deciding: asyncio.Future[None] | None = None

        def stopped_leading() -> None:
            if deciding is not None:
                deciding.cancel()

        elector = LeaderElector(self._client, config, self._clock, on_stopped_leading=stopped_leading)
        scale = PlaygroundScale(self._client.guarded(elector.check_leading), self._recorder)
        try:
            while True:
                await elector.acquire()
                deciding = asyncio.ensure_future(self._decide_while_leading(scale))
                renewing = asyncio.ensure_future(elector.hold())
                try:
                    await asyncio.wait([deciding, renewing], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (deciding, renewing):
                        task.cancel()
                    await asyncio.gather(deciding, renewing, return_exceptions=True)
                    self._forget_all()
                failure = None if deciding.cancelled() else deciding.exception()
                if failure is not None and not isinstance(failure, LeadershipLostError):
                    raise failure
                deciding = None
                self._log.warning("stopped deciding: this replica no longer holds the autoscaler's Lease")
        finally:
            if grace_remains():
                await elector.release()

    async def _decide_while_leading(self, scale: PlaygroundScale) -> None:
        while True:
            await self.tick(scale)
            await self._clock.sleep(self.options.interval)

    async def tick(self, scale: PlaygroundScale) -> None:
        """One decision for every autoscaled Playground, written when it changes the count."""
        now = self._clock.now()
        autoscaled: set[str] = set()
        for playground in self._catalog.playgrounds():
            key = object_key(playground)
            policy = self._policy(key, playground)
            if policy is None:
                continue
            autoscaled.add(key)
            scaler = self._scalers.setdefault(key, Scaler())
            load, ready = self.load(key, playground)
            current = scaletozero.replicas(playground)
            decision = scaler.decide(now, current, load, policy, self._scale_to_zero(playground), ready=ready)
            self._metrics.record(key, decision, policy)
            if decision.changes:
                await self._apply(scale, playground, decision, policy)
        for key in set(self._scalers) - autoscaled:
            self._forget(key)

    def load(self, key: str, playground: Mapping[str, Any]) -> tuple[float | None, int]:
        """Requests the Playground's ready engines hold plus its share of those flow control holds for its model
        (None when not one engine says and nothing is held, see the module docstring), and how many ready endpoints
        it has: the replicas that count as capacity."""
        meta = playground["metadata"]
        slices = self._catalog.slices_of(meta["namespace"], lb_service_name(meta["name"]))
        held = self.held_share(key, playground)
        total, known = held, held > 0
        ready = routes.ready_endpoints(slices)
        for endpoint in ready:
            signal = self._signals.load(endpoint)
            known = known or signal is not None
            total += signal.requests if signal is not None else self._in_flight.outstanding(endpoint)
        self._note_signal(key, known)
        return (total if known else None), len(ready)

    def held_share(self, key: str, playground: Mapping[str, Any]) -> float:
        """The Playground's share of the requests flow control holds for its model: an even share between the
        Playgrounds the model is routed to, none when it is not one of them."""
        model = main_model(playground)
        if self._held is None or model is None:
            return 0.0
        held = self._held(model)
        if held <= 0:
            return 0.0
        serving = [object_key(pg) for pg in self._catalog.playgrounds_serving(model)]
        return held / len(serving) if key in serving else 0.0

    def _note_signal(self, key: str, known: bool) -> None:
        if known and key in self._missing:
            self._missing.discard(key)
            self._log.info("load known again: deciding on it", playground=key)
        elif not known and key not in self._missing:
            self._missing.add(key)
            self._log.warning("load not known (no engine signal, or no ready endpoint): holding", playground=key)
        self._metrics.signal_missing.labels(key).set(0 if known else 1)

    def _policy(self, key: str, playground: Obj) -> AutoscalePolicy | None:
        try:
            policy = autoscale_policy(playground)
        except ValueError as err:
            message = str(err)
            if self._warned.get(key) != message:
                self._warned[key] = message
                self._log.warning("not autoscaling this Playground", playground=key, error=message)
                self._recorder.event(
                    playground, WARNING, "InvalidAutoscaling", f"{message}; the autoscaler leaves it alone"
                )
            return None
        self._warned.pop(key, None)
        return policy

    def _scale_to_zero(self, playground: Mapping[str, Any]) -> bool:
        if not self.options.scale_to_zero:
            return False
        try:
            return idle_after(playground) is not None
        except ValueError:
            return False  # scale to zero is off for it (idle detection warns)

    async def _apply(
        self, scale: PlaygroundScale, playground: dict[str, Any], decision: Decision, policy: AutoscalePolicy
    ) -> None:
        key = object_key(playground)
        try:
            if not await scale.scale_if(playground, decision.current, decision.desired):
                return  # changed meanwhile: the next tick reads the new count
        except ApiError as err:
            self._log.warning("cannot scale", playground=key, desired=decision.desired, error=str(err))
            return
        reason = "ScaledUp" if decision.desired > decision.current else "ScaledDown"
        note = f"Scaled from {decision.current} to {decision.desired} replicas: " + (
            f"load not known, kept within minReplicas {policy.min_replicas} and maxReplicas {policy.max_replicas}"
            if decision.load is None
            else f"load {decision.load:g} over the {decision.window} window, "
            f"target {policy.target_per_replica:g} per replica"
        )
        self._log.info(
            "scaled",
            playground=key,
            current=decision.current,
            desired=decision.desired,
            load=decision.load,
            window=str(decision.window),
        )
        self._recorder.event(playground, NORMAL, reason, note)

    def _forget(self, key: str) -> None:
        self._scalers.pop(key, None)
        self._missing.discard(key)
        self._metrics.forget(key)

    def _forget_all(self) -> None:
        for key in list(self._scalers):
            self._forget(key)
