"""Fewest outstanding requests: send each request to the endpoint this gateway has the fewest requests on.

LLM requests vary in cost by orders of magnitude (a 5-token answer or a 4,000-token stream), so counting what
is still in flight tracks an engine's load far better than round robin. The counts are this replica's only
(`inflight.InFlight`, per endpoint); several gateway replicas each balance their own share.

Invariants:
- `pick` never returns an excluded endpoint (those already tried by a retry); among the least loaded of the
  rest it picks at random (the generator is injectable), so idle endpoints share the load instead of the
  first one in sort order taking every request that arrives while all are idle.
- Nothing awaits between a `pick` and the `InFlight.acquire` that follows it (both are synchronous), so two
  concurrent requests cannot both see the same endpoint as idle.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.prefix import RoutingKey
from llmaz.gateway.routing.routes import Endpoint


class LeastOutstanding:
    """The `least-outstanding` strategy: it reads no routing key."""

    needs_key = False

    def __init__(self, in_flight: InFlight, rng: random.Random | None = None) -> None:
        self.in_flight = in_flight
        self._rng = rng or random.Random()

    def pick(
        self, candidates: Sequence[Endpoint], exclude: Collection[Endpoint] = (), key: RoutingKey | None = None
    ) -> Endpoint | None:
        """The least loaded candidate not in `exclude`, or None when none is left."""
        best: list[Endpoint] = []
        fewest = 0
        for endpoint in candidates:
            if endpoint in exclude:
                continue
            load = self.in_flight.outstanding(endpoint)
            if not best or load < fewest:
                best, fewest = [endpoint], load
            elif load == fewest:
                best.append(endpoint)
        if not best:
            return None
        return best[0] if len(best) == 1 else self._rng.choice(best)
