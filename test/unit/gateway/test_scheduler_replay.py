"""The two strategies pick, request after request, exactly what they picked before they became configurations of
one Scheduler: a recorded sequence of 1,000 requests each (keyed and keyless, retries excluding endpoints, a changed
endpoint set, engine loads fresh, stale and missing, requests held and ending) replays to the same picks.

The picks were recorded from the strategies' own classes before the Scheduler existed, and the prefix-aware ones
again when prefix homes (`homes.PrefixHomes`) replaced the ring's first endpoint within the bound and an engine
with a free slot stayed within it
(`fixtures/scheduler_picks.json`); the scenario is rebuilt here from its seeds, so only the picks are stored.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llmaz.apis.routing import RoutingWeights
from llmaz.gateway.routing.balancer import LeastOutstanding
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import EngineLoad
from llmaz.gateway.routing.picker import PrefixAware
from llmaz.gateway.routing.prefix import RoutingKey, routing_key
from llmaz.gateway.routing.routes import Endpoint

FIXTURE = Path(__file__).parent / "fixtures" / "scheduler_picks.json"
ENDPOINTS = [Endpoint(f"10.1.0.{i}", 8000) for i in range(1, 9)]
REQUESTS = 1000
SCENARIOS = {
    "least-outstanding": None,
    "prefix-aware 3/2/2 x1.25": (RoutingWeights(), 1.25),
    "prefix-aware 1/2/2 x1.0": (RoutingWeights(prefix=1, queue=2, utilisation=2), 1.0),
    "prefix-aware 5/0/1 x2": (RoutingWeights(prefix=5, queue=0, utilisation=1), 2.0),
}


@dataclass
class Signals:
    loads: dict[Endpoint, EngineLoad] = field(default_factory=dict)

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        return self.loads.get(endpoint)


def _key(rng: random.Random) -> RoutingKey | None:
    if rng.random() < 0.1:
        return None  # no prompt: routed by load alone
    system = f"System prompt {rng.randrange(6)}. " * rng.randrange(2, 12)
    turns = [{"role": "system", "content": system}]
    for turn in range(rng.randrange(1, 4)):
        turns.append({"role": "user", "content": f"question {rng.randrange(40)} of turn {turn}"})
    session = f"s{rng.randrange(20)}" if rng.random() < 0.3 else None
    return routing_key({"messages": turns}, session)


def replay(name: str) -> list[int]:
    """The scenario `name`, its picks as positions in ENDPOINTS (-1: none)."""
    rng = random.Random(name)
    now = [1000.0]
    in_flight = InFlight(clock=lambda: now[0])
    signals = Signals()
    setting = SCENARIOS[name]
    if setting is None:
        picker: LeastOutstanding | PrefixAware = LeastOutstanding(in_flight, random.Random(1))
    else:
        weights, load_factor = setting
        picker = PrefixAware(in_flight, signals, weights, load_factor, rng=random.Random(1))
    held: list[Endpoint] = []
    picks: list[int] = []
    for _ in range(REQUESTS):
        now[0] += rng.expovariate(20)
        for each in ENDPOINTS:
            chance = rng.random()
            if chance < 0.2:
                signals.loads.pop(each, None)  # not known: stale or never read
            elif chance < 0.6:
                used = rng.random() if rng.random() < 0.7 else None
                signals.loads[each] = EngineLoad(
                    rng.randrange(6), rng.randrange(3), used, observed_at=now[0] - rng.random()
                )
        candidates = ENDPOINTS if rng.random() < 0.8 else ENDPOINTS[:6]
        exclude = set(rng.sample(candidates, rng.randrange(1, 4))) if rng.random() < 0.2 else set()
        endpoint = picker.pick(candidates, exclude, _key(rng))
        picks.append(-1 if endpoint is None else ENDPOINTS.index(endpoint))
        if endpoint is not None and rng.random() < 0.8:
            in_flight.acquire(endpoint)
            held.append(endpoint)
        while held and (len(held) > 12 or rng.random() < 0.3):
            in_flight.release(held.pop(rng.randrange(len(held))))
    return picks


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_strategy_picks_what_it_picked_before_on_a_recorded_sequence(name: str) -> None:
    recorded = json.loads(FIXTURE.read_text())[name]
    assert len(recorded) == REQUESTS
    assert replay(name) == recorded


if __name__ == "__main__":  # records the fixture: run once, from the code whose picks are the reference
    FIXTURE.write_text(json.dumps({name: replay(name) for name in SCENARIOS}) + "\n")
