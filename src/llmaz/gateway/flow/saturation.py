"""When a model is saturated: every candidate endpoint is full, by the load its engine reports.

An endpoint whose engine's load is known (fresh engine signals) is **at capacity** when its last sample showed
requests waiting in the engine, or a utilisation (KV cache, llama.cpp's slots) at or over `utilisation`. At
capacity, what this replica sent it since the sample queues there too, and what ended here since let a waiting one
start: its queue now is `waiting + sent since - ended since`. It is **full** when that queue is at or over
`engine_waiting`. An endpoint not at capacity is never full: it is read again within the signals' interval, so a
burst sent to an idle engine is seen at the next read, and a model that is not saturated is never held.

An endpoint whose load is not known (signals off, stale, or an engine that exports nothing) counts by this replica's
own requests in flight to it: full at `endpoint_requests`.

`free_slots` is the model's room: the sum over its endpoints of what each takes before it is full, infinite when
one is not at capacity. Nothing here awaits or changes state.

With a `reserve` (requests of a band below flow control's reserved band while the reserve is kept), an endpoint
keeps its engine's last `reserve` slots free and takes nothing into the engine's own queue: where the engine says
how many slots it has (llama.cpp), its room is slots - reserve - (running + waiting + sent since - ended since);
where it does not, its room is 0 once it is at capacity (infinite before, as above); where its load is not known,
`endpoint_requests - reserve` less this replica's requests in flight to it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import LoadSignals
from llmaz.gateway.routing.routes import Endpoint

DEFAULT_ENGINE_WAITING = 4
DEFAULT_UTILISATION = 1.0
DEFAULT_ENDPOINT_REQUESTS = 256


@dataclass(frozen=True, slots=True)
class SaturationOptions:
    engine_waiting: int = DEFAULT_ENGINE_WAITING
    """Requests queued in an engine at capacity at which its endpoint is full. Default 4: the engine keeps a few
    to start the moment a running one ends, the rest wait in the gateway, by band and tenant."""
    utilisation: float = DEFAULT_UTILISATION
    """The utilisation (0-1) at which an engine counts as at capacity even with nothing waiting. Default 1.0
    (llama.cpp with every slot busy, a KV cache full)."""
    endpoint_requests: int = DEFAULT_ENDPOINT_REQUESTS
    """Requests this replica has in flight to an endpoint whose load is not known at which it is full. Default 256
    (vLLM's default batch size)."""

    def __post_init__(self) -> None:
        if self.engine_waiting < 1:
            raise ValueError(f"engine_waiting must be at least 1, got {self.engine_waiting}")
        if not 0 < self.utilisation <= 1:
            raise ValueError(f"utilisation must be above 0 and at most 1, got {self.utilisation}")
        if self.endpoint_requests < 1:
            raise ValueError(f"endpoint_requests must be at least 1, got {self.endpoint_requests}")


class Saturation:
    def __init__(self, in_flight: InFlight, signals: LoadSignals, options: SaturationOptions) -> None:
        self.in_flight = in_flight
        self.signals = signals
        self.options = options

    def room(self, endpoint: Endpoint, reserve: int = 0) -> float:
        """Requests `endpoint` takes before it is full (0 when it is), keeping `reserve` slots free (see the module
        docstring); infinite when it is not at capacity and nothing is reserved, or its slots are not known."""
        opts = self.options
        load = self.signals.load(endpoint)
        if load is None:
            return max(0, opts.endpoint_requests - reserve - self.in_flight.outstanding(endpoint))
        utilisation = load.utilisation
        at_capacity = load.waiting > 0 or (utilisation is not None and utilisation >= opts.utilisation)
        if not at_capacity and (reserve <= 0 or load.slots is None):
            return math.inf
        queued = load.waiting
        if load.observed_at is not None:
            sent = self.in_flight.acquired_since(endpoint, load.observed_at)
            queued += sent - self.in_flight.released_since(endpoint, load.observed_at)
        if reserve <= 0:
            return max(0, opts.engine_waiting - queued)
        if load.slots is None:
            return 0  # at capacity: nothing more into the engine's own queue
        return max(0, load.slots - reserve - (load.running + queued))

    def free_slots(self, candidates: Iterable[Endpoint], reserve: int = 0) -> float:
        """The requests the candidates take before every one is full, each keeping `reserve` slots free; 0
        (saturated) when there is none."""
        total = 0.0
        for endpoint in candidates:
            total += self.room(endpoint, reserve)
            if total == math.inf:
                break
        return total

    def saturated(self, candidates: Iterable[Endpoint]) -> bool:
        return self.free_slots(candidates) <= 0
